"""`la.optim`: SGD, Adam, AdamW (with PyTorch's param_groups), gradient clipping by norm,
learning-rate schedules (callables) and PyTorch's schedulers (`lr_scheduler`)."""
from . import lr_scheduler, schedules
from .adam import Adam, AdamW
from .clip import clip_grad_norm, global_norm
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm", "global_norm", "schedules",
           "lr_scheduler"]
