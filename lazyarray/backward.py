"""PyTorch's gradient idiom over the same lazy graph as the tape: `requires_grad`,
`loss.backward()` filling `.grad`, `la.no_grad()`, `detach()`.

`backward()` walks back from the loss with `compiler.autodiff.vjp_graph`, exactly as
`GradientTape.gradient` does, to every live tensor that requires grad (a leaf for the
walk, as in PyTorch, where `.grad` belongs to leaves), and adds the cotangent to its
`.grad`. Nothing runs: the gradients are lazy, so forward, backward and the optimizer's
update still become one program at the next sync.

What keeps the graph alive between the forward pass and `backward()`. A sync normally
forgets the graph behind the values it computes (so a loop's history does not pile up).
A sync whose graph reaches a tensor that requires grad keeps it instead (as a tape
does), so `print(loss.item())` before `loss.backward()` works; `backward()` then lets go
of it (unless `retain_graph=True`), and so does `la.no_grad()` for what it computes. The
trainable tensors a sync computes (an optimizer's new parameters) are leaves all the same,
so no walk goes back into the previous step.
Unlike a tape, this hold does not stop donation: the old parameters an optimizer replaces
are still updated in place.
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, Optional

from . import runtime
from .autograd import _seed, forget_held_history
from .compiler.transforms import autodiff
from .compiler.graph import builders
from .tensor import REQUIRES_GRAD, TRAINABLE, Tensor, mark_requires_grad

_HELD_PRUNE_AT = [4096]


def requires_grad(t: Tensor) -> bool:
    return bool(getattr(t, "_flags", 0) & REQUIRES_GRAD)


def set_requires_grad(t: Tensor, flag: bool = True) -> Tensor:
    """`t.requires_grad_(flag)`: mark t as a leaf whose gradient `backward()` fills in."""
    if flag and not t.dtype.is_float:
        raise TypeError(f"requires_grad: only floating-point tensors can require gradients, "
                        f"got {t.dtype.name}")
    mark_requires_grad(t, flag)
    return t


def trainable() -> list:
    """The live tensors that require grad."""
    out = []
    for ref in list(TRAINABLE.values()):
        t = ref()
        if t is not None:
            out.append(t)
    return out


def grad_of(t: Tensor) -> Optional[Tensor]:
    return getattr(t, "_grad", None)


def set_grad(t: Tensor, g: Optional[Tensor]) -> None:
    if g is not None and (type(g) is not Tensor or g.shape != t.shape):
        raise ValueError(f".grad must be None or a tensor of shape {t.shape}, got "
                         f"{getattr(g, 'shape', type(g).__name__)}")
    t._grad = g


def backward(target: Tensor, gradient: Any = None, retain_graph: bool = False,
             inputs: Any = None) -> None:
    """Add d target / d t to `t.grad` for every tensor t that requires grad (or for
    `inputs`)."""
    if not isinstance(target, Tensor):
        raise TypeError(f"backward: the target must be a tensor, got {type(target).__name__}")
    seed = _seed(target, gradient, "backward", "gradient")
    sources = [t for t in (trainable() if inputs is None else list(inputs))
               if t._state is target._state]
    cts = autodiff.vjp_graph(target._node, [t._node for t in sources], seed,
                             through_sources=False)
    if all(ct is None for ct in cts):
        raise RuntimeError("backward: the target does not depend on any tensor that "
                           "requires grad (make the leaves with requires_grad=True, "
                           "la.nn.Parameter or .requires_grad_(); a value computed under "
                           "no_grad() or detach() carries no gradient)")
    filled = [t for t, ct in zip(sources, cts) if ct is not None]
    # .grad is a value, not a path back into this graph (as PyTorch's leaf .grad); the
    # sources are of the target's device, so the tensors are made together (the user's
    # line found once, not once per parameter)
    grads = Tensor._wrap_all([autodiff.stop(ct) for ct in cts if ct is not None],
                             target._state)
    for t, g in zip(filled, grads):
        old = getattr(t, "_grad", None)
        t._grad = g if old is None else Tensor._wrap(
            autodiff.stop(builders.add(old._node, g._node)), t._state)
    for hook in list(BACKWARD_END):
        fn = hook()
        if fn is None:
            BACKWARD_END.remove(hook)
        else:
            fn(filled)
    if not retain_graph and not runtime.TAPE_DEPTH[0]:
        forget_held_history()


# What runs at the end of every backward(), with the tensors whose .grad it filled (as
# PyTorch's autograd engine runs its queued callbacks): DistributedDataParallel's reducer
# averages the gradients there. Weak references to bound methods: a hook goes with its
# owner.
BACKWARD_END: list = []


def on_backward_end(method: Callable) -> None:
    """Run the bound method `method(filled_tensors)` at the end of every backward()
    while its object lives."""
    BACKWARD_END.append(weakref.WeakMethod(method))


def keeps_graph(order: Any, positions: Any = None, roots: Any = ()) -> bool:
    """For the runtime: does the graph of this sync (its nodes `order`; `positions`, a
    dict keyed by them, when the caller has one; `roots`, the nodes it computes) reach a
    tensor that requires grad (whose later `backward()` needs the graph kept)? If so,
    the trainable tensors that this sync computes (an optimizer's new parameters) still
    forget their own history: they are leaves for backward(), and a tape walking back to
    them then does not wander into the previous step's graph."""
    if not TRAINABLE:
        return False
    if len(runtime.HELD) > _HELD_PRUNE_AT[0]:
        runtime.HELD[:] = [r for r in runtime.HELD if r() is not None]
        _HELD_PRUNE_AT[0] = max(4096, 2 * len(runtime.HELD))
    # membership only. A training step's trainable tensors are its new parameters, among
    # the roots: looked for there first (a few nodes), and among all the nodes (a set of
    # a step's few hundred, when no dict of them is at hand) only when one is not.
    members = positions
    first = set(roots) if roots and positions is None else ()
    reached = []
    for ref in TRAINABLE.values():
        t = ref()
        if t is None:
            continue
        node = t._node
        if node in first:
            reached.append(node)
            continue
        if members is None:
            members = set(order)
        if node in members:
            reached.append(node)
    for node in reached:
        if node.buffer is None:          # computed by this sync: it becomes a leaf
            node.release()
    return bool(reached)


runtime.KEEPS_GRAPH[0] = keeps_graph


# ---- no_grad ----------------------------------------------------------------------------
#
# Grad mode is per thread, as in PyTorch: one thread may train while others run the model
# under no_grad(). The mode is a thread-local; what a thread records inside a block is
# noted as it is recorded (`runtime.NO_GRAD`), since the pending list is shared.

_MODE = threading.local()


class no_grad:
    """`with la.no_grad():` (or as a decorator): what this thread computes inside carries
    no gradient. The tensors it records inside become constants for every later
    backward() or tape, and those computed inside forget their graphs at the end."""

    enabled = False

    def __enter__(self) -> "no_grad":
        self._token = _enter_mode(self.enabled)
        return self

    def __exit__(self, *exc: Any) -> None:
        _leave_mode(self._token)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return fn(*args, **kwargs)
        return wrapped


class enable_grad(no_grad):
    """Gradients on again inside a `no_grad` block."""

    enabled = True


class set_grad_enabled(no_grad):
    """Sets this thread's mode at once (a plain call, as in PyTorch), and back to what it
    was at the end of a `with` block."""

    def __init__(self, mode: bool) -> None:
        self.enabled = bool(mode)
        self._token = _enter_mode(self.enabled, plain=True)

    def __enter__(self) -> "set_grad_enabled":
        noted = runtime.NO_GRAD.get(threading.get_ident())
        if noted is not None:
            noted.plain = False          # the block's own: ended with it
        return self

    def __call__(self, fn: Callable) -> Callable:
        _leave_mode(self._token)         # as a decorator it sets nothing now
        mode = self.enabled

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapped


def is_grad_enabled() -> bool:
    """Whether this thread records gradients (True unless inside no_grad())."""
    return getattr(_MODE, "enabled", True)


def _enter_mode(enabled: bool, plain: bool = False) -> tuple:
    """Set this thread's mode; what `_leave_mode` needs to restore the one before.
    `plain`: set by a plain call (`set_grad_enabled(False)` with no block), whose notes
    end when a later plain call turns gradients on again."""
    ident = threading.get_ident()
    outer = runtime.NO_GRAD.get(ident)
    token = (ident, is_grad_enabled(), outer)
    _MODE.enabled = enabled
    if not enabled:
        runtime.NO_GRAD[ident] = runtime.Recorded()
        runtime.NO_GRAD[ident].plain = plain
    elif outer is not None:
        del runtime.NO_GRAD[ident]
        if plain and outer.plain:
            _stop_recorded(outer)
    return token


def _leave_mode(token: tuple) -> None:
    ident, prev, outer = token
    noted = runtime.NO_GRAD.pop(ident, None)
    _MODE.enabled = prev
    if outer is not None:
        runtime.NO_GRAD[ident] = outer
    if noted:
        _stop_recorded(noted)


def _stop_recorded(refs: list) -> None:
    """The tensors recorded without gradients: a pending one becomes a constant for
    gradients, a computed one forgets its graph (its sync kept it, as for any graph that
    reaches a tensor requiring grad, for a later backward() of another thread's step)."""
    noted, refs[:] = list(refs), []
    refs.ids = set()
    for ref in noted:
        t = ref()
        if t is None:
            continue
        node = t._node
        if node.buffer is None:
            t._node = autodiff.stop(node)
        else:
            node.release()
