"""lazyarray: NumPy/PyTorch-style arrays whose operations are traced, fused and compiled.

    import lazyarray as la
    x = la.asarray([[1.0, 2.0], [3.0, 4.0]])
    y = (3 * x ** 2 + 1).mean(axis=1)     # recorded, not run
    print(y)                              # sync: compiled, cached, run
"""
import importlib
from typing import Any

from . import config, devices_registry  # noqa: F401  (registers the devices)
from . import methods
from .api import *  # noqa: F401,F403
from .api import __dict__ as _api_dict
from .api import __array_namespace_info__  # noqa: F401
from .tensor import Size, Tensor
from .buckets import bucket_size, pad_to_bucket  # noqa: F401
from . import debug  # noqa: E402
from . import random  # noqa: E402,F401
# eager: the module's name is also the function's, and a later import of the module
# (by control_flow) would otherwise rebind `la.vmap` to the module
from .vmap import vmap  # noqa: E402,F401

methods.install()

# Submodules that recording and running ops do not need are imported on first use
# (PEP 562): `la.nn`, `from lazyarray import nn` and `import lazyarray.nn` work as
# before, while `import lazyarray` stays short. name -> (module, attribute or None).
# tests/test_frontend_imports.py checks that each is a leaf (nothing eager imports it).
_LAZY = {"nn": ("nn", None), "optim": ("optim", None),
         "amp": ("amp", None), "autocast": ("amp", "autocast"),
         "distributed": ("distributed", None), "profiler": ("profiler", None),
         "aot": ("aot", None), "cuda": ("cuda", None),
         "cond": ("control_flow", "cond"), "fori_loop": ("control_flow", "fori_loop"),
         "scan": ("control_flow", "scan"), "switch": ("control_flow", "switch"),
         "while_loop": ("control_flow", "while_loop")}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'lazyarray' has no attribute {name!r}")
    module = importlib.import_module("." + where[0], __name__)
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value        # later reads are plain attribute reads
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"
__array_api_version__ = "2025.12"
__all__ = [n for n in _api_dict if not n.startswith("_")] + ["Tensor", "Size", "debug",
                                                            "config", "random", "nn", "optim",
                                                            "vmap", "amp", "autocast",
                                                            "distributed", "profiler", "pad_to_bucket", "bucket_size",
                                                            "aot", "cond", "fori_loop", "scan", "switch", "while_loop",
                                                            "cuda"]
