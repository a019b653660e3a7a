"""Structured control flow with JAX's meanings: `while_loop`, `fori_loop`, `scan`, `cond`.

Each records one HLO control-flow op whose condition, body or branches are
sub-computations (compiler/primitives/control.py): the function is called once, on
placeholder tensors, and what it computes becomes a module. So a loop is one program
whatever its trip count -- a `while_loop` whose trip count depends on data, a
`fori_loop` over any bounds (Python ints are runtime scalars) -- compiled once, and run
on the device by a step that drives the sub-programs' kernels
(compiler/codegen/control_steps.py).

- `while_loop(cond_fun, body_fun, init_val)`: HLO `while`. Not differentiable (nor is
  JAX's: the trip count is unknown when the gradient is built).
- `fori_loop(lower, upper, body_fun, init_val)`: a `while` over a counter; the bounds are
  runtime values. Reverse-mode gradients work when the bounds are known when the
  gradient is taken (Python ints, or computed values).
- `scan(f, init, xs, length, reverse)`: a counted `while` that reads step i of `xs` with
  a dynamic slice and writes step i of `ys` with a dynamic update; differentiable (a
  reverse scan over the carries, which a forward scan stores: compiler/transforms/scan_vjp.py).
- `cond(pred, true_fun, false_fun, *operands)`: HLO `conditional` on a tensor predicate
  (only the branch taken runs); a Python bool just calls one branch.
  `switch(index, branches, *operands)` is the n-way form (index clamped).

What a traced function may do: any tensor op, reading tensors from outside (weights,
values computed before the loop: they become operands of the op, as JAX's closure
conversion makes them), and Python control flow on Python values. What it may not do:
read a traced value on the host (`.item()`, `bool()`, printing, a graph break such as
`nonzero`) -- the value does not exist yet; that raises an error naming the function.
The explicit fallback for such code is a Python loop, which runs one program per
iteration (or with `la.config.compiled_control_flow = False`, which makes these four
functions trace as before: `cond` evaluates both branches and selects, `fori_loop`/`scan`
unroll, `while_loop` reads its condition on the host each iteration). Inside a function
being vmapped they record batched control flow (compiler/transforms/control_batching.py: a loop
runs while any lane's condition holds, a branch per lane runs every branch and
selects). Random numbers
drawn inside a traced function are drawn once, when it is traced (pass keys through the
state to vary them, as in JAX).

Loop state may be a tensor or a (nested) tuple, list or dict of tensors (a pytree).

A second call with the same function (same code, and the same Python values in what it
closes over), the same operand types and the same static arguments does not trace
again: it takes the first trace's sub-computations, passing the closed-over tensors'
current values (lazyarray/trace_cache.py; anything the key cannot describe traces).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from . import api, config, runtime
from .compiler.hlo import dtypes as D
from .compiler.hlo.computation import (build_computation, depends_on, find_captured,
                                      forward_order, placeholders)
from .compiler.graph.node import Node, kept_constant, scalar_leaf
from .compiler.primitive import apply
from .pytree import tree_flatten
from .tensor import Tensor
from . import unrolled      # the fallback (config.compiled_control_flow = False)
from .trace_cache import Site


def _as_tensor(x: Any, state: Any = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return api.asarray(x, device=state.device.name if state is not None else None)


def _compiled() -> bool:
    """Whether to record HLO control flow (the setting; inside vmap too: while and
    conditional have batching rules, compiler/transforms/control_batching.py)."""
    return bool(config.compiled_control_flow)


def _state_of(leaves: Sequence[Any]) -> Any:
    for x in leaves:
        if isinstance(x, Tensor):
            return x._state
    return runtime.get_device(None)


def _leaf_tensors(op: str, tree: Any, state: Any) -> tuple:
    leaves, rebuild = tree_flatten(tree)
    out = []
    for k, x in enumerate(leaves):
        if x is None:
            raise TypeError(f"{op}: leaf {k} of the state is None; state leaves are tensors, "
                            "arrays or Python numbers")
        t = _as_tensor(x, state)
        if t._state is not state:
            raise ValueError(f"{op}: state leaf {k} is on {t._state.device.name!r} but the "
                             f"loop runs on {state.device.name!r}; move it with .to()")
        out.append(t)
    return out, rebuild


# ---- tracing a function into a sub-computation ------------------------------------------------

def _trace(op: str, what: str, state: Any, types: Sequence[Any], fn: Callable[[list], Any]
           ) -> tuple:
    """(placeholder nodes, fn's result) with fn called on placeholder tensors of `types`;
    a host read of a traced value inside fn raises an error naming `op`/`what`."""
    ph = placeholders(types)
    tensors = [Tensor._wrap(n, state) for n in ph]
    try:
        out = fn(tensors)
    except BaseException as e:
        # whatever fn traced before it failed is dropped, so no later sync meets it
        live = [t._node for t in (r() for r in state.pending) if t is not None]
        _forget(state, ph, live)
        if not isinstance(e, ValueError) or "parameter leaf without a buffer" not in str(e):
            raise
        raise RuntimeError(
            f"{op}: {what} read a traced value on the host (.item(), bool(), printing, or "
            "an op whose result shape depends on data); a compiled loop or branch computes "
            "with tensor ops only. Use a Python loop instead (one program per step), or "
            "la.config.compiled_control_flow = False") from None
    return ph, out


def _nodes_of(tree: Any) -> list:
    """The nodes of the tensors in a pytree (anything else left out)."""
    return [x._node for x in tree_flatten(tree)[0] if isinstance(x, Tensor)]


def _forget(state: Any, ph: list, outputs: list) -> None:
    """Drop the traced tensors (which depend on placeholders) from the pending list: they
    exist only inside the sub-computation and are never computed on their own."""
    inside = depends_on(ph, outputs)
    keep = []
    for r in state.pending:
        t = r()
        if t is not None and id(t._node) not in inside:
            keep.append(r)
    state.pending = keep


def _result_leaves(op: str, what: str, result: Any, types: Sequence[Any], state: Any) -> list:
    """The nodes of `result`, a pytree matching `types` (shape and dtype per leaf);
    Python numbers take the dtype of the leaf they stand for."""
    leaves, _ = tree_flatten(result)
    if len(leaves) != len(types):
        raise TypeError(f"{op}: {what} have different structures ({len(leaves)} vs "
                        f"{len(types)} leaves)")
    out = []
    for k, (x, t) in enumerate(zip(leaves, types)):
        if not isinstance(x, Tensor):
            x = api.asarray(x, dtype=t.dtype, device=state.device.name)
        if x.shape != tuple(t.shape) or x.dtype is not t.dtype:
            raise TypeError(f"{op}: {what} differ at leaf {k}: {x.dtype.name}{list(x.shape)} "
                            f"vs {t.dtype.name}{list(t.shape)} (shapes and dtypes must match)")
        out.append(x._node)
    return out


def _pred_node(op: str, c: Any, state: Any) -> Node:
    if not isinstance(c, Tensor):
        c = api.asarray(bool(c), device=state.device.name)
    if c.shape != ():
        raise TypeError(f"{op}: the condition must be a scalar, got shape {c.shape}")
    return (c if c.dtype is D.bool_ else c != 0)._node


# ---- while_loop ---------------------------------------------------------------------------------

def _while(op: str, state: Any, init: list, cond_fn: Callable, body_fn: Callable,
           scan: Any = None, site: Optional[Site] = None) -> list:
    """The gte nodes of an HLO while over `init` (nodes): cond_fn(tensors) -> a predicate,
    body_fn(tensors) -> result nodes matching `init`. With a `site` whose key was traced
    before, that trace's modules are taken and nothing is traced (trace_cache.py)."""
    entry = site.lookup() if site is not None else None
    if entry is not None:
        (cond_m, body_m), cap = entry.mods, site.captures(entry)
    else:
        cond_m, body_m, cap = _trace_while(op, state, init, cond_fn, body_fn)
        if site is not None:
            site.store((cond_m, body_m), cap)
    w = apply("while", *init, *cap, cond=cond_m, body=body_m, scan=scan)
    return [apply("get_tuple_element", w, index=k) for k in range(len(init))]


def _trace_while(op: str, state: Any, init: list, cond_fn: Callable, body_fn: Callable
                 ) -> tuple:
    """(cond module, body module, captured nodes) of cond_fn and body_fn traced."""
    ph_c, pred = _trace(op, "cond_fun", state, init, lambda ts: _pred_node(op, cond_fn(ts), state))
    try:
        ph_b, new = _trace(op, "body_fun", state, init, body_fn)
    except BaseException:
        _forget(state, ph_c, [pred])
        raise
    try:
        # one parameter list for both: the state, then every captured value
        cap = find_captured(ph_c, [pred])
        seen = {id(n) for n in cap}
        cap += [n for n in find_captured(ph_b, new) if id(n) not in seen]
        cap = _weights_read_in_place(cap, [pred] + list(new))
        cond_m = build_computation("cond", list(ph_c) + cap, [pred])
        body_m = build_computation("body", list(ph_b) + cap, list(new) + cap)
    finally:
        _forget(state, ph_c, [pred])
        _forget(state, ph_b, list(new))
    return cond_m, body_m, cap


def _weights_read_in_place(cap: list, outputs: list) -> list:
    """`cap` with each captured transpose of a computed tensor that only products read (a
    linear layer's W.T) replaced by that tensor: the transpose then stays inside the loop,
    where the product reads W as it is stored (a transposed operand of the gemm), rather
    than being copied out of the loop at every call (a 4-layer GPT's decoding loop copied
    13 MB of weights per call, and its products then read the copies)."""
    ids = {id(n) for n in cap}
    users: dict = {}
    for n in forward_order(outputs, ids):
        if id(n) not in ids:
            for o in n.operands:
                if id(o) in ids:
                    users.setdefault(id(o), set()).add(n.op)
    for n in outputs:
        if id(n) in ids:
            users.setdefault(id(n), set()).add("an output")
    out: list = []
    seen: set = set()
    for n in cap:
        if n.op == "transpose" and n.buffer is None and n.operands[0].buffer is not None \
                and users.get(id(n)) == {"dot_general"}:
            n = n.operands[0]
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
    return out


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """val = body_fun(val) while cond_fun(val) (JAX's `lax.while_loop`), one HLO `while`."""
    if not _compiled():
        return unrolled.while_loop(cond_fun, body_fun, init_val)
    state = _state_of(tree_flatten(init_val)[0])
    leaves, rebuild = _leaf_tensors("while_loop", init_val, state)
    init = [t._node for t in leaves]

    def body(ts: list) -> list:
        return _result_leaves("while_loop", "body_fun's result and its input state", body_fun(rebuild(ts)), init, state)

    site = Site("while_loop", (cond_fun, body_fun, init_val), state, init)
    outs = _while("while_loop", state, init, lambda ts: cond_fun(rebuild(ts)), body, site=site)
    return rebuild([Tensor._wrap(n, state) for n in outs])


# ---- counted loops: fori_loop and scan ----------------------------------------------------------

def _bound_node(op: str, v: Any, state: Any) -> Node:
    """An int32 scalar node of a loop bound: a Python int as a runtime scalar (another
    bound reuses the program), a tensor as its value."""
    if isinstance(v, Tensor):
        if v.shape != () or not (v.dtype.is_int or v.dtype is D.bool_):
            raise TypeError(f"{op}: a loop bound must be an integer scalar, got "
                            f"{v.dtype.name}{list(v.shape)}")
        return apply("convert", v._node, dtype=D.int32) if v.dtype is not D.int32 else v._node
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"{op}: loop bounds must be ints, got {type(v).__name__}")
    return scalar_leaf(int(v.__index__()), D.int32)


