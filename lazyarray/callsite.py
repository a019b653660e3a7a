"""The user's own file and line: the first stack frame outside lazyarray.

While a profile records (lazyarray/profiler.py), `SITES` maps each recorded node to the
line that recorded it, so that a profile can name the lines behind every kernel;
otherwise it is None and recording does nothing more than check it.
"""
from __future__ import annotations

import os
import sys
from typing import Any

SITES: Any = None      # a WeakKeyDictionary node -> site while a profile records


def _package_dirs() -> tuple:
    import lazyarray.compiler
    import lazyarray.devices
    import lazyarray.ops
    mods = (sys.modules["lazyarray"], lazyarray.compiler, lazyarray.devices, lazyarray.ops)
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in mods)


_DIRS: tuple = ()


def user_site(depth: int = 1) -> str:
    """'file.py:LINE' of the innermost frame that is not lazyarray's own code (every sync
    asks: the text is made once per code position, see `_site_text`), looking from the
    frame `depth` above this call (a caller that knows the frames below are its own
    skips them: each frame the walk touches is made into a frame object)."""
    if not _DIRS:
        _init_dirs()
    try:
        f = sys._getframe(depth)
    except ValueError:                  # fewer frames than that: none is the user's
        return "<unknown>"
    own = _OWN.get
    while f is not None:
        code = f.f_code
        mine = own(id(code))
        if mine is None:
            mine = _is_own(code)
        if not mine:
            return _site_text(code, f.f_lasti, f)
        f = f.f_back
    return "<unknown>"


def _init_dirs() -> None:
    global _DIRS
    _DIRS = _package_dirs()


# (id of the code, instruction offset) -> 'file.py:LINE': computing a frame's line number
# walks the code's line table, which costs more than the rest of finding the site. Keyed
# by id: hashing a code object hashes its bytecode, names and constants (nested code
# included) at every lookup, microseconds for a large function. `_CODES` holds each code
# object seen, so that no id in these tables can be reused by another while it is there.
_TEXTS: dict = {}


def _site_text(code: Any, offset: int, frame: Any) -> str:
    key = (id(code), offset)
    text = _TEXTS.get(key)
    if text is None:
        if id(code) not in _CODES:
            _is_own(code)             # holds the code (its id stays its own)
        if len(_TEXTS) > 50_000:      # code made at run time (exec, lambdas in a loop)
            _TEXTS.clear()
        text = _TEXTS[key] = f"{code.co_filename}:{frame.f_lineno}"
    return text


# id of a code object -> True when it is lazyarray's own (looked up once per code object;
# the walks call `_OWN.get(id(code))` inline, `_is_own` on a miss)
_OWN: dict = {}
_CODES: dict = {}     # id -> the code object itself, kept alive while its id is a key


def _is_own(code) -> bool:
    key = id(code)
    own = _OWN.get(key)
    if own is None:
        if not _DIRS:
            _init_dirs()
        if len(_OWN) > 50_000:       # code made at run time (exec, lambdas in a loop)
            _TEXTS.clear()           # its keys name codes about to be let go
            _OWN.clear()
            _CODES.clear()
        fn = code.co_filename
        _CODES[key] = code
        own = _OWN[key] = fn.startswith(_DIRS) or fn.startswith("<frozen")
    return own


def user_frame() -> "tuple | None":
    """(code, instruction offset) of the innermost frame that is not lazyarray's own
    code, for `format_frame` (recorded at every op: cheap, a line number is computed only
    when an error names it)."""
    return user_frame_from(4)   # add_pending's caller is lazyarray's own: start above it


def user_frame_from(depth: int) -> "tuple | None":
    """`user_frame`, the walk starting `depth` frames above the caller of this function
    (which must be lazyarray's own code, as must every frame below `depth`)."""
    if not _DIRS:
        _init_dirs()
    f = sys._getframe(depth)
    own = _OWN.get
    while f is not None:
        code = f.f_code
        mine = own(id(code))
        if mine is None:
            mine = _is_own(code)
        if not mine:
            return (code, f.f_lasti)
        f = f.f_back
    return None


def format_frame(site: "tuple | None") -> str:
    """'file.py:LINE' of a `user_frame()` result."""
    if site is None:
        return "<unknown line>"
    code, offset = site
    line = code.co_firstlineno
    for start, end, number in code.co_lines():
        if start <= offset < end and number is not None:
            line = number
            break
    return f"{code.co_filename}:{line}"


def tag(node: Any) -> None:
    """Note the user's line for `node` and for the nodes recorded with it that have no
    line yet (a composite op makes several nodes; only its result reaches a tensor). The
    walk stops at nodes with a line, so each node is visited once."""
    if SITES is not None:
        tag_new(SITES, [node], user_site())


def tag_new(sites: Any, nodes: Any, site: str) -> None:
    """Give `site` to `nodes` and the op nodes behind them that have none yet."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n is None or n.buffer is not None or not n.operands or n in sites:
            continue
        sites[n] = site
        stack.extend(n.operands)
