"""A `while` or `conditional` step as ONE CUDA graph with conditional nodes (CUDA 12.4+),
so that a loop runs on the GPU with no host round trip per iteration.

The graph of a while step is a chain of nodes:

    copy the varying state into the graph's own state buffers S
    the condition's kernels on S -> pred;  lzg_set_while(table, pred)    (handle = pred)
    WHILE node (runs its body graph while the handle is nonzero):
        the body's kernels on S -> new values, new pred   (body_then_cond: one program)
        lzg_set_while(table, new pred);  copy the new values kept apart into S

The body is compiled with its state donated (control_steps.carried_state): a state whose
new value the plan puts in the old one's buffer (program.state_buffers: written over it
in place, a KV cache's row alone, or once the old one is dead) is computed in S itself,
nothing copied; only a state the body reads after writing its new value has a second
buffer, copied back into S (docs/cuda_loops.md). A conditional step: the index's set
kernel (`lzg_set_branch`: handle k = (clamped index == k)), then one IF node per branch,
whose body runs the branch on the operands, writing its results into the step's output
buffers (those of the enclosing program, or the graph's own). The set kernels are
conditional_kernels.py's. The stream work between two conditional nodes (kernel
launches, cuBLAS calls, copies, a set kernel) is captured from the stream into a graph of
its own and added as one child-graph node (a simple loop body is one node); a
control step inside a sub-program (a nested loop, a branch in a loop) adds its own
conditional nodes inside the body graph, recursively. Every buffer the graph touches is
allocated when it is built and held by it (as a replayed graph's are, cuda_graphs.py).

The device copies a run's varying state and its small operands (a trip count, a branch
index: up to PORT_BYTES) into the graph's input buffers ("ports") and the final state out
of it, on the stream around one `cuGraphLaunch`. A step whose operands are all copied in
has one graph, built at its first run (a host-driven loop pays a read back per
iteration: the graph pays for itself within a run). A step that reads larger operands in
place (a loop's weights) keeps a graph per layout of their pointers, as replayed graphs
are kept (GraphCache), built when a layout comes back (CAPTURE_AFTER): a scan over fresh
inputs at every run stays host-driven rather than building a graph per run.

Where the driver lacks conditional nodes (`missing`), the device drives the loop from
the host (cuda.py `_while`: the condition read back asynchronously, one iteration ahead);
so it does for a sub-program with a step a graph cannot hold (a library call run on the
host), while a profile times each kernel, and with CUDA graphs turned off.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ...compiler.program import CONTROL_STEPS, ConditionalStep, LaunchStep, WhileStep
from . import conditional_kernels as ck
from .cuda_driver import check
from .cuda_graphs import GraphCache
from .step_writes import written as _written

PORT_BYTES = 4096           # operands up to this size are copied in, larger ones keyed
ENABLED = True              # False: every loop host-driven (bench/bench_cuda_loops.py's A/B)
MIN_DRIVER = 12040          # conditional nodes came with 12.3; asked of 12.4+ (the floor)
_API = ("cuDriverGetVersion", "cuGraphCreate", "cuGraphAddChildGraphNode",
        "cuGraphConditionalHandleCreate", "cuGraphAddNode", "CUgraphNodeParams")


def missing(cu: Any) -> Optional[str]:
    """None when the driver runs conditional graph nodes; else why loops run from the
    host."""
    if not ENABLED:
        return "loop graphs are turned off (cuda_loops.ENABLED, for A/B measurements)"
    absent = [name for name in _API if not hasattr(cu, name)]
    if absent:
        return f"cuda-python lacks {', '.join(absent)} (conditional nodes need 12.4+)"
    version = check(cu.cuDriverGetVersion(), "cuDriverGetVersion")
    if version < MIN_DRIVER:
        return (f"the driver supports CUDA {version // 1000}.{version % 1000 // 10}; "
                f"conditional graph nodes need 12.4")
    return None


def graphable(exe: Any, step: Any) -> bool:
    """Whether a step of a loaded program can live in a graph: a kernel launch, a cuBLAS
    product, or a control step whose sub-programs' steps all can (a loop with a body:
    one without runs forever once its condition holds, which the host-driven form
    reports)."""
    if isinstance(step, WhileStep):
        cond, body = exe.subs[id(step)]
        return body is not None and all(graphable(e, s) for e in (cond, body) for s in e.steps)
    if isinstance(step, ConditionalStep):
        return all(graphable(e, s) for e in exe.subs[id(step)] for s in e.steps)
    return isinstance(step, LaunchStep) or exe._on_cublas(step)


class LoopGraph:
    """One built graph of a control step: the instantiated graph, its input ports
    (state index -> buffer the run copies the operand into), the buffers holding the
    results by tuple index, and every buffer it holds."""

    def __init__(self, exec_graph: Any, ports: dict, final: list, held: list) -> None:
        self.exec_graph, self.ports, self.final, self.held = exec_graph, ports, final, held


class LoopGraphs:
    """The loop graphs of one executable's control steps (see the module doc)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.cache = GraphCache(lambda g: check(device.cu.cuGraphExecDestroy(g.exec_graph),
                                                "cuGraphExecDestroy"))

    def run(self, exe: Any, step: Any, values: dict) -> Optional[list]:
        """Launch the step's graph; returns the buffers holding its results by tuple
        index (valid in stream order), or None when this run is left to the host (the
        first of a layout of operands read in place; see the module doc)."""
        dev = self.device
        operands = [values[o] for o in step.operands]
        ports = {k for k, b in enumerate(operands) if b.nbytes <= PORT_BYTES}
        ports |= set(step.varying) if isinstance(step, WhileStep) else set()
        key = (id(step),) + tuple(b.ptr for k, b in enumerate(operands) if k not in ports)
        entry = self.cache.lookup(key)
        if entry is None:
            if len(key) > 1 and not self.cache.wants_capture(key):
                return None            # a layout seen once may never come back
            entry = _build(exe, step, operands, ports)
            self.cache.add(key, entry)
            dev.counters["graph_captures"] += 1
            if int(dev.settings()["debug"]) >= 1:
                print(f"[lazyarray] cuda {step.kind} step {step.kernel!r}: one graph with "
                      f"conditional nodes, {len(entry.held)} buffers of its own, "
                      f"{len(entry.ports)} operands copied in")
        else:
            dev.counters["graph_replays"] += 1
        for k, port in entry.ports.items():
            dev.copy(operands[k], port)
        check(dev.cu.cuGraphLaunch(entry.exec_graph, dev.stream), "cuGraphLaunch")
        dev.counters["loop_graph_launches"] = dev.counters.get("loop_graph_launches", 0) + 1
        return entry.final


