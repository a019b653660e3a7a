"""`torch.optim.lr_scheduler`: lazyarray's schedulers (the same classes)."""
from __future__ import annotations

from lazyarray.optim.lr_scheduler import (CosineAnnealingLR, ExponentialLR, LambdaLR,  # noqa: F401
                                          LinearLR, LRScheduler, MultiStepLR, StepLR)
