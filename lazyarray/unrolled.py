"""The fallback of `la.config.compiled_control_flow = False` (lazyarray/control_flow.py
has the compiled forms): the control-flow functions traced into the ordinary graph.

- `cond` with a tensor predicate traces both branches and selects (`where`);
- `fori_loop` and `scan` unroll (one program per trip count; scan reads step i with a
  runtime start, so the steps share their code);
- `while_loop` runs from the host: each iteration computes the body and the next
  condition in one program and reads the condition back.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from . import api
from .pytree import tree_flatten
from .tensor import Tensor


def _as_tensor(x: Any) -> Any:
    return x if isinstance(x, Tensor) else api.asarray(x)


def _check_same(op: str, what: str, a: Any, b: Any) -> None:
    la_, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    if len(la_) != len(lb):
        raise TypeError(f"{op}: {what} have different structures ({len(la_)} vs {len(lb)} "
                        "leaves)")
    for k, (x, y) in enumerate(zip(la_, lb)):
        x, y = _as_tensor(x), _as_tensor(y)
        if x.shape != y.shape or x.dtype is not y.dtype:
            raise TypeError(f"{op}: {what} differ at leaf {k}: {x.dtype.name}{list(x.shape)} "
                            f"vs {y.dtype.name}{list(y.shape)}")


# ---- cond ---------------------------------------------------------------------------------

def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """true_fun(*operands) if pred else false_fun(*operands) (JAX's `lax.cond`)."""
    if not isinstance(pred, Tensor):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    if pred.shape != ():
        raise TypeError(f"cond: the predicate must be a scalar, got shape {pred.shape}")
    yes, no = true_fun(*operands), false_fun(*operands)
    _check_same("cond", "the branches' results", yes, no)
    leaves_yes, rebuild = tree_flatten(yes)
    leaves_no, _ = tree_flatten(no)
    flag = pred if pred.dtype == api.bool else pred != 0
    return rebuild([api.where(flag, _as_tensor(a), _as_tensor(b))
                    for a, b in zip(leaves_yes, leaves_no)])


# ---- fori_loop and scan -------------------------------------------------------------------

def _int_bound(op: str, v: Any) -> int:
    if isinstance(v, Tensor):
        v = v.item()                 # a value read now (a sync): the trip count is static
    if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
        raise TypeError(f"{op}: loop bounds must be ints, got {type(v).__name__}")
    return int(v)


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """val = body_fun(i, val) for i in range(lower, upper) (JAX's `lax.fori_loop`)."""
    lo, hi = _int_bound("fori_loop", lower), _int_bound("fori_loop", upper)
    val = init_val
    for i in range(lo, hi):
        new = body_fun(i, val)
        _check_same("fori_loop", "body_fun's result and its input state", val, new)
        val = new
    return val


def scan(f: Callable, init: Any, xs: Any = None, length: Optional[int] = None,
         reverse: bool = False) -> tuple:
    """(carry, ys) with carry, y = f(carry, x) over the leading axis of xs (JAX's
    `lax.scan`); ys stacks the y's along a new leading axis."""
    leaves, rebuild = tree_flatten(xs) if xs is not None else ([], None)
    leaves = [_as_tensor(x) for x in leaves]
    n = scan_length(leaves, length)
    carry, ys = init, []
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        x = rebuild([leaf[i] for leaf in leaves]) if rebuild is not None else None
        new, y = f(carry, x)
        _check_same("scan", "f's carry out and carry in", carry, new)
        carry = new
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        return carry, None
    y_leaves = [tree_flatten(y)[0] for y in ys]
    _, y_rebuild = tree_flatten(ys[0])
    stacked = [api.stack([_as_tensor(step[k]) for step in y_leaves])
               for k in range(len(y_leaves[0]))]
    return carry, y_rebuild(stacked)


# ---- while_loop ---------------------------------------------------------------------------

def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """val = body_fun(val) while cond_fun(val) (JAX's `lax.while_loop`); see the module
    docstring for how it runs."""
    val = init_val
    while True:
        c = cond_fun(val)
        if isinstance(c, Tensor):
            if c.shape != ():
                raise TypeError(f"while_loop: cond_fun must return a scalar, got shape "
                                f"{c.shape}")
            c = bool(c.item())      # one sync: the last body and this condition
        if not c:
            return val
        new = body_fun(val)
        _check_same("while_loop", "body_fun's result and its input state", val, new)
        val = new




def scan_length(x_leaves: list, length: Optional[int]) -> int:
    """The trip count of a scan over `x_leaves` (their common leading axis) or `length`;
    shared by the compiled form (control_flow.py)."""
    sizes = {x.shape[0] for x in x_leaves if x.ndim}
    if any(x.ndim == 0 for x in x_leaves) or len(sizes) > 1:
        raise ValueError(f"scan: every xs leaf needs the same leading axis, got shapes "
                         f"{[x.shape for x in x_leaves]}")
    n = sizes.pop() if sizes else length
    if n is None:
        raise ValueError("scan: give xs or length")
    if length is not None and length != n:
        raise ValueError(f"scan: length {length} does not match xs's leading axis {n}")
    return int(n)