def _counted(op: str, state: Any, lower: Node, trips: Node, carry: list,
             step: Callable[[Tensor, list], list], scan_layout: tuple, site: Site) -> list:
    """A while over (i, n, *carry) for i in 0..n-1 (n = `trips`, a node): step(index
    tensor lower + i, carry tensors) -> new carry nodes. Returns the final carry nodes."""
    zero = kept_constant(0, D.int32)
    init = [zero, trips] + list(carry)

    def cond(ts: list) -> Tensor:
        return ts[0] < ts[1]

    def body(ts: list) -> list:
        i = ts[0]
        index = Tensor._wrap(apply("add", lower, i._node), state)
        new = step(index, ts[2:])
        return [(i + 1)._node, ts[1]._node] + list(new)

    outs = _while(op, state, init, cond, body, scan=scan_layout, site=site)
    return outs[2:]


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """val = body_fun(i, val) for i in range(lower, upper) (JAX's `lax.fori_loop`): one
    HLO `while` whose bounds are runtime values, so any trip count runs the same program."""
    if not _compiled():
        return unrolled.fori_loop(lower, upper, body_fun, init_val)
    state = _state_of(tree_flatten(init_val)[0] + [lower, upper])
    leaves, rebuild = _leaf_tensors("fori_loop", init_val, state)
    lo, hi = _bound_node("fori_loop", lower, state), _bound_node("fori_loop", upper, state)
    trips = apply("maximum", apply("subtract", hi, lo), kept_constant(0, D.int32))
    carry = [t._node for t in leaves]

    def step(i: Tensor, ts: list) -> list:
        return _result_leaves("fori_loop", "body_fun's result and its input state", body_fun(i, rebuild(ts)), carry, state)

    site = Site("fori_loop", (body_fun, init_val), state, carry, [lo])
    outs = _counted("fori_loop", state, lo, trips, carry, step, ("fori", len(carry), 0), site)
    return rebuild([Tensor._wrap(n, state) for n in outs])


