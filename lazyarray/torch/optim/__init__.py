"""`torch.optim`: lazyarray's optimizers (PyTorch's param_groups, zero_grad/step,
state_dict) and schedulers."""
from __future__ import annotations

from lazyarray.optim import SGD, Adam, AdamW, Optimizer  # noqa: F401
from . import lr_scheduler  # noqa: F401
