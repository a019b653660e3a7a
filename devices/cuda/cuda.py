"""The CUDA device: the driver API and NVIDIA's libraries through one seam
(libraries.py: the real ones, or the stand-ins over host memory), PTX from
compiler/codegen/nvptx.py.

- one primary context per GPU, one non-blocking stream; everything is ordered on it, and
  nothing waits for the GPU except reading a value on the host (`get`);
- memory from our caching allocator (cuda_memory.py): size-binned blocks reused across
  syncs with no driver call, returned on memory pressure and by `empty_cache()`;
- transfers through pinned staging blocks, reused once the copy behind them completes;
- runtime scalars (a learning rate) travel in one small parameter block per executable,
  one asynchronous copy per run, instead of a buffer, a copy and a wait per scalar;
- an executable loads its module once (a cubin linked by nvJitLink when available, else
  PTX for the driver to compile) and launches each fused kernel with its launch step's
  grid and block; a run whose buffers are the same as in earlier runs is captured as a
  CUDA graph and replayed in one launch (cuda_graphs.py);
- a while or conditional step runs as one CUDA graph with conditional nodes where the
  driver has them (12.4+: cuda_loops.py, no host round trip per iteration), else from
  the host with its condition read back one iteration ahead;
- collectives on NCCL, queued on the stream, where `la.distributed` runs on it
  (nccl_communicator.py); else through host memory on MPI;
- dot_general through cuBLAS (cuda_blas.py), fft through cuFFT (cuda_fft.py); the few ops with no GPU code yet (sort,
  argsort, cumulative, scatter, and dot_general in a layout cuBLAS cannot read) run on
  the host with the primitive's NumPy reference, which is correct but copies through host
  memory (such a program is never captured as a graph).

Import this module only where `available()` may be asked: it imports cuda-python lazily.
"""
from __future__ import annotations

import ctypes
import itertools
import time
import weakref
from collections import deque
from typing import Any, Callable, Optional

import numpy as np

from ...compiler import primitive as P
from ...compiler import fork_locks, profile_hooks
from ...compiler.driver import compile as compile_program, gpu_arch, gpu_target
from ...compiler.hlo.module import Module
from ...compiler.program import (CONTROL_STEPS, ConditionalStep, LaunchStep, LibraryStep,
                                 Program, Step, WhileStep, branch_index, state_buffers,
                                 sub_program)
from . import cuda_loops, gpu_timer, host_loops
from .step_writes import written as _written
from ..dump_files import write_dump
from .cuda_blas import OP_N, OP_T, gemm, gemm_arguments, matrix_layout  # noqa: F401  (re-exported)
from .cuda_driver import check
from .libraries import available, libraries  # noqa: F401  (available: re-exported)
from .cuda_graphs import GraphCache
from .cuda_memory import CachingAllocator, CudaBuffer, PinnedStaging
from .cuda_fft import run_fft
from .cuda_solver import run_library_call
from .cusolver_calls import CALLS as SOLVER_CALLS
from ..device import Device

_POOLS = itertools.count(1)    # owners of allocator pools: one per graph-replaying executable
SCALAR_SLOT = 8          # bytes per runtime scalar in the parameter block (aligned)


def default_settings() -> dict:
    return {"cuda_graphs": True, "cache_dir": "", "debug": 0, "dump": ""}


# ---- kernel arguments ------------------------------------------------------------------

class PackedArgs:
    """A kernel's parameters as the driver wants them: an array of pointers, each to the
    bytes of one argument (here every argument is a 64-bit device pointer)."""

    def __init__(self, pointers: list) -> None:
        self.values = [ctypes.c_uint64(int(p)) for p in pointers]
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


# ---- the device ------------------------------------------------------------------------