class BuildError(RuntimeError):
    """The driver refused the graph of a control step (the device then drives the step
    from the host, and says why in `loop_graph_failures`)."""


def _build(exe: Any, step: Any, operands: list, ports: set) -> LoopGraph:
    try:
        return _built(exe, step, operands, ports)
    except (RuntimeError, TypeError, AttributeError, ValueError) as e:
        # a driver's error (check) or bindings that take the arguments otherwise: raised
        # before anything of the step was queued, so the host-driven form can run it
        raise BuildError(f"the graph of {step.kind} step {step.kernel!r} could not be "
                         f"built: {e}") from e


def _built(exe: Any, step: Any, operands: list, ports: set) -> LoopGraph:
    dev = exe.device
    cu = dev.cu
    graph = check(cu.cuGraphCreate(0), "cuGraphCreate")
    try:
        b = Builder(dev, graph, [])
        given = list(operands)
        port_buffers = {k: b.new(operands[k].shape, operands[k].dtype) for k in sorted(ports)}
        for k, buf in port_buffers.items():
            given[k] = buf
        b.overwritable = {id(buf) for buf in port_buffers.values()}
        final = APPEND[type(step)](b, exe, step, given)
        b.flush()
        exec_graph = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    finally:
        check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
    dev.counters["loop_graphs_built"] = dev.counters.get("loop_graphs_built", 0) + 1
    return LoopGraph(exec_graph, port_buffers, final, b.held)


