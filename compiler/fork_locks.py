"""Locks that stay usable in a child made by `os.fork()`.

A fork copies the memory of every thread but runs only the forking one in the child: a
lock that another thread held at that moment (a sync, a program's run, the memory pool)
stays held in the child for ever, and the child's first sync hangs. Every lock of the
project is made here; after a fork each is reinitialized (unlocked) in the child, which
has no other thread that could be inside what it guards. (The native worker pool forgets
its parent's threads on its own: devices/cpu/native_pool.py.)
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any

_LOCKS: "weakref.WeakSet" = weakref.WeakSet()


def lock() -> Any:
    """A `threading.Lock` that a fork leaves unlocked in the child."""
    made = threading.Lock()
    _LOCKS.add(made)
    return made


def rlock() -> Any:
    """A `threading.RLock` that a fork leaves unlocked in the child."""
    made = threading.RLock()
    _LOCKS.add(made)
    return made


# LLVM's own state: llvmlite serializes every call into LLVM with one lock. Forking while
# another thread is inside LLVM would leave LLVM's state half changed in the child, so the
# fork waits (up to this long) until no thread is in an LLVM call, holding the lock over
# the fork; an LLVM call does not take our locks, so this wait cannot deadlock.
LLVM_WAIT_S = 30.0
_HELD: list = []


def _llvm_lock() -> Any:
    try:
        from llvmlite.binding import ffi
        return ffi.lib._lock._lock          # (private: there is no public handle)
    except (ImportError, AttributeError):
        return None


def _before_fork() -> None:
    held = _llvm_lock()
    if held is not None and held.acquire(timeout=LLVM_WAIT_S):
        _HELD.append(held)


def _after_in_parent() -> None:
    while _HELD:
        _HELD.pop().release()


def _reinit_in_child() -> None:
    # (CPython's own modules reinitialize their locks the same way after a fork)
    _HELD.clear()
    for made in list(_LOCKS):
        made._at_fork_reinit()
    llvm = _llvm_lock()
    if llvm is not None:
        llvm._at_fork_reinit()


os.register_at_fork(before=_before_fork, after_in_parent=_after_in_parent,
                    after_in_child=_reinit_in_child)