def scan(f: Callable, init: Any, xs: Any = None, length: Optional[int] = None,
         reverse: bool = False) -> tuple:
    """(carry, ys) with carry, y = f(carry, x) over the leading axis of xs (JAX's
    `lax.scan`); ys stacks the y's along a new leading axis. One HLO `while`."""
    if not _compiled():
        return unrolled.scan(f, init, xs, length, reverse)
    x_leaves, x_rebuild = tree_flatten(xs) if xs is not None else ([], None)
    state = _state_of(tree_flatten(init)[0] + x_leaves)
    x_leaves = [_as_tensor(x, state) for x in x_leaves]
    n = unrolled.scan_length(x_leaves, length)
    leaves, rebuild = _leaf_tensors("scan", init, state)
    carry = [t._node for t in leaves]
    site = Site("scan", (f, init, xs, n, bool(reverse)), state, carry, [x._node for x in x_leaves])
    entry = site.lookup()
    if entry is not None:
        y_types, y_rebuild = entry.extra
    else:
        y_types, y_rebuild = _probe_ys(state, f, rebuild, carry, x_leaves, x_rebuild)
        site.extra = (y_types, y_rebuild)
    ys0 = [apply("broadcast_in_dim", kept_constant(0, t.dtype), shape=(n,) + t.shape,
                 broadcast_dimensions=()) for t in y_types]
    nc = len(carry)
    if n == 0:            # no step runs (f was traced for the types of ys)
        ys = [Tensor._wrap(z, state) for z in ys0]
        return rebuild(leaves), (y_rebuild(ys) if y_types else None)

    def step(i: Tensor, ts: list) -> list:
        k = (n - 1) - i if reverse else i
        x = x_rebuild([_row(x, k) for x in x_leaves]) if x_rebuild is not None else None
        new, y = f(rebuild(ts[:nc]), x)
        new_nodes = _result_leaves("scan", "f's carry out and carry in", new, carry, state)
        y_nodes = _result_leaves("scan", "f's y and its first trace", y, y_types, state) \
            if y is not None or y_types else []
        return new_nodes + [_put_row(ys, y, k) for ys, y in zip(ts[nc:], y_nodes)]

    trips = scalar_leaf(n, D.int32) if n not in (0, 1, -1) else kept_constant(n, D.int32)
    outs = _counted("scan", state, kept_constant(0, D.int32), trips, carry + ys0, step,
                    ("scan", nc, len(ys0)), site)
    final = rebuild([Tensor._wrap(o, state) for o in outs[:nc]])
    if not y_types:
        return final, None
    ys = [Tensor._wrap(o, state) for o in outs[nc:]]
    return final, y_rebuild(ys)