class Builder:
    """Nodes appended to one graph in a chain (each depends on the one before). Stream
    work is gathered and captured as one child-graph node at the next conditional node
    or at the end (`flush`): a loop body of kernels, copies and its set kernel is one
    node, so each iteration schedules two nodes, not one per piece."""

    def __init__(self, device: Any, graph: Any, held: list) -> None:
        self.device, self.graph, self.held = device, graph, held
        self.last: Any = None
        self.pending: list = []          # functions queueing work on the stream
        # buffers nothing reads after the step (the top level's ports, refilled at each
        # run): a loop's state may live in them instead of in a copy
        self.overwritable: set = set()

    def new(self, shape: tuple, dtype: Any) -> Any:
        """A buffer the graph holds for its lifetime."""
        buf = self.device.new_buffer(tuple(shape), np.dtype(dtype))
        self.held.append(buf)
        return buf

    def _deps(self) -> tuple:
        return ([self.last], 1) if self.last is not None else ([], 0)

    def capture(self, enqueue: Callable[[], None]) -> None:
        """What `enqueue` queues on the stream, in the next child-graph node."""
        self.pending.append(enqueue)

    def flush(self) -> None:
        """The work gathered so far, captured as one child-graph node."""
        if not self.pending:
            return
        work, self.pending = self.pending, []
        cu, dev = self.device.cu, self.device
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(cu.cuStreamBeginCapture(dev.stream, mode), "cuStreamBeginCapture")
        try:
            for enqueue in work:
                enqueue()
        except BaseException:
            cu.cuStreamEndCapture(dev.stream)
            raise
        child = check(cu.cuStreamEndCapture(dev.stream), "cuStreamEndCapture")
        try:
            self.last = check(cu.cuGraphAddChildGraphNode(self.graph, *self._deps(), child),
                              "cuGraphAddChildGraphNode")
        finally:
            check(cu.cuGraphDestroy(child), "cuGraphDestroy")

    def handle(self) -> Any:
        """A conditional handle for a node of this graph (default 0, set by a kernel)."""
        return check(self.device.cu.cuGraphConditionalHandleCreate(
            self.graph, self.device.ctx, 0, 0), "cuGraphConditionalHandleCreate")

    def table(self, handles: list) -> Any:
        """The device table a set kernel reads: [count, handle 0, ...] as u64 words."""
        words = np.array([len(handles)] + [int(h) for h in handles], np.uint64)
        buf = self.device.put(words)          # (queued before the graph's first launch)
        self.held.append(buf)
        return buf

    def set_handles(self, entry: str, table: Any, value: Any) -> None:
        fn = self.device.conditional_function(entry)
        self.capture(lambda: self.device.launch_single(fn, [table.ptr, value.ptr]))

    def conditional(self, handle: Any, kind: Any, size: int) -> list:
        """A conditional node after the last node; Builders of its body graphs (each
        to be flushed when its work is all there)."""
        self.flush()
        cu = self.device.cu
        params = cu.CUgraphNodeParams()
        params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = int(handle)      # (as cuda.core passes it)
        params.conditional.type = kind
        params.conditional.size = size
        params.conditional.ctx = self.device.ctx
        deps, count = self._deps()
        try:
            result = cu.cuGraphAddNode(self.graph, deps, count, params)
        except TypeError:        # CUDA 13's bindings: edge data before the count
            result = cu.cuGraphAddNode(self.graph, deps, None, count, params)
        self.last = check(result, "cuGraphAddNode(conditional)")
        return [Builder(self.device, params.conditional.phGraph_out[i], self.held)
                for i in range(size)]

    # ---- programs -----------------------------------------------------------------

    def run(self, exe: Any, args: list, into: Optional[list] = None) -> list:
        """Append a loaded program's steps run on `args` (device buffers, by parameter
        number); returns the buffers of its outputs. `into` (a branch's): buffers by
        output index that an output a step writes is written into straight, as the
        CPU's branch writes the conditional's outputs (the others are copied there)."""
        values = dict(exe.constants)
        for pos, number in exe.param_of.items():
            values[pos] = args[number]
        copies = []
        # a loop body's state whose new value takes the old one's buffer (the plan's
        # aliases, written over it in place; its other state values: once the old one is
        # dead; CudaExecutable.carry) -- only where the buffer is the graph's own
        taken = [(o, x, True) for o, x in exe.aliases.items()]
        taken += [(o, x, False) for o, x in exe.state_outputs.items()]
        for out, param, alias in taken:
            given = values[param]
            if any(given is h for h in self.held):
                values[out] = given
            elif alias:
                values[out] = self._new_value(exe, out)
                copies.append((given, values[out]))
        written = {pos for step in exe.steps for pos in _written(step)}
        for k, buf in enumerate(into or []):
            out = exe.outputs[k]
            if out in written and out not in values and exe.outputs.count(out) == 1:
                values[out] = buf
        for step in exe.steps:
            for pos in _written(step):
                if not isinstance(pos, str) and pos not in values:
                    values[pos] = self._new_value(exe, pos)
        scratch = {k: self.new((n,), np.uint8) for k, n in exe.program.scratch.items()}
        if copies:
            self.capture(lambda: [self.device.copy(s, d) for s, d in copies])
        self._steps(exe, values, scratch)
        return [values[o] for o in exe.outputs]

    def _new_value(self, exe: Any, pos: int) -> Any:
        v = exe.values[pos]
        return self.new(v.shape, v.dtype.np)

    def _steps(self, exe: Any, values: dict, scratch: dict) -> None:
        """Runs of ordinary steps as captured child graphs; control steps as nodes."""
        run: list = []
        for step in exe.steps + [None]:
            if step is not None and not isinstance(step, CONTROL_STEPS):
                run.append(step)
                continue
            if run:
                self.capture(lambda r=list(run): exe._steps(values, scratch, r))
                run = []
            if step is not None:
                into = {k: values[p] for p, k in step.outputs}
                final = APPEND[type(step)](self, exe, step, [values[o] for o in step.operands],
                                           into)
                self.copy_into([(final[k], values[p]) for p, k in step.outputs])

    def copy_into(self, pairs: list) -> None:
        """Copy (source, destination) pairs as one node, as if all at once: a source that
        is also a destination (state values trading places) goes through a temporary."""
        dests = {d.ptr for _, d in pairs}
        staged = []
        for s, d in pairs:
            if s.ptr != d.ptr and s.ptr in dests:
                staged.append((s, self.new(s.shape, s.dtype), d))
        direct = [(s, d) for s, d in pairs if s.ptr != d.ptr and s.ptr not in dests]

        def enqueue() -> None:
            for s, t, _ in staged:
                self.device.copy(s, t)
            for s, d in direct:
                self.device.copy(s, d)
            for _, t, d in staged:
                self.device.copy(t, d)
        if staged or direct:
            self.capture(enqueue)


