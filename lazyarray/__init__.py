"""lazyarray: NumPy/PyTorch-style arrays whose operations are traced, fused and compiled.

    import lazyarray as la
    x = la.asarray([[1.0, 2.0], [3.0, 4.0]])
    y = (3 * x ** 2 + 1).mean(axis=1)     # recorded, not run
    print(y)                              # sync: compiled, cached, run
"""
from . import config, devices_registry  # noqa: F401  (registers the devices)
from . import methods
from .api import *  # noqa: F401,F403
from .api import __dict__ as _api_dict
from .api import __array_namespace_info__  # noqa: F401
from .tensor import Size, Tensor
from .buckets import bucket_size, pad_to_bucket  # noqa: F401
from . import debug  # noqa: E402
from . import random, nn, optim  # noqa: E402,F401
from .vmap import vmap  # noqa: E402,F401
from . import amp, distributed  # noqa: E402,F401
from .amp import autocast  # noqa: E402,F401
from . import profiler  # noqa: E402,F401
from . import aot  # noqa: E402,F401
from .control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: E402,F401
from . import cuda  # noqa: E402,F401

methods.install()

__version__ = "0.1.0"
__array_api_version__ = "2023.12"
__all__ = [n for n in _api_dict if not n.startswith("_")] + ["Tensor", "Size", "debug",
                                                            "config", "random", "nn", "optim",
                                                            "vmap", "amp", "autocast",
                                                            "distributed", "profiler", "pad_to_bucket", "bucket_size",
                                                            "aot", "cond", "fori_loop", "scan", "switch", "while_loop",
                                                            "cuda"]
