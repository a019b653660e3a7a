"""A stand-in for the CUDA driver (and cuBLAS) backed by host memory, so that the CUDA
device's own runtime — buffers, transfers, the allocator, kernel arguments, launches,
events, graphs, library calls, metrics — runs and is tested on machines without a GPU
(the way Numba's CUDA simulator serves GPU code). Selected by `LAZYARRAY_FAKE_CUDA=1`.

What it checks as a driver would, and more strictly:
- device memory is host memory at real addresses, each allocation 256-byte aligned; a
  copy, memset or kernel argument outside every live allocation is an error (it catches
  a use after free and an out-of-bounds size);
- work is stream-ordered and *deferred*: an async copy, a memset or a launch runs only
  when the stream is synchronized (or an event on it is waited for), so host code that
  reads pinned memory before waiting, or reuses a staging buffer too early, sees the
  wrong bytes here, as it would on a GPU;
- a launch checks its grid, block and shared-memory sizes against the hardware limits,
  and reads its arguments at the call, as the driver copies them;
- stream capture records the work instead of running it; a synchronize during capture
  is refused (as on a GPU); a graph replays what was captured;
- graphs built node by node (CUDA 12.4+): child-graph nodes and conditional nodes (IF,
  WHILE) with their body graphs, a node's dependency must be the node added before it
  (the runtime builds chains); a conditional handle is set by the kernel upstream of its
  node (`set_conditional`, what `cudaGraphSetConditional` does on a GPU) and read when
  the node runs. `version` is the driver version reported (set it below 12040 to be a
  driver without conditional nodes: the runtime then drives loops from the host).

Kernels cannot run from PTX on a CPU: whoever loads a module registers host callables
for its entry points first (`register_host_kernels`), built by the CPU target from the
same fusion plan; `cuModuleGetFunction` refuses a name the PTX does not define.
"""
from __future__ import annotations

import bisect
import ctypes
import enum
import hashlib
import re
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

ALIGN = 256
TOTAL_MEMORY = 16 << 30          # what cuMemGetInfo reports; an allocation beyond fails
MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
MAX_SHARED = 48 * 1024


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUstreamCaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


class CUgraphNodeType(enum.IntEnum):
    CU_GRAPH_NODE_TYPE_GRAPH = 4
    CU_GRAPH_NODE_TYPE_CONDITIONAL = 13


class CUgraphConditionalNodeType(enum.IntEnum):
    CU_GRAPH_COND_TYPE_IF = 0
    CU_GRAPH_COND_TYPE_WHILE = 1


class _ConditionalParams:
    """CUDA_CONDITIONAL_NODE_PARAMS: `phGraph_out` is filled by cuGraphAddNode."""

    def __init__(self) -> None:
        self.handle, self.type, self.size, self.ctx, self.phGraph_out = None, 0, 0, None, None


class CUgraphNodeParams:
    """The tagged union of cuGraphAddNode (only its conditional member here)."""

    def __init__(self) -> None:
        self.type = 0
        self.conditional = _ConditionalParams()


class FakeError(Exception):
    """A driver error inside deferred work: raised at the synchronize that runs it."""

    def __init__(self, code: CUresult, text: str) -> None:
        super().__init__(text)
        self.code = code


class Handle:
    """An opaque driver handle; int() gives its id (as cuda-python's handles do)."""
    _ids = [0x1000]

    def __init__(self) -> None:
        Handle._ids[0] += 1
        self.id = Handle._ids[0]

    def __int__(self) -> int:
        return self.id


class Stream(Handle):
    def __init__(self) -> None:
        super().__init__()
        self.queue: list = []            # deferred work, in order
        self.capture: Optional[list] = None


class Event(Handle):
    def __init__(self) -> None:
        super().__init__()
        self.done = True
        self.at = None              # perf_counter when its record ran


class Graph(Handle):
    """Captured work (callables) and nodes added to it (_Child, _Conditional), in order;
    `nodes`: the handles of the nodes added with the node API, for dependency checks."""

    def __init__(self, ops: list) -> None:
        super().__init__()
        self.ops = list(ops)
        self.nodes: list = []
        self.handles: list = []          # conditional handles made for this graph


class ConditionalHandle(Handle):
    def __init__(self, graph: Graph, default: int, flags: int) -> None:
        super().__init__()
        self.graph, self.default, self.flags = graph, int(default), int(flags)
        self.value = int(default)
        self.used = False