class CudaDevice(Device):
    platform = "cuda"
    supports_donation = True     # compile(module, donated=...) may update those in place

    def __init__(self, name: str = "cuda", settings: Optional[Callable[[], dict]] = None,
                 fake: Optional[bool] = None) -> None:
        self.libs = libraries(fake)       # NVIDIA's, or the stand-ins (libraries.py)
        self.fake = self.libs.stand_in
        reason = self.libs.missing()
        if reason is not None:
            raise RuntimeError(f"device {name!r} is not available: {reason}")
        self.cu = cu = self.libs.driver()
        self.name = name
        self._settings = settings or default_settings
        self.ordinal = int(name.split(":")[1]) if ":" in name else 0
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= self.ordinal < count:
            raise ValueError(f"device {name!r}: there are {count} CUDA GPUs (cuda:0.."
                             f"cuda:{count - 1})")
        self.dev = check(cu.cuDeviceGet(self.ordinal), "cuDeviceGet")
        self.ctx = check(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.activate()
        self.stream = check(cu.cuStreamCreate(1), "cuStreamCreate")       # non-blocking
        attr = cu.CUdevice_attribute
        self.capability = (
            check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "cc"),
            check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "cc"))
        self.arch = gpu_arch(self.capability)
        # what the compiler sizes grids for: one wave of resident blocks on this GPU
        self.multiprocessors = check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev), "multiprocessors")
        self.threads_per_multiprocessor = check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, self.dev), "threads per SM")
        self.target = gpu_target(self.capability, self.multiprocessors,
                                 self.threads_per_multiprocessor)
        self.allocator = CachingAllocator(lambda: cu, self.stream)
        self.staging = PinnedStaging(lambda: cu)
        self._lock = fork_locks.lock()
        self._cublas: Any = None
        self._conditional_module: Any = None
        self.loop_graph_failures: list = []    # why a loop's graph could not be built
        # cumulative counters (lazyarray's metrics read them through `stats`)
        self.counters = {"transfer_seconds": 0.0, "bytes_to_device": 0, "bytes_from_device": 0,
                         "graph_captures": 0, "graph_replays": 0, "graph_fallbacks": 0}

    def settings(self) -> dict:
        s = default_settings()
        s.update(self._settings())
        return s

    # ---- context, memory -----------------------------------------------------------

    def activate(self) -> None:
        check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def new_buffer(self, shape: tuple, dtype: np.dtype) -> CudaBuffer:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return CudaBuffer(self, self.allocator.alloc(nbytes), nbytes, tuple(shape), np.dtype(dtype))

    def put(self, array: Any) -> CudaBuffer:
        """Copy a host array into a new buffer; returns without waiting for the copy."""
        t0 = time.perf_counter()
        host = np.asarray(array, order="C")      # (np.ascontiguousarray makes 0-d 1-d)
        buf = self.new_buffer(host.shape, host.dtype)
        if host.nbytes:
            block = self.staging.take(host.nbytes)
            ctypes.memmove(block.ptr, host.ctypes.data, host.nbytes)
            check(self.cu.cuMemcpyHtoDAsync(buf.ptr, block.ptr, host.nbytes, self.stream), "HtoD")
            self.staging.give(block, self.stream)
        self.counters["bytes_to_device"] += host.nbytes
        t1 = time.perf_counter()
        self.counters["transfer_seconds"] += t1 - t0
        if profile_hooks.ACTIVE:
            profile_hooks.ACTIVE.span("transfer", "host_to_device", t0, t1, {"bytes": host.nbytes})
        return buf

    def get(self, buffer: CudaBuffer) -> np.ndarray:
        """Copy a buffer to a new host array of its shape: waits for the stream."""
        t0 = time.perf_counter()
        cu = self.cu
        out = np.empty(buffer.shape, buffer.dtype)
        if out.nbytes:
            block = self.staging.take(out.nbytes)
            check(cu.cuMemcpyDtoHAsync(block.ptr, buffer.ptr, out.nbytes, self.stream), "DtoH")
            check(cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
            ctypes.memmove(out.ctypes.data, block.ptr, out.nbytes)
            self.staging.give(block)
        else:
            self.synchronize()       # still a read on the host: errors surface here
        self.counters["bytes_from_device"] += out.nbytes
        t1 = time.perf_counter()
        self.counters["transfer_seconds"] += t1 - t0
        if profile_hooks.ACTIVE:
            profile_hooks.ACTIVE.span("transfer", "device_to_host", t0, t1, {"bytes": out.nbytes})
        return out

    def read_later(self, buffer: CudaBuffer) -> Callable[[], np.ndarray]:
        """Queue a copy of a (small) buffer to pinned memory behind the stream's work;
        the function returned waits for that copy alone (its event), not for the work
        queued after it, and gives the value."""
        cu = self.cu
        out = np.empty(buffer.shape, buffer.dtype)
        block = self.staging.take(max(1, out.nbytes))
        if out.nbytes:
            check(cu.cuMemcpyDtoHAsync(block.ptr, buffer.ptr, out.nbytes, self.stream), "DtoH")
        check(cu.cuEventRecord(block.event, self.stream), "cuEventRecord")

        def wait() -> np.ndarray:
            check(cu.cuEventSynchronize(block.event), "cuEventSynchronize")
            ctypes.memmove(out.ctypes.data, block.ptr, out.nbytes)
            self.staging.give(block)
            self.counters["bytes_from_device"] += out.nbytes
            return out
        return wait

    def copy(self, src: CudaBuffer, dst: CudaBuffer) -> None:
        if src.nbytes:
            check(self.cu.cuMemcpyDtoDAsync(dst.ptr, src.ptr, src.nbytes, self.stream), "DtoD")

    def memset(self, buf: CudaBuffer, byte: int) -> None:
        if buf.nbytes:
            check(self.cu.cuMemsetD8Async(buf.ptr, byte, buf.nbytes, self.stream), "memset")

    def synchronize(self) -> None:
        check(self.cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def empty_cache(self) -> int:
        """Return the allocator's cached blocks to the driver; the bytes released."""
        return self.allocator.empty_cache()

    def stats(self) -> dict:
        return {**self.counters, **self.allocator.stats()}

    def cache_key(self) -> tuple:
        return (self.platform, self.target)

    def loop_graphs_missing(self) -> Optional[str]:
        """None when loops run as conditional nodes of a CUDA graph here; else why they
        are driven from the host (cuda_loops.py; asked at each loop's run, so a stand-in
        configured as an older driver takes effect at once)."""
        return cuda_loops.missing(self.cu)

    def conditional_function(self, entry: str) -> Any:
        """A kernel of conditional_kernels.py, its module loaded at the first use."""
        if self._conditional_module is None:
            self.activate()
            image = self.libs.conditional_image(self.arch)
            self._conditional_module = check(self.cu.cuModuleLoadData(image), "cuModuleLoadData")
        return check(self.cu.cuModuleGetFunction(self._conditional_module, entry.encode()),
                     f"cuModuleGetFunction({entry})")

    def launch_single(self, fn: Any, pointers: list) -> None:
        """A kernel of one thread on the stream (a set-conditional kernel)."""
        packed = PackedArgs(pointers)
        check(self.cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, self.stream, packed.address, 0),
              "cuLaunchKernel(set conditional)")

    def cublas(self) -> Optional[Any]:
        """(library, handle) bound to this device's stream, or None without cuBLAS."""
        if self._cublas is None:
            lib = self.libs.cublas(self.cu)
            if lib is None:
                self._cublas = False
                return None
            handle = lib.create()
            lib.set_stream(handle, self.stream)
            if hasattr(lib, "set_workspace"):      # so that capture never allocates
                from .cuda_blas import WORKSPACE_BYTES
                self._workspace = self.new_buffer((WORKSPACE_BYTES,), np.uint8)
                lib.set_workspace(handle, self._workspace.ptr, WORKSPACE_BYTES)
            self._cublas = (lib, handle)
        return self._cublas or None

    # ---- compile -----------------------------------------------------------------

    def compile(self, module: Module, donated: frozenset = frozenset()) -> "CudaExecutable":
        """`donated`: parameter numbers whose buffers the caller gives up; an elementwise
        update may then write its output over such a parameter in place (the plan's
        aliases, compiler/planning/buffer_assignment.py), so a training step keeps one copy of its
        parameters and their buffers stay where they are from step to step."""
        program, hit = self._program(module, frozenset(donated))
        dump = self.settings().get("dump")
        if dump:
            # (a program from the disk cache carries no stage texts: made again to dump)
            texts = program if program.dumps else \
                compile_program(module, self.target, frozenset(donated), dumps=True)
            write_dump(dump, module.name, texts)
        host = self.libs.host_kernels(module, frozenset(donated), program) \
            if _has_code(program) else None
        exe = self.load(program, host)
        exe.from_disk_cache = hit
        return exe

    def load(self, program: Program, host: Optional[dict] = None) -> "CudaExecutable":
        """A compiled program (or a control step's sub-program) as an executable; `host`:
        host code for its kernels where the driver runs them on the host (the stand-ins)."""
        image = self.libs.image(program.code, self.arch, self.settings()["cache_dir"]) \
            if program.code else b""
        return CudaExecutable(self, program, image, host)

    def _program(self, module: Module, donated: frozenset) -> tuple:
        """(Program, whether it came from the disk cache): a new process loads a cached
        program (and its cubin, cuda_link.py) without planning or emitting code."""
        from ..compile_cache import (VERSION, DiskCache, compiler_fingerprint, default_dir,
                                     entry_key, load_cached)
        from ...compiler.driver import target_id
        where = self.settings()["cache_dir"] or default_dir()
        dumps = bool(self.settings().get("dump"))
        if where == "off":
            return compile_program(module, self.target, donated, dumps=dumps), False
        cache = DiskCache(where)
        text = str(module) + (f"\ndonated {sorted(donated)}" if donated else "")
        key = entry_key(text, VERSION, compiler_fingerprint(), *target_id(self.target))
        program = load_cached(cache, key)
        if program is not None:
            return program, True
        program = compile_program(module, self.target, donated, dumps=dumps)
        cache.store(key, *program.to_cache())
        return program, False

    def stage(self, module: Module, stage: str) -> str:
        """The text of one compilation stage for this GPU: optimized_hlo, fusion, dot,
        llvm or ptx (`la.debug.ir`)."""
        texts = compile_program(module, self.target, dumps=True).dumps
        if stage not in texts:
            raise ValueError(f"ir: a CUDA program has no stage {stage!r}; its stages: "
                             f"hlo, {', '.join(sorted(texts))}")
        return texts[stage]


def _has_code(program: Program) -> bool:
    """Whether the program or a control step's sub-program has kernels of its own."""
    return bool(program.code) or any(isinstance(s, CONTROL_STEPS) for s in program.steps)


# ---- executables -------------------------------------------------------------------------

class CudaExecutable:
    """A loaded Program (its GPU module) and its steps, run over device buffers."""

    def __init__(self, device: CudaDevice, program: Program, image: bytes,
                 host: Optional[dict] = None) -> None:
        cu = device.cu
        self.device, self.program = device, program
        self.values = program.value_table()      # position -> shape, dtype, op, attrs
        self.steps = program.steps
        self.outputs = list(program.outputs)
        self.functions: dict = {}
        self.cu_module = None
        if image:
            device.activate()
            if host is not None:
                cu.register_host_kernels(image, {k: v for k, v in host.items()
                                                 if k != "__control__"})
            self.cu_module = check(cu.cuModuleLoadData(image), "cuModuleLoadData")
            for step in self.steps:
                if isinstance(step, LaunchStep):
                    self.functions[step.fn] = check(
                        cu.cuModuleGetFunction(self.cu_module, step.fn.encode()),
                        f"cuModuleGetFunction({step.fn})")
        vals = self.values
        self.param_of = {int(p): int(n) for p, n in program.params}
        # every 0-d parameter has a slot in the parameter block (used when given a scalar)
        self.scalar_slot = {pos: k * SCALAR_SLOT for k, pos in
                            enumerate(p for p in self.param_of if vals[p].shape == ())}
        self.param_block = (device.new_buffer((len(self.scalar_slot) * SCALAR_SLOT,), np.uint8)
                            if self.scalar_slot else None)
        self.constants = {p: device.put(v.constant()) for p, v in vals.items()
                          if v.op == "constant"}
        self.graphable = all(isinstance(s, LaunchStep) or self._on_cublas(s) for s in self.steps)
        # a while/conditional step's sub-programs, loaded with this one; the step runs as
        # a graph of its own with conditional nodes (_as_graph) or from the host, so the
        # program's own graph never holds it
        self.subs = {id(s): self._load_subs(s, host) for s in self.steps
                     if isinstance(s, CONTROL_STEPS)}
        self.graphs = GraphCache(lambda g: check(cu.cuGraphExecDestroy(g[0]), "cuGraphExecDestroy"))
        # control steps whose sub-programs a CUDA graph can hold (cuda_loops.py)
        self.loop_graphs = cuda_loops.LoopGraphs(device)
        self._in_graph = {id(s): cuda_loops.graphable(self, s) for s in self.steps
                          if isinstance(s, CONTROL_STEPS)}
        self.kernels_per_run = 0
        self.aliases = {int(o): int(x) for o, x in program.aliases}   # output -> donated param
        self._layouts: deque = deque(maxlen=2)        # where the last runs' results went
        # the private pool of the blocks a run writes, from its second graph-path run on
        # (a program run once keeps nothing back): see _run_graph
        self._pool: Optional[int] = None
        self._copies: Optional[int] = None
        self._pool_after_run = False
        self._results = set(self.outputs) - set(self.aliases)   # (not updated in place)
        self.state_outputs: dict = {}     # a loop body's: output -> its state's parameter (carry)
        self._kept: set = set()        # results a graph copies out (see _note_kept)
        # a value the program returns more than once (two tensors whose graphs are equal,
        # merged by CSE: two `zeros(n)` states): each later tensor gets its own copy, so no
        # buffer is shared by two tensors (a shared one could never be donated, and the
        # next step's donation set, hence its program, would differ)
        self._repeated = [i for i, o in enumerate(self.outputs) if o in self.outputs[:i]]

    def _load_subs(self, step: Step, host: Optional[dict]) -> list:
        progs = step.sub_programs()
        hosts = (host or {}).get("__control__", {}).get(step.kernel) or [None] * len(progs)
        subs = [None if p is None else self.device.load(sub_program(p), h)
                for p, h in zip(progs, hosts)]
        if isinstance(step, WhileStep) and subs[1] is not None:
            subs[1].carry(state_buffers(subs[1].program, step.varying))
        return subs

    def carry(self, buffers: dict) -> None:
        """Made a loop body's: `buffers` {output: parameter} are the state values whose
        new value takes the old one's buffer (program.state_buffers): written over
        it for the plan's aliases, else once the old value is dead (`_bind_aliases`)."""
        self.state_outputs = {o: x for o, x in buffers.items() if o not in self.aliases}

    def _on_cublas(self, step: Step) -> bool:
        """A library step cuBLAS runs on the stream (capturable in a graph)."""
        if not isinstance(step, LibraryStep) or step.call != "gemm" \
                or self.device.cublas() is None:
            return False
        ins = self.values[step.pos]
        return gemm_arguments(ins, *[self.values[o].shape for o in ins.operands]) is not None

    # ---- one run -------------------------------------------------------------------

    def run(self, args: list, in_place: bool = True) -> list:
        """The outputs on `args`. `in_place` False: an output updated in place (the
        plan's aliases) is written into a copy of its parameter, never over it (a loop
        body run one iteration ahead, whose work may be dropped)."""
        dev = self.device
        dev.activate()
        values: dict = dict(self.constants)
        self._bind_parameters(args, values)
        self._bind_aliases(values, in_place)
        self.kernels_per_run = 0
        prof = profile_hooks.ACTIVE
        if prof:              # a profile records: events around each step, kernel by kernel
            self._profiled(prof, values)
        elif self.graphable and dev.settings()["cuda_graphs"]:
            self._run_graph(values)
        else:
            self._steps(values, self._allocate(values))
        results = [self._result(o, values) for o in self.outputs]
        for i in self._repeated:
            own = self.device.new_buffer(results[i].shape, results[i].dtype)
            self.device.copy(results[i], own)
            results[i] = own
        return results

    def _allocate(self, values: dict, prefer: Optional[dict] = None) -> dict:
        """Every buffer of the run before any launch (a graph sees them all), each where
        `prefer` (key -> pointer) puts it when that block is free; the scratch buffers
        are returned. The preferred blocks are claimed first: a result whose block the
        caller still holds (a loss kept in a list) then takes a new block, not the one
        another result was to get back (which moved that result, and the pointers of
        the next run, from step to step)."""
        prefer = prefer or {}
        wanted = [(pos, self.values[pos].shape, self.values[pos].dtype.np)
                  for step in self.steps for pos in _written(step)
                  if not isinstance(pos, str) and pos not in values]
        wanted += [(key, (nbytes,), np.dtype(np.uint8))
                   for key, nbytes in self.program.scratch.items()]
        alloc, got = self.device.allocator, {}
        for key, shape, dtype in wanted:
            ptr, nbytes = prefer.get(key), _nbytes(shape, dtype)
            if ptr is None or key in got or key in self._kept:
                continue
            if alloc.claim(ptr, nbytes, self._pool):
                got[key] = CudaBuffer(self.device, ptr, nbytes, tuple(shape), np.dtype(dtype))
            elif key in self._results and self._held(ptr, values):
                self._kept.add(key)     # the caller holds the result of the run before last
        for key, shape, dtype in wanted:
            if key not in got:      # a kept result outlives the run: not in the run's pool
                got[key] = self._buffer(shape, dtype, self._copies if key in self._kept
                                        else self._pool)
        values.update((k, b) for k, b in got.items() if not isinstance(k, str))
        return {k: b for k, b in got.items() if isinstance(k, str)}

    def _buffer(self, shape: tuple, dtype: np.dtype, pool: Optional[int]) -> CudaBuffer:
        """A new buffer, from the allocator's `pool` (None: the shared cache). Kept
        results take none of the shared cache's blocks: they would eat the blocks that a
        fresh batch comes back to every other step, and move its pointer."""
        nbytes = _nbytes(shape, dtype)
        ptr = self.device.allocator.alloc(nbytes, pool, shared=pool != self._copies)
        return CudaBuffer(self.device, ptr, nbytes, tuple(shape), np.dtype(dtype))

    def _bind_parameters(self, args: list, values: dict) -> None:
        """Buffers as they are; scalars into the parameter block, one async copy."""
        block = None
        for pos, number in self.param_of.items():
            arg = args[number]
            if isinstance(arg, CudaBuffer):
                if arg.device is not self.device:
                    raise ValueError(f"{self.device.name}: a parameter lives on "
                                     f"{arg.device.name}; move it with .to('{self.device.name}')")
                values[pos] = arg
                continue
            ins = self.values[pos]
            if pos not in self.scalar_slot:
                values[pos] = self.device.put(np.asarray(arg, ins.dtype.np).reshape(ins.shape))
                continue
            if block is None:
                block = self.device.staging.take(self.param_block.nbytes)
            offset = self.scalar_slot[pos]
            value = np.asarray(arg, ins.dtype.np).reshape(())
            ctypes.memmove(block.ptr + offset, value.ctypes.data, value.nbytes)
            values[pos] = CudaBuffer(self.device, self.param_block.ptr + offset, value.nbytes,
                                     (), value.dtype, owned=False)
        if block is not None:
            dev = self.device
            check(dev.cu.cuMemcpyHtoDAsync(self.param_block.ptr, block.ptr,
                                             self.param_block.nbytes, dev.stream), "HtoD scalars")
            dev.staging.give(block, dev.stream)
            dev.counters["bytes_to_device"] += self.param_block.nbytes

    def _bind_aliases(self, values: dict, in_place: bool = True) -> None:
        """An output updated in place lands in its donated parameter's buffer; where that
        is not a buffer the caller gave up (a scalar in the parameter block, or `in_place`
        False), in its own buffer holding a copy of the parameter first."""
        for out, param in self.aliases.items():
            given = values[param]
            if in_place and given._finalizer is not None:
                values[out] = given
            else:
                own = self._out(out, values)
                self.device.copy(given, own)
        for out, param in self.state_outputs.items():   # (else a buffer of its own)
            given = values[param]
            if in_place and given._finalizer is not None:
                values[out] = given

    def _out(self, pos: int, values: dict) -> CudaBuffer:
        if pos not in values:
            v = self.values[pos]
            values[pos] = self.device.new_buffer(v.shape, v.dtype.np)
        return values[pos]

    def _result(self, pos: int, values: dict) -> CudaBuffer:
        buf = values[pos]
        if buf._finalizer is None:       # a scalar in the parameter block: an own copy
            own = self.device.new_buffer(buf.shape, buf.dtype)
            self.device.copy(buf, own)
            return own
        return buf

    def _profiled(self, prof: Any, values: dict) -> None:
        """One run with an event pair around each step (devices/cuda/gpu_timer.py); it waits
        for the device, so that the profile gets each kernel's time."""
        scratch = self._allocate(values)
        timer = gpu_timer.EventTimer(self.device.cu, self.device.stream)
        for step in self.steps:
            mark = timer.start()
            self._steps(values, scratch, [step])
            timer.stop(mark, gpu_timer.kernel_name(step, self.program), "gpu")
        self.device.synchronize()
        timer.report(prof, self.program.name)

    def _steps(self, values: dict, scratch: dict, steps: Optional[list] = None) -> None:
        for step in self.steps if steps is None else steps:
            _RUN[type(step)](self, step, values, scratch)

    def _run_graph(self, values: dict) -> None:
        """Replay the graph kept for where the inputs are, capture one, or launch the
        kernels one by one (see cuda_graphs.py)."""
        cu, dev = self.device.cu, self.device
        self._own_pool()
        key = tuple(sorted((pos, b.ptr) for pos, b in values.items()))   # inputs (and in-place outputs)
        entry = self.graphs.lookup(key)
        if entry is not None:
            scratch = self._claim(entry[1], values)
            if scratch is not None:
                self._layouts.append({k: ptr for k, ptr, _ in entry[1]})
                dev.counters["graph_replays"] += 1
                self.kernels_per_run = len(self.steps)
                check(cu.cuGraphLaunch(entry[0], dev.stream), "cuGraphLaunch")
                self._copy_out(entry[2], values)
                return
            self.graphs.replays -= 1           # its blocks are taken: not a replay
            self._note_kept(entry[1])
        # where the run before last put its results: when a training step's parameters
        # and their updates trade buffers, the layouts then repeat every other step
        scratch = self._allocate(values, self._layouts[0] if len(self._layouts) == 2 else None)
        self._layouts.append({**{pos: b.ptr for pos, b in values.items() if (pos, b.ptr) not in key},
                              **{k: b.ptr for k, b in scratch.items()}})
        if not self.graphs.wants_capture(key):
            dev.counters["graph_fallbacks"] += 1
            self._steps(values, scratch)
            return
        graph = self._capture(values, scratch)
        if graph is None:
            return                             # not capturable: already run one by one
        inputs = {pos for pos, _ in key} | {o for o, p in self.aliases.items() if values[o] is values[p]}
        own = {pos: values[pos] for pos in self._kept if pos not in inputs}
        layout = [(pos, b.ptr, b.nbytes) for pos, b in values.items()
                  if pos not in inputs and pos not in own]
        layout += [(k, b.ptr, b.nbytes) for k, b in scratch.items()]
        self.graphs.add(key, (graph, layout, own))
        dev.counters["graph_captures"] += 1
        self.kernels_per_run = len(self.steps)
        check(cu.cuGraphLaunch(graph, dev.stream), "cuGraphLaunch")
        self._copy_out(own, values)

    def _note_kept(self, layout: list) -> None:
        """The results of this program whose blocks in `layout` the caller still holds (a
        loss kept in a list, a sync without `.item()`): a graph writes them into blocks it
        keeps from now on and copies them out after its launch, a copy per result, where
        before such a loop never replayed."""
        alloc = self.device.allocator
        for k, ptr, nbytes in layout:
            if k in self._results and k not in self._kept:
                if alloc.claim(ptr, nbytes, self._pool):
                    alloc.free(ptr)            # free: not held
                elif self._held(ptr, {}):
                    self._kept.add(k)

    def _held(self, ptr: int, values: dict) -> bool:
        """Whether a block of this executable's pool that could not be claimed is held by
        a live result (not another pool's block, not an input of this run)."""
        return self._pool is not None and self.device.allocator.owner(ptr) == self._pool \
            and all(b.ptr != ptr for b in values.values())

    def _copy_out(self, own: dict, values: dict) -> None:
        """Each result a graph wrote into a block of its own, copied into a new buffer
        from a pool of their own (a kept copy taken from the run's pool held a block the
        other graph of a pair writes into; taken from the shared cache, the block the
        next batch was to come back to)."""
        for pos, block in own.items():
            values[pos] = self._buffer(block.shape, block.dtype, self._copies)
            self.device.copy(block, values[pos])

    def _own_pool(self) -> None:
        """From this program's second run on, the blocks it writes (results, temporaries)
        come from and go back to its own pool in the allocator, so that no other program's
        buffers take them between two runs: with a shared cache, an evaluation step or a
        metric between training steps took the blocks the training graph had written into,
        and its claim failed (20 steps with a forward in between: 13-15 captures, no run
        of replays to the end). Results a graph copies out come from a second pool (see
        _copy_out). Both pools end with the executable."""
        if self._pool is None and self._pool_after_run:
            alloc = self.device.allocator
            self._pool, self._copies = next(_POOLS), next(_POOLS)
            for pool in (self._pool, self._copies):
                weakref.finalize(self, alloc.release, pool)
        self._pool_after_run = True

    def _claim(self, layout: list, values: dict) -> Optional[dict]:
        """Take the blocks a graph wrote into; the scratch buffers, or None (and nothing
        taken) when one of them is held by a live buffer."""
        alloc, taken = self.device.allocator, []
        for _, ptr, nbytes in layout:
            if not alloc.claim(ptr, nbytes, self._pool):
                for p in taken:
                    alloc.free(p)
                return None
            taken.append(ptr)
        scratch = {}
        for k, ptr, nbytes in layout:
            if isinstance(k, str):
                scratch[k] = CudaBuffer(self.device, ptr, nbytes, (nbytes,), np.dtype(np.uint8))
            else:
                v = self.values[k]
                values[k] = CudaBuffer(self.device, ptr, nbytes, v.shape, v.dtype.np)
        return scratch

    def _capture(self, values: dict, scratch: dict) -> Optional[Any]:
        """The run's steps captured as an instantiated graph; None when the stream could
        not capture them (then they have run one by one, and this program never tries
        again)."""
        cu, dev = self.device.cu, self.device
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(cu.cuStreamBeginCapture(dev.stream, mode), "cuStreamBeginCapture")
        try:
            self._steps(values, scratch)
        except Exception:
            cu.cuStreamEndCapture(dev.stream)      # (its error, if any, is the same one)
            return self._uncapturable(values, scratch)
        err, graph = cu.cuStreamEndCapture(dev.stream)
        if int(err) != 0:                          # e.g. a library call invalidated it
            return self._uncapturable(values, scratch)
        exe = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
        return exe

    def _uncapturable(self, values: dict, scratch: dict) -> None:
        self.graphable = False
        self.kernels_per_run = 0
        self._steps(values, scratch)
        return None

    def _launch(self, step: LaunchStep, values: dict, scratch: dict) -> None:
        pointers = [scratch[p].ptr if isinstance(p, str) else values[p].ptr for p in step.args]
        packed = PackedArgs(pointers)
        check(self.device.cu.cuLaunchKernel(self.functions[step.fn], *step.grid,
                                            *step.block, step.shared_bytes,
                                            self.device.stream, packed.address, 0),
              f"cuLaunchKernel({step.fn})")
        self.kernels_per_run += 1
        # the launch copied the arguments: `packed` may go now

    def _as_graph(self, step: Step, values: dict) -> bool:
        """The one place a control step's form is chosen: one CUDA graph with conditional
        nodes (cuda_loops.py) where the driver has them and the step's sub-programs fit
        in a graph, not while a profile times each kernel nor with graphs turned off;
        False: the caller drives it from the host."""
        dev = self.device
        if not self._in_graph[id(step)] or profile_hooks.ACTIVE \
                or not dev.settings()["cuda_graphs"] or dev.loop_graphs_missing() is not None:
            return False
        try:
            final = self.loop_graphs.run(self, step, values)
        except cuda_loops.BuildError as e:  # (nothing queued yet): from the host from now on
            self._in_graph[id(step)] = False
            dev.loop_graph_failures.append(str(e))
            if int(dev.settings()["debug"]) >= 1:
                print(f"[lazyarray] {e}; the step is driven from the host")
            return False
        if final is None:
            return False
        for p, k in step.outputs:          # never a buffer of the graph's: a copy
            dev.copy(final[k], self._out(p, values))
        self.kernels_per_run += 1
        return True

    def _while(self, step: WhileStep, values: dict, scratch: dict) -> None:
        """A while: one CUDA graph with a WHILE node where the driver has them
        (_as_graph); else its sub-programs run from here on device buffers, the condition
        read back to the host (host_loops.py), as XLA's GPU backend drives a `while`
        (compiler/codegen/control_steps.py)."""
        if self._as_graph(step, values):
            return
        cond, body = self.subs[id(step)]
        runs = [0]
        state = host_loops.drive_while(
            self.device, step, [values[o] for o in step.operands], cond, body,
            lambda exe, args, in_place: self._run_sub(exe, args, runs, in_place))
        self._control_outputs(step, state, values, runs[0])

    def _conditional(self, step: ConditionalStep, values: dict, scratch: dict) -> None:
        """A conditional: IF nodes of a CUDA graph (_as_graph), else the branch index is
        read back to the host."""
        if self._as_graph(step, values):
            return
        operands = [values[o] for o in step.operands]
        runs = [0]
        branch = self.subs[id(step)][branch_index(step, self.device.get(operands[0]))]
        results = self._run_sub(branch, operands[1:], runs)
        # a result the branch computed becomes the step's output as it is (nothing
        # copied, as the CPU's branch writes the outputs); an operand it passed on, or a
        # constant of its own, is copied
        held = {id(b) for b in operands} | {id(b) for b in branch.constants.values()}
        for p, k in step.outputs:
            if id(results[k]) in held:
                self.device.copy(results[k], self._out(p, values))
            else:
                values[p] = results[k]
                held.add(id(results[k]))        # (a second output of it: a copy)
        self.kernels_per_run += runs[0]

    @staticmethod
    def _run_sub(exe: Any, args: list, runs: list, in_place: bool = True) -> list:
        out = exe.run(args, in_place)
        runs[0] += exe.kernels_per_run
        return out

    def _control_outputs(self, step: Step, state: list, values: dict, runs: int) -> None:
        for p, k in step.outputs:          # never the caller's buffer: a copy
            self.device.copy(state[k], self._out(p, values))
        self.kernels_per_run += runs

    def _library(self, step: LibraryStep, values: dict, scratch: dict) -> None:
        """A call the primitive's stanza names: cuBLAS for "gemm" where it can read the
        operands in place; otherwise the primitive's reference on the host."""
        pos = step.pos
        ins = self.values[pos]
        operands = [values[o] for o in ins.operands]
        if step.call == "gemm":
            shapes = [self.values[o].shape for o in ins.operands]
            if gemm(self.device, ins, operands, self._out(pos, values), *shapes):
                self.kernels_per_run += 1
                return
        native = NATIVE_CALLS.get(ins.op)        # a library of the device's own (cuFFT)
        if native is not None and native(self.device, ins, self._out(pos, values), operands):
            self.kernels_per_run += 1
            return
        calls = P.PRIMITIVES[ins.op].device_calls or {}
        on_stream = calls.get("cuda_stream")     # collectives: NCCL on the device's stream
        if on_stream is not None and on_stream(self.device, ins, self._out(pos, values), operands):
            return
        call = SOLVER_CALLS.get(ins.op)          # cuSOLVER, registered for this target
        if call is not None and run_library_call(self.device, ins, self._out(pos, values),
                                                 operands, call):
            return
        host = [self.device.get(b) for b in operands]       # host fallback, exact reference
        with np.errstate(all="ignore"):
            out = P.PRIMITIVES[ins.op].reference(*host, **ins.attrs)
        values[pos] = self.device.put(np.asarray(out, ins.dtype.np).reshape(ins.shape))


# step class -> the method that runs it (one handler per kind of step)
_RUN = {LaunchStep: CudaExecutable._launch, LibraryStep: CudaExecutable._library,
        WhileStep: CudaExecutable._while, ConditionalStep: CudaExecutable._conditional}


# primitive -> fn(device, ins, out, operands) -> bool: calls the device makes itself on
# its stream, before the stanza's device calls and the host reference (False: cannot)
NATIVE_CALLS = {"fft": run_fft}


def _nbytes(shape: tuple, dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