def _probe_ys(state: Any, f: Callable, rebuild: Callable, carry: list, x_leaves: list,
              x_rebuild: Any) -> tuple:
    """(types of f's y leaves, how to rebuild ys): f called once on placeholders, the
    trace then dropped."""
    types = list(carry) + [Node("parameter", (), x.shape[1:], x.dtype, {}) for x in x_leaves]
    nc = len(carry)
    ph, out = _trace("scan", "f", state, types, lambda ts: f(
        rebuild(ts[:nc]), x_rebuild(ts[nc:]) if x_rebuild is not None else None))
    _forget(state, ph, _nodes_of(out))
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError("scan: f must return a pair (new carry, y)")
    y_leaves, y_rebuild = tree_flatten(out[1]) if out[1] is not None else ([], None)
    y_tensors = [_as_tensor(y, state) for y in y_leaves]
    return [Node("parameter", (), y.shape, y.dtype, {}) for y in y_tensors], y_rebuild


def _row(x: Tensor, k: Tensor) -> Tensor:
    """x[k] for a traced index k (a dynamic slice)."""
    starts = [k] + [0] * (x.ndim - 1)
    return api.reshape(api.dynamic_slice(x, starts, (1,) + x.shape[1:]), x.shape[1:])


def _put_row(ys: Tensor, y: Node, k: Tensor) -> Node:
    row = apply("reshape", y, shape=(1,) + tuple(y.shape))
    zero = kept_constant(0, D.int32)
    return apply("dynamic_update_slice", ys._node, row, k._node, *([zero] * (ys.ndim - 1)))