class _Child:
    """A child-graph node: a copy of the child's work at the time it was added."""

    def __init__(self, child: Graph) -> None:
        self.ops = list(child.ops)


class _Conditional:
    """A conditional node: its handle, kind and body graphs (filled after it is added)."""

    def __init__(self, handle: ConditionalHandle, kind: int, bodies: list) -> None:
        self.handle, self.kind, self.bodies = handle, kind, bodies


def _freeze(ops: list) -> list:
    """A graph's work as callables, as instantiation fixes it: child graphs inlined,
    conditional nodes as calls that test their handle when they run."""
    out: list = []
    for op in ops:
        if isinstance(op, _Child):
            out += _freeze(op.ops)
        elif isinstance(op, _Conditional):
            out.append(_conditional_work(op.handle, op.kind, [_freeze(g.ops) for g in op.bodies]))
        else:
            out.append(op)
    return out


def _conditional_work(handle: ConditionalHandle, kind: int, bodies: list) -> Callable[[], None]:
    def run() -> None:
        if kind == CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE:
            while handle.value:
                for w in bodies[0]:
                    w()
            return
        chosen = bodies[0] if handle.value else (bodies[1] if len(bodies) > 1 else [])
        for w in chosen:
            w()
    return run


class Function(Handle):
    def __init__(self, name: str, call: Callable, nparams: int) -> None:
        super().__init__()
        self.name, self.call, self.nparams = name, call, nparams


class Module(Handle):
    def __init__(self, functions: dict) -> None:
        super().__init__()
        self.functions = functions


def _image_key(image: bytes) -> str:
    return hashlib.sha256(bytes(image).rstrip(b"\0")).hexdigest()


