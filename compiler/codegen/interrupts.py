"""Sections that an interrupt must not split.

Python delivers SIGINT (Ctrl-C, `_thread.interrupt_main()`) between any two bytecodes of
the main thread. Some sequences break if cut there: a donating run that hands buffers to
a program, and llvmlite's own clean-up (`OutputString.close` frees the C string, then
marks it freed; a KeyboardInterrupt between the two leaves it marked live, and its
`__del__` frees it again: a double free, SIGABRT). Inside `InterruptsDeferred` a SIGINT
is held and delivered when the block ends; `Section` is a lock with that deferral, for
LLVM, whose contexts are not thread-safe either.
"""
from __future__ import annotations

import _signal
import signal
from typing import Any

from .. import fork_locks


class InterruptsDeferred:
    """`with InterruptsDeferred():` SIGINT arriving in the block is delivered to the
    handler that was in place when the block ends. Only the main thread receives
    signals; elsewhere this does nothing, as it does where the handler was set outside
    Python. (The C module's functions: `signal.signal` converts handlers to and from
    enums, costly at every donating step of a training loop.) One instance is entered by
    one thread at a time."""

    __slots__ = ("old", "caught")

    def __enter__(self) -> None:
        self.old = self.caught = None
        old = _signal.getsignal(signal.SIGINT)
        if old is None:                   # a handler set outside Python: leave it be
            return
        caught: list = []
        try:
            _signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
        except ValueError:                # not the main thread (of the main interpreter)
            return
        self.old, self.caught = old, caught

    def __exit__(self, *exc: Any) -> None:
        self.deliver(self.restore())

    def restore(self) -> Any:
        """Put the handler back; returns what to `deliver` (None: nothing was deferred)."""
        old, caught = self.old, self.caught
        self.caught = None
        if caught is None:
            return None
        _signal.signal(signal.SIGINT, old)
        return (old, caught[0]) if caught and callable(old) else None

    @staticmethod
    def deliver(held: Any) -> None:
        """Call the handler with the SIGINT held in the block (raises KeyboardInterrupt
        for Python's default handler)."""
        if held is not None:
            old, (signum, frame) = held
            old(signum, frame)


class Section:
    """`with section:` a lock, held with SIGINT deferred (see the module's docstring);
    the interrupt is delivered after the lock is released."""

    __slots__ = ("_lock", "_deferred")

    def __init__(self) -> None:
        self._lock = fork_locks.lock()
        self._deferred = InterruptsDeferred()    # entered only by the lock's holder

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._deferred.__enter__()
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        held = self._deferred.restore()
        self._lock.release()
        self._deferred.deliver(held)

    def locked(self) -> bool:
        return self._lock.locked()
