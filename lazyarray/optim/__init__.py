"""`la.optim`: SGD, Adam, AdamW, gradient clipping by norm, learning-rate schedules."""
from . import schedules
from .adam import Adam, AdamW
from .clip import clip_grad_norm, global_norm
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm", "global_norm", "schedules"]