# ---- cond and switch ----------------------------------------------------------------------------

def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """branches[index](*operands), the index clamped to the branches (JAX's
    `lax.switch`): one HLO `conditional`; only the branch taken runs."""
    branches = list(branches)
    if not branches:
        raise ValueError("switch: give at least one branch")
    if not isinstance(index, Tensor):
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    if index.shape != () or not (index.dtype.is_int or index.dtype is D.bool_):
        raise TypeError(f"switch: the index must be an integer scalar, got "
                        f"{index.dtype.name}{list(index.shape)}")
    state = index._state
    leaves, rebuild = _leaf_tensors("cond", list(operands), state) if operands else ([], None)
    args = [t._node for t in leaves]
    site = Site("cond", (tuple(branches), operands), state, args)
    entry = site.lookup()
    if entry is not None:
        mods, caps = entry.mods, site.captures(entry)
        n_out, out_rebuild = entry.extra
    else:
        mods, caps, n_out, out_rebuild = _trace_branches(state, branches, args, rebuild)
        site.extra = (n_out, out_rebuild)
        site.store(mods, caps)
    idx = index._node if index.dtype is D.int32 else apply("convert", index._node, dtype=D.int32)
    c = apply("conditional", idx, *args, *caps, branches=mods)
    return out_rebuild([Tensor._wrap(apply("get_tuple_element", c, index=k), state)
                        for k in range(n_out)])


def _trace_branches(state: Any, branches: list, args: list, rebuild: Any) -> tuple:
    """(branch modules, captured nodes, number of outputs, how to rebuild them)."""
    traced = []
    for k, b in enumerate(branches):
        ph, out = _trace("cond", f"branch {k}", state, args,
                         lambda ts, b=b: b(*rebuild(ts)) if rebuild is not None else b())
        traced.append((ph, out))
    out_leaves, out_rebuild = tree_flatten(traced[0][1])
    first = [_as_tensor(x, state) for x in out_leaves]
    results, caps = [], []
    try:
        for k, (ph, out) in enumerate(traced):
            nodes = _result_leaves("cond", "the branches' results", out,
                                   [t._node for t in first], state) \
                if k else [t._node for t in first]
            results.append(nodes)
            seen = {id(n) for n in caps}
            caps += [n for n in find_captured(ph, nodes) if id(n) not in seen]
        mods = tuple(build_computation(f"branch{k}", list(ph) + caps, nodes)
                     for k, ((ph, _), nodes) in enumerate(zip(traced, results)))
    finally:
        for ph, out in traced:
            _forget(state, ph, _nodes_of(out))
    return mods, caps, len(first), out_rebuild


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """true_fun(*operands) if pred else false_fun(*operands) (JAX's `lax.cond`): one HLO
    `conditional` on a tensor predicate; a Python bool calls one branch now."""
    if not isinstance(pred, Tensor):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    if pred.shape != ():
        raise TypeError(f"cond: the predicate must be a scalar, got shape {pred.shape}")
    if not _compiled():
        return unrolled.cond(pred, true_fun, false_fun, *operands)
    flag = pred if pred.dtype is D.bool_ else pred != 0
    return switch(flag, [false_fun, true_fun], *operands)


__all__ = ["cond", "fori_loop", "scan", "switch", "while_loop"]
