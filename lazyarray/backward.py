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
from typing import Any, Callable, Optional

from . import runtime
from .autograd import _seed, forget_held_history
from .compiler.transforms import autodiff
from .compiler.graph import builders
from .tensor import REQUIRES_GRAD, TRAINABLE, Tensor, mark_requires_grad

_ENABLED = [True]
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
    for t, ct in zip(sources, cts):
        if ct is None:
            continue
        # .grad is a value, not a path back into this graph (as PyTorch's leaf .grad)
        g = Tensor._wrap(autodiff.stop(ct), t._state)
        old = getattr(t, "_grad", None)
        t._grad = g if old is None else Tensor._wrap(
            autodiff.stop(builders.add(old._node, g._node)), t._state)
    if not retain_graph and not runtime.TAPE_DEPTH[0]:
        forget_held_history()


def keeps_graph(order: Any, positions: Any = None, roots: Any = ()) -> bool:
    """For the runtime: does the graph of this sync (its nodes `order`; `positions`, a
    dict keyed by them, when the caller has one; `roots`, the nodes it computes) reach a
    tensor that requires grad (whose later `backward()` needs the graph kept)? If so,
    the trainable tensors that this sync computes (an optimizer's new parameters) still
    forget their own history: they are leaves for backward(), and a tape walking back to
    them then does not wander into the previous step's graph."""
    if not _ENABLED[0] or not TRAINABLE:
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

class no_grad:
    """`with la.no_grad():` (or as a decorator): what is computed inside carries no
    gradient. Its syncs forget their graphs, and the tensors it leaves pending become
    constants for every later backward() or tape."""

    enabled = False

    def __enter__(self) -> "no_grad":
        self._prev = _ENABLED[0]
        _ENABLED[0] = self.enabled
        # the weak references pending now: what is pending at exit and not among them
        # was recorded inside
        # (kept alive here, so that their ids stay theirs)
        self._kept = [list(s.pending) for s in runtime.live_states()]
        self._before = {s: {id(r) for r in refs} for s, refs in
                        zip(runtime.live_states(), self._kept)} if not self.enabled else None
        return self

    def __exit__(self, *exc: Any) -> None:
        _ENABLED[0] = self._prev
        if self._before is not None:
            _stop_recorded_since(self._before)

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
    def __init__(self, mode: bool) -> None:
        self.enabled = bool(mode)
        self._prev = _ENABLED[0]
        _ENABLED[0] = self.enabled        # also works as a plain call, as in PyTorch
        self._before = None

    def __enter__(self) -> "set_grad_enabled":
        before = self._prev
        super().__enter__()
        self._prev = before
        return self


def is_grad_enabled() -> bool:
    return _ENABLED[0]


def _stop_recorded_since(before: dict) -> None:
    for state in runtime.live_states():
        seen = before.get(state, set())
        for ref in state.pending:
            if id(ref) in seen:
                continue
            t = ref()
            if t is not None and t._node.buffer is None:
                t._node = autodiff.stop(t._node)
