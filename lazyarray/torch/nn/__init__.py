"""`torch.nn` over lazyarray's modules (`lazyarray.nn`): the same classes, PyTorch's
names and signatures (`Module.apply`, `Embedding(padding_idx=)`, `Parameter`...)."""
from __future__ import annotations

from ..missing import missing as _missing

from lazyarray.nn import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d,  # noqa: F401
                          Embedding, GELU, Identity, LayerNorm, Linear, MaxPool2d, Module,
                          ModuleDict, ModuleList, MultiheadAttention, Parameter, ParameterDict,
                          ParameterList, ReLU, Sequential, Sigmoid, Softmax, Tanh)
from . import init  # noqa: F401
from .modules import (AdaptiveAvgPool2d, BCELoss, BCEWithLogitsLoss, CrossEntropyLoss,  # noqa: F401,F811
                      Dropout, ELU, Flatten, L1Loss, LeakyReLU, LogSoftmax, MSELoss, NLLLoss,
                      ReLU6, SiLU, SmoothL1Loss, Softplus, Unflatten)
from . import functional  # noqa: F401
from . import utils  # noqa: F401


def __getattr__(name: str) -> "Any":
    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("lazyarray.torch.nn", name)
