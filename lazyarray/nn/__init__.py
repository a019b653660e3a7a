"""`la.nn`: modules, containers, layers, losses, initializers, the functional forms, and
weight files."""
from . import functional, init, utils
from .attention import MultiheadAttention
from .containers import ModuleDict, ModuleList, ParameterDict, ParameterList
from .layers import (AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, Dropout, Embedding,
                     Flatten, GELU, Identity, LayerNorm, Linear, MaxPool2d, ReLU, Sequential,
                     Sigmoid, Softmax, Tanh, count_parameters)
from .losses import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .module import Module, Parameter
from .serialization import load, load_npz, load_safetensors, save, save_npz, save_safetensors

__all__ = ["functional", "init", "utils", "Module", "Parameter", "ModuleList", "ModuleDict",
           "ParameterList", "ParameterDict", "AvgPool2d", "BatchNorm1d", "BatchNorm2d",
           "Conv1d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU", "Identity",
           "LayerNorm", "Linear", "MaxPool2d", "MultiheadAttention", "ReLU", "Sequential",
           "Sigmoid", "Softmax", "Tanh", "count_parameters", "CrossEntropyLoss", "NLLLoss",
           "MSELoss", "L1Loss", "BCEWithLogitsLoss", "save", "load", "save_npz", "load_npz",
           "save_safetensors", "load_safetensors"]
