"""The operations as users know them, over traced values (nodes and Python scalars).

Each public function here becomes `lazyarray.<name>`, taking and returning tensors.
"""
from . import einsum as _einsum  # the module: its function takes the name below
from . import (creation, dynamic, elementwise, indexing, linalg, manipulation, searching,
               sets, sorting, statistical, utility)
from .creation import *  # noqa: F401,F403
from .dynamic import *  # noqa: F401,F403
from .einsum import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .searching import *  # noqa: F401,F403
from .sets import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .statistical import *  # noqa: F401,F403
from .utility import *  # noqa: F401,F403

_MODULES = (creation, dynamic, _einsum, elementwise, indexing, linalg, manipulation, searching,
            sets, sorting, statistical, utility)
__all__ = sorted({name for m in _MODULES for name in m.__all__})
