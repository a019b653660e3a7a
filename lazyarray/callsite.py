"""The user's own file and line: the first stack frame outside lazyarray."""
from __future__ import annotations

import os
import sys




def _package_dirs() -> tuple:
    import lazyarray.compiler
    import lazyarray.devices
    import lazyarray.ops
    mods = (sys.modules["lazyarray"], lazyarray.compiler, lazyarray.devices, lazyarray.ops)
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in mods)


_DIRS: tuple = ()


def user_site() -> str:
    """'file.py:LINE' of the innermost frame that is not lazyarray's own code."""
    global _DIRS
    if not _DIRS:
        _DIRS = _package_dirs()
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_DIRS) and not fn.startswith("<frozen"):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"