# ---- the control steps ---------------------------------------------------------------

def _append_while(b: Builder, exe: Any, step: WhileStep, operands: list,
                  into: Optional[dict] = None) -> list:
    """The while's nodes (module doc); returns the buffers of its final state (copied
    into the step's outputs once the loop ends, as on the CPU)."""
    cu = b.device.cu
    cond, body = exe.subs[id(step)]
    state = list(operands)
    for k in step.varying:            # the loop's own state: the operands stay as given
        if id(operands[k]) not in b.overwritable:
            state[k] = b.new(operands[k].shape, operands[k].dtype)
    b.copy_into([(operands[k], state[k]) for k in step.varying])
    (pred,) = b.run(cond, state)
    handle = b.handle()
    table = b.table([handle])
    b.set_handles(ck.SET_WHILE, table, pred)
    (inner,) = b.conditional(handle, cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE, 1)
    out = inner.run(body, state)
    # the handle first: the new pred may sit in a state buffer the copies overwrite (a
    # state value passed from another); the node tests the handle after its body anyway
    inner.set_handles(ck.SET_WHILE, table, out[-1])
    inner.copy_into([(out[i], state[k]) for i, k in enumerate(step.varying)])
    inner.flush()
    return state


def _append_conditional(b: Builder, exe: Any, step: ConditionalStep, operands: list,
                        into: Optional[dict] = None) -> list:
    """One IF node per branch, the index's set kernel before them; returns the buffers of
    the results (written by the branch taken): `into`'s {tuple index: buffer} (the
    step's outputs in an enclosing program: the branch writes its results there, nothing
    copied after it) or the graph's own."""
    cu = b.device.cu
    branches = exe.subs[id(step)]
    handles = [b.handle() for _ in branches]
    table = b.table(handles)
    b.set_handles(ck.SET_BRANCH, table, operands[0])
    first = branches[0]
    into = into or {}
    final = [into[k] if k in into else b._new_value(first, o)
             for k, o in enumerate(first.outputs)]
    for sub, handle in zip(branches, handles):
        (inner,) = b.conditional(handle, cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF, 1)
        out = inner.run(sub, operands[1:], final)
        inner.copy_into(list(zip(out, final)))
        inner.flush()
    return final


# step class -> fn(builder, executable, step, operand buffers, {tuple index: output
# buffer} or None) -> result buffers
APPEND = {WhileStep: _append_while, ConditionalStep: _append_conditional}
