"""`torch.utils`: `data` (datasets and a loader)."""
from . import data  # noqa: F401