class FakeDriver:
    """The subset of `cuda.bindings.driver` the CUDA device calls, over host memory."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUstreamCaptureMode = CUstreamCaptureMode
    CUgraphNodeType = CUgraphNodeType
    CUgraphConditionalNodeType = CUgraphConditionalNodeType
    CUgraphNodeParams = CUgraphNodeParams

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._memory: dict = {}          # aligned address -> (ctypes block, size)
        self._starts: list = []          # sorted aligned addresses
        self._pinned: dict = {}          # host address -> (ctypes block, size)
        self._host_kernels: dict = {}    # image key -> {name: (callable, nparams)}
        self._streams: list = []
        self.capability = (9, 0)
        self.multiprocessors = 132         # an H100 SXM's size, as its attributes say
        self.threads_per_multiprocessor = 2048
        self.calls: dict = {}            # driver call name -> count (tests read it)
        # work run on the device (not queued): kind ("DtoD", "launch", ...) -> count, and
        # the bytes a copy or memset moved (tests read them: copies per loop iteration)
        self.ran: dict = {}
        self.ran_bytes: dict = {}
        self.version = 12080             # cuDriverGetVersion: 12.8, with conditional nodes
        self._conditionals: dict = {}    # handle value -> ConditionalHandle

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # ---- setup ---------------------------------------------------------------------

    def cuInit(self, flags: int) -> tuple:
        return (CUresult.CUDA_SUCCESS,)

    def cuDriverGetVersion(self) -> tuple:
        return (CUresult.CUDA_SUCCESS, self.version)

    def cuGetErrorString(self, err: Any) -> tuple:
        return (CUresult.CUDA_SUCCESS, CUresult(int(err)).name.encode())

    def cuDeviceGetCount(self) -> tuple:
        return (CUresult.CUDA_SUCCESS, 1)

    def cuDeviceGet(self, ordinal: int) -> tuple:
        if ordinal != 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        return (CUresult.CUDA_SUCCESS, 0)

    def cuDeviceGetAttribute(self, attr: Any, dev: Any) -> tuple:
        values = {CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.capability[0],
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.capability[1],
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.multiprocessors,
                  CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
                      self.threads_per_multiprocessor}
        return (CUresult.CUDA_SUCCESS, values[attr])

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple:
        return (CUresult.CUDA_SUCCESS, Handle())

    def cuCtxSetCurrent(self, ctx: Any) -> tuple:
        return (CUresult.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags: int) -> tuple:
        s = Stream()
        self._streams.append(s)
        return (CUresult.CUDA_SUCCESS, s)

    # ---- memory --------------------------------------------------------------------

    def cuMemAlloc(self, nbytes: int) -> tuple:
        self._count("cuMemAlloc")
        nbytes = int(nbytes)
        with self._lock:
            if nbytes <= 0:
                return (CUresult.CUDA_ERROR_INVALID_VALUE, 0)
            if self.used_bytes() + nbytes > TOTAL_MEMORY:
                return (CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0)
            block = (ctypes.c_char * (nbytes + ALIGN))()
            base = ctypes.addressof(block)
            ptr = (base + ALIGN - 1) // ALIGN * ALIGN
            self._memory[ptr] = (block, nbytes)
            bisect.insort(self._starts, ptr)
        return (CUresult.CUDA_SUCCESS, ptr)

    def cuMemFree(self, ptr: Any) -> tuple:
        self._count("cuMemFree")
        self._flush_all()                # the driver waits for work that may use it
        with self._lock:
            ptr = int(ptr)
            if ptr not in self._memory:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            del self._memory[ptr]
            self._starts.remove(ptr)
        return (CUresult.CUDA_SUCCESS,)

    def used_bytes(self) -> int:
        return sum(n for _, n in self._memory.values())

    def cuMemGetInfo(self) -> tuple:
        return (CUresult.CUDA_SUCCESS, TOTAL_MEMORY - self.used_bytes(), TOTAL_MEMORY)

    def cuMemHostAlloc(self, nbytes: int, flags: int) -> tuple:
        self._count("cuMemHostAlloc")
        block = (ctypes.c_char * max(1, int(nbytes)))()
        ptr = ctypes.addressof(block)
        self._pinned[ptr] = (block, int(nbytes))
        return (CUresult.CUDA_SUCCESS, ptr)

    def cuMemFreeHost(self, ptr: Any) -> tuple:
        self._pinned.pop(int(ptr), None)
        return (CUresult.CUDA_SUCCESS,)

    def _check_device(self, ptr: int, nbytes: int, what: str) -> None:
        """Raise unless [ptr, ptr + nbytes) lies in one live device allocation."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0:
            start = self._starts[i]
            size = self._memory[start][1]
            if ptr + nbytes <= start + size:
                return
        raise FakeError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,
                        f"{what}: {nbytes} bytes at {ptr:#x} are not inside a live device "
                        f"allocation (freed, or out of bounds)")

    def _is_pinned(self, ptr: int, nbytes: int) -> bool:
        for start, (_, size) in self._pinned.items():
            if start <= ptr and ptr + nbytes <= start + size:
                return True
        return False

    def cuMemcpyHtoDAsync(self, dst: Any, src: Any, nbytes: int, stream: Stream) -> tuple:
        self._count("cuMemcpyHtoDAsync")
        dst, src, nbytes = int(dst), int(src), int(nbytes)
        if not self._is_pinned(src, nbytes):
            # from pageable memory the driver stages the bytes before returning
            data = ctypes.string_at(src, nbytes)
            return self._enqueue(stream, "HtoD", lambda: self._write(dst, data, "HtoD"), nbytes)
        return self._enqueue(stream, "HtoD",
                             lambda: self._write(dst, ctypes.string_at(src, nbytes), "HtoD"),
                             nbytes)

    def _write(self, dst: int, data: bytes, what: str) -> None:
        self._check_device(dst, len(data), what)
        ctypes.memmove(dst, data, len(data))

    def cuMemcpyDtoHAsync(self, dst: Any, src: Any, nbytes: int, stream: Stream) -> tuple:
        self._count("cuMemcpyDtoHAsync")
        dst, src, nbytes = int(dst), int(src), int(nbytes)

        def run() -> None:
            self._check_device(src, nbytes, "DtoH")
            ctypes.memmove(dst, src, nbytes)
        return self._enqueue(stream, "DtoH", run, nbytes)

    def cuMemcpyDtoDAsync(self, dst: Any, src: Any, nbytes: int, stream: Stream) -> tuple:
        self._count("cuMemcpyDtoDAsync")
        dst, src, nbytes = int(dst), int(src), int(nbytes)

        def run() -> None:
            self._check_device(src, nbytes, "DtoD source")
            self._check_device(dst, nbytes, "DtoD destination")
            ctypes.memmove(dst, src, nbytes)
        return self._enqueue(stream, "DtoD", run, nbytes)

    def cuMemsetD2D32Async(self, dst: Any, pitch: int, value: int, width: int, height: int,
                           stream: Stream) -> tuple:
        """`height` rows `pitch` bytes apart, each `width` 32-bit words set to `value`."""
        dst, pitch, width, height = int(dst), int(pitch), int(width), int(height)
        if dst % 4 or (height > 1 and pitch < 4 * width):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)

        def run() -> None:
            if width and height:
                self._check_device(dst, (height - 1) * pitch + 4 * width, "memset 2D")
            word = np.array([value], np.uint32).tobytes() * width
            for row in range(height):
                ctypes.memmove(dst + row * pitch, word, 4 * width)
        return self._enqueue(stream, "memset 2D", run)

    def cuMemsetD8Async(self, dst: Any, value: int, nbytes: int, stream: Stream) -> tuple:
        dst, nbytes = int(dst), int(nbytes)

        def run() -> None:
            self._check_device(dst, nbytes, "memset")
            ctypes.memset(dst, int(value), nbytes)
        return self._enqueue(stream, "memset", run, nbytes)

    # ---- streams, events ------------------------------------------------------------

    def _enqueue(self, stream: Stream, what: str, work: Callable[[], None],
                 nbytes: int = 0) -> tuple:
        if what != "graph":         # (a graph's work is counted as its pieces run)
            work = self._counted(what, nbytes, work)
        with self._lock:
            if stream.capture is not None:
                stream.capture.append(work)
            else:
                stream.queue.append(work)
        return (CUresult.CUDA_SUCCESS,)

    def _counted(self, what: str, nbytes: int, work: Callable[[], None]) -> Callable[[], None]:
        """`work`, counting in `ran` (and its bytes in `ran_bytes`) each time it runs:
        inside a graph, once per replay and per iteration of a WHILE node."""
        def run() -> None:
            self.ran[what] = self.ran.get(what, 0) + 1
            self.ran_bytes[what] = self.ran_bytes.get(what, 0) + nbytes
            work()
        return run

    def _flush(self, stream: Stream) -> tuple:
        with self._lock:
            if stream.capture is not None:
                return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
            work, stream.queue = stream.queue, []
            try:
                for w in work:
                    w()
            except FakeError as e:
                stream.queue = []
                print(f"[fake cuda] {e}")
                return (e.code,)
        return (CUresult.CUDA_SUCCESS,)

    def _flush_all(self) -> None:
        for s in self._streams:
            if s.capture is None:
                self._flush(s)

    def cuStreamSynchronize(self, stream: Stream) -> tuple:
        self._count("cuStreamSynchronize")
        return self._flush(stream)

    def cuCtxSynchronize(self) -> tuple:
        for s in self._streams:
            if s.capture is not None:
                return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        self._flush_all()
        return (CUresult.CUDA_SUCCESS,)

    def pending(self, stream: Stream) -> int:
        """Operations queued on `stream` and not yet run (tests read it)."""
        return len(stream.queue)

    def cuEventCreate(self, flags: int) -> tuple:
        return (CUresult.CUDA_SUCCESS, Event())

    def cuEventRecord(self, event: Event, stream: Stream) -> tuple:
        if stream.capture is None:
            event.done = False

        def run() -> None:
            event.done = True
            event.at = time.perf_counter()
        return self._enqueue(stream, "event", run)

    def cuEventQuery(self, event: Event) -> tuple:
        return (CUresult.CUDA_SUCCESS if event.done else CUresult.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event: Event) -> tuple:
        self._count("cuEventSynchronize")
        for s in self._streams:
            if event.done:
                break
            if s.capture is None:
                result = self._flush(s)
                if int(result[0]):
                    return result
        return (CUresult.CUDA_SUCCESS,)

    def cuEventDestroy(self, event: Event) -> tuple:
        return (CUresult.CUDA_SUCCESS,)

    def cuEventElapsedTime(self, start: Event, end: Event) -> tuple:
        """Host seconds between the two events' runs (the stand-in runs work on the host)."""
        if start.at is None or end.at is None:
            return (CUresult.CUDA_ERROR_NOT_READY, 0.0)
        return (CUresult.CUDA_SUCCESS, (end.at - start.at) * 1e3)

    # ---- modules, launches ----------------------------------------------------------

    def register_host_kernels(self, image: bytes, kernels: dict) -> None:
        """`kernels`: entry name -> (callable(pointers), number of parameters): what a
        launch of that entry of `image` runs on the host."""
        self._host_kernels[_image_key(image)] = dict(kernels)

    def cuModuleLoadData(self, image: Any) -> tuple:
        self._count("cuModuleLoadData")
        data = bytes(image)
        host = self._host_kernels.get(_image_key(data))
        if host is None:
            return (CUresult.CUDA_ERROR_INVALID_IMAGE, None)
        if data[:4] != b"\x7fELF":       # PTX: every registered kernel is an entry of it
            entries = set(re.findall(rb"\.entry\s+([A-Za-z_$][\w$]*)", data))
            if not {k.encode() for k in host} <= entries:
                return (CUresult.CUDA_ERROR_INVALID_IMAGE, None)
        return (CUresult.CUDA_SUCCESS,
                Module({name: Function(name, call, n) for name, (call, n) in host.items()}))

    def cuModuleGetFunction(self, module: Module, name: bytes) -> tuple:
        fn = module.functions.get(name.decode() if isinstance(name, bytes) else name)
        if fn is None:
            return (CUresult.CUDA_ERROR_NOT_FOUND, None)
        return (CUresult.CUDA_SUCCESS, fn)

    def cuModuleUnload(self, module: Module) -> tuple:
        return (CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, fn: Function, gx: int, gy: int, gz: int, bx: int, by: int,
                       bz: int, shared: int, stream: Stream, params: int, extra: Any) -> tuple:
        self._count("cuLaunchKernel")
        grid, block = (gx, gy, gz), (bx, by, bz)
        if any(not 1 <= g <= m for g, m in zip(grid, MAX_GRID)) or \
                any(not 1 <= t <= m for t, m in zip(block, MAX_BLOCK)) or \
                bx * by * bz > MAX_THREADS:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if shared > MAX_SHARED:
            return (CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,)
        # the driver copies the arguments at the call: read them now
        slots = (ctypes.c_void_p * max(1, fn.nparams)).from_address(int(params))
        pointers = [ctypes.c_uint64.from_address(slots[i]).value for i in range(fn.nparams)]

        def run() -> None:
            for p in pointers:
                self._check_device(p, 1, f"argument of {fn.name}")
            fn.call(pointers)
        return self._enqueue(stream, "launch", run)

    # ---- graphs ---------------------------------------------------------------------

    def cuStreamBeginCapture(self, stream: Stream, mode: Any) -> tuple:
        self._count("cuStreamBeginCapture")
        if stream.capture is not None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        stream.capture = []
        return (CUresult.CUDA_SUCCESS,)

    def cuStreamEndCapture(self, stream: Stream) -> tuple:
        if stream.capture is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        graph = Graph(stream.capture)
        stream.capture = None
        return (CUresult.CUDA_SUCCESS, graph)

    def cuGraphInstantiate(self, graph: Graph, flags: int) -> tuple:
        for h in graph.handles:
            if not h.used:      # (the driver's CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED)
                return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        exe = Graph(_freeze(graph.ops))
        exe.handles = list(_all_handles(graph))
        return (CUresult.CUDA_SUCCESS, exe)

    def cuGraphLaunch(self, graph: Graph, stream: Stream) -> tuple:
        self._count("cuGraphLaunch")
        defaults = [h for h in graph.handles if h.flags & 1]      # CU_GRAPH_COND_ASSIGN_DEFAULT

        def assign() -> None:
            for h in defaults:
                h.value = h.default
        if defaults:
            self._enqueue(stream, "graph", assign)
        for op in graph.ops:
            self._enqueue(stream, "graph", op)
        return (CUresult.CUDA_SUCCESS,)

    # ---- graphs built node by node, conditional nodes (CUDA 12.4+) ------------------

    def _needs(self, name: str) -> Optional[tuple]:
        """An error result when this driver version lacks conditional nodes."""
        self._count(name)
        if self.version < 12040:
            return (CUresult.CUDA_ERROR_NOT_FOUND, None)     # (the symbol is absent)
        return None

    def cuGraphCreate(self, flags: int) -> tuple:
        return (CUresult.CUDA_SUCCESS, Graph([]))

    def _add(self, graph: Graph, deps: Any, count: int, op: Any) -> tuple:
        """Append node `op` to `graph`; its dependencies must be the last node added (or
        none, for the first): the runtime builds chains, and a graph with the order of its
        list differing from its edges would replay here in the wrong order."""
        deps = list(deps or [])[:int(count)]
        want = graph.nodes[-1:] if graph.nodes else []
        if [id(d) for d in deps] != [id(d) for d in want] or \
                (not graph.nodes and graph.ops):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        node = Handle()
        graph.nodes.append(node)
        graph.ops.append(op)
        return (CUresult.CUDA_SUCCESS, node)

    def cuGraphAddChildGraphNode(self, graph: Graph, deps: Any, count: int, child: Graph) -> tuple:
        self._count("cuGraphAddChildGraphNode")
        if any(isinstance(op, _Conditional) for op in child.ops):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)   # not allowed in a child node
        return self._add(graph, deps, count, _Child(child))

    def cuGraphConditionalHandleCreate(self, graph: Graph, ctx: Any, default: int,
                                       flags: int) -> tuple:
        missing = self._needs("cuGraphConditionalHandleCreate")
        if missing:
            return missing
        h = ConditionalHandle(graph, default, flags)
        graph.handles.append(h)
        self._conditionals[int(h)] = h
        return (CUresult.CUDA_SUCCESS, h)

    def cuGraphAddNode(self, graph: Graph, deps: Any, *rest: Any) -> tuple:
        """(graph, deps, count, params), or CUDA 13's (graph, deps, edge data, count,
        params); only conditional nodes here."""
        missing = self._needs("cuGraphAddNode")
        if missing:
            return missing
        count, params = rest[-2], rest[-1]
        c = params.conditional
        h = self._conditionals.get(int(c.handle)) if c.handle is not None else None
        if params.type != CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL or h is None or \
                h.graph is not graph or h.used or not 1 <= c.size <= (1 if c.type else 2):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, None)
        h.used = True
        bodies = [Graph([]) for _ in range(c.size)]
        result = self._add(graph, deps, count, _Conditional(h, c.type, bodies))
        if int(result[0]) == 0:
            c.phGraph_out = bodies
        return result

    def set_conditional(self, handle: int, value: int) -> None:
        """`cudaGraphSetConditional(handle, value)` as a kernel calls it (the stand-in of
        the device runtime's function: devices/stand_ins/cuda_conditional_host.py)."""
        h = self._conditionals.get(int(handle))
        if h is None:
            raise FakeError(CUresult.CUDA_ERROR_INVALID_HANDLE,
                            f"cudaGraphSetConditional: {handle:#x} is no conditional handle")
        h.value = int(value) & 0xFFFFFFFF

    def cuGraphExecDestroy(self, graph: Graph) -> tuple:
        for h in graph.handles:          # (a kernel setting it now is an error)
            self._conditionals.pop(int(h), None)
        return (CUresult.CUDA_SUCCESS,)

    def cuGraphDestroy(self, graph: Graph) -> tuple:
        return (CUresult.CUDA_SUCCESS,)


def _all_handles(graph: Graph) -> list:
    """The conditional handles of a graph and of its conditional nodes' bodies."""
    out = list(graph.handles)
    for op in graph.ops:
        if isinstance(op, _Conditional):
            for body in op.bodies:
                out += _all_handles(body)
    return out


FAKE_DRIVER = FakeDriver()


# ---- cuBLAS ---------------------------------------------------------------------------

_NP_OF_CUDA_TYPE = {0: np.float32, 1: np.float64, 2: np.float16, 4: np.complex64,
                    5: np.complex128}


class FakeCublas:
    """cuBLAS's strided batched GEMM (column-major, host-pointer alpha/beta) on host
    memory, checking its arguments as cuBLAS does and queued on the handle's stream."""

    def __init__(self, driver: FakeDriver = FAKE_DRIVER) -> None:
        self.driver = driver
        self.streams: dict = {}
        self.workspace: dict = {}

    def create(self) -> int:
        h = Handle()
        self.streams[int(h)] = None
        return int(h)

    def set_stream(self, handle: int, stream: Any) -> None:
        self.streams[handle] = stream

    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None:
        self.workspace[handle] = (ptr, nbytes)

    def gemm_strided_batched_ex(self, handle: int, transa: int, transb: int, m: int, n: int,
                                k: int, alpha: int, a: int, atype: int, lda: int, stride_a: int,
                                b: int, btype: int, ldb: int, stride_b: int, beta: int, c: int,
                                ctype: int, ldc: int, stride_c: int, batch: int, compute: int,
                                algo: int) -> None:
        rows_a = m if transa == 0 else k
        rows_b = k if transb == 0 else n
        for number, ok in ((4, m >= 0), (5, n >= 0), (6, k >= 0), (10, lda >= max(1, rows_a)),
                           (13, ldb >= max(1, rows_b)), (18, ldc >= max(1, m)), (21, batch >= 0)):
            if not ok:
                raise RuntimeError(f"cuBLAS GEMM_EX: parameter number {number} had an illegal value")
        if ctype in (4, 5):           # complex data: complex alpha and beta, as cuBLAS reads them
            scalar = np.complex128 if compute == 70 else np.complex64
        else:
            scalar = np.float64 if compute == 70 else np.float32
        size = np.dtype(scalar).itemsize
        wide = np.complex128 if ctype in (4, 5) else np.float64
        al, be = (wide(np.frombuffer(ctypes.string_at(p, size), scalar)[0]) for p in (alpha, beta))

        def run() -> None:
            for i in range(batch):
                opa = self._matrix(a + i * stride_a * self._size(atype), atype, lda,
                                   (rows_a, k if transa == 0 else m), transa)
                opb = self._matrix(b + i * stride_b * self._size(btype), btype, ldb,
                                   (rows_b, n if transb == 0 else k), transb)
                out = self._view(c + i * stride_c * self._size(ctype), ctype, ldc, (m, n))
                acc = al * (opa.astype(wide) @ opb.astype(wide))
                if be != 0.0:
                    acc = acc + be * out.astype(wide)
                out[...] = acc.astype(out.dtype)
        self.driver._enqueue(self.streams[handle], "gemm", run)

    def scal(self, handle: int, double: bool, count: int, factor: float, ptr: int) -> None:
        """cublasSscal/Dscal with unit stride, as CublasLib.scal calls them."""
        dtype = np.float64 if double else np.float32
        alpha = dtype(factor)             # read at the call (host pointer mode)

        def run() -> None:
            nbytes = count * np.dtype(dtype).itemsize
            self.driver._check_device(ptr, nbytes, "cuBLAS scal operand")
            x = np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype)
            x *= alpha
        if count:
            self.driver._enqueue(self.streams[handle], "scal", run)

    @staticmethod
    def _size(t: int) -> int:
        return 2 if t in (2, 14) else np.dtype(_NP_OF_CUDA_TYPE[t]).itemsize

    def _view(self, ptr: int, t: int, ld: int, shape: tuple) -> np.ndarray:
        """A column-major rows x cols matrix with leading dimension `ld`, writable."""
        rows, cols = shape
        size = self._size(t)
        nbytes = ((cols - 1) * ld + rows) * size if rows and cols else 0
        if nbytes:
            self.driver._check_device(ptr, nbytes, "cuBLAS operand")
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
        dtype = np.uint16 if t == 14 else _NP_OF_CUDA_TYPE[t]
        flat = np.frombuffer(raw, dtype=dtype, count=nbytes // size)
        arr = np.lib.stride_tricks.as_strided(flat, (rows, cols), (size, ld * size))
        return _Bf16(arr) if t == 14 else arr

    def _matrix(self, ptr: int, t: int, ld: int, shape: tuple, trans: int) -> np.ndarray:
        m = self._view(ptr, t, ld, shape)
        m = m.value() if isinstance(m, _Bf16) else m
        return m.T if trans else m


class _Bf16:
    """bfloat16 bits (uint16) read as float32 values and written back rounded."""

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        self.dtype = np.float32

    def value(self) -> np.ndarray:
        return (self.bits.astype(np.uint32) << 16).view(np.float32)

    def astype(self, dtype: Any) -> np.ndarray:
        return self.value().astype(dtype)

    def __setitem__(self, key: Any, values: np.ndarray) -> None:
        bits = np.asarray(values, np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        self.bits[key] = rounded.astype(np.uint16)
