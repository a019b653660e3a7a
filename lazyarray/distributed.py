"""Data-parallel training across processes: `la.distributed`.

Launch one process per worker with MPI (`mpiexec -n 2 python train.py`), call `init()` in
each and wrap the model in `DistributedDataParallel`: `loss.backward()` then averages the
gradients over the processes (as PyTorch's DDP; with the tape, `reduce_gradients` does).
The all-reduce is a primitive of the step's graph, so forward, backward, the gradient
all-reduce and the update are still one compiled program per step; each process runs it
on its shard of the batch.

Collectives run on MPI through mpi4py (`pip install "lazyarray[distributed]"`, which
brings Open MPI's wheel) and, for CUDA tensors, on NCCL (`lazyarray[distributed-gpu]`
adds the nvidia-nccl-cu12 wheel): each process then computes on its own GPU,
`device()`. Without `init()` a program is a group of one process and every collective is
the identity.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator, Optional

from .compiler.transforms import autodiff
from .compiler.primitives import process_group as _group
from .compiler.primitive import apply
from .backward import on_backward_end
from .tensor import Tensor
from . import config, runtime
from . import cuda as _cuda

REDUCE_OPS = ("sum", "mean", "prod", "max", "min")


def init(backend: str = "auto") -> None:
    """Join the group of processes the launcher started (MPI's COMM_WORLD).

    `backend`: "nccl" runs the collectives of CUDA tensors on NCCL, on this process's GPU
    (`device()`: cuda:<local rank>), and those of CPU tensors on MPI; "mpi" runs all of
    them on MPI (a CUDA tensor's through host memory); "auto" (the default) is "nccl"
    where a CUDA device and NCCL are usable, else "mpi", as torch.distributed chooses."""
    from .devices.cuda.libraries import libraries
    from .devices.cuda.nccl_communicator import NcclCommunicator, select_backend
    select_backend(backend, None, None)          # a bad name fails before MPI starts
    if is_initialized():
        raise RuntimeError(f"distributed.init: this process is already in a group (backend "
                           f"{_group.communicator().backend!r}); call shutdown() first")
    try:
        from .devices.collectives import MPICommunicator, note
        host = MPICommunicator()
    except ImportError as e:
        raise ImportError("distributed.init: mpi4py is not installed; install the extra: "
                          "pip install \"lazyarray[distributed]\" (mpi4py and Open MPI)") from e
    libs = libraries(config.fake_cuda)
    cuda_missing = libs.missing()
    looks = backend != "mpi" and not cuda_missing
    nccl, nccl_missing = libs.nccl() if looks else (None, None)
    chosen, why = select_backend(backend, cuda_missing, nccl_missing)
    if why:
        note(why)
    runtime.sync()              # values recorded before joining are computed alone
    if chosen == "mpi":
        _group.set_communicator(host)
        return
    gpu = runtime.get_device(_local_gpu(host)).device
    _group.set_communicator(NcclCommunicator(host, gpu, nccl))


def _local_gpu(host) -> str:
    """cuda:<this process's rank on its host>: one GPU per process, as NCCL requires."""
    if config.fake_cuda:          # the stand-in has one "GPU"; its processes share it
        return "cuda:0"
    local, local_size = host.local_rank()
    count = _cuda.device_count()
    if local_size > count:
        raise RuntimeError(f"distributed.init(backend='nccl'): {local_size} processes on "
                           f"this host but {count} GPUs; NCCL needs one GPU per process "
                           f"(launch at most {count} per host, or use backend='mpi')")
    return f"cuda:{local}"


def is_initialized() -> bool:
    return not isinstance(_group.communicator(), _group.SingleProcess)


def backend() -> str:
    """'nccl' or 'mpi' once `init` has run; 'none' in a group of one."""
    return getattr(_group.communicator(), "backend", "none")


def device() -> str:
    """The device this process computes on: its GPU with NCCL, else 'cpu'."""
    comm = _group.communicator()
    return comm.device.name if backend() == "nccl" else "cpu"


def stats() -> dict:
    """How many collectives ran on the GPU through NCCL ('nccl') and through host memory
    on MPI ('host'), in this process since `init`."""
    return dict(getattr(_group.communicator(), "counts", {"nccl": 0, "host": 0}))


def shutdown() -> None:
    """Leave the group: collectives become the identity again."""
    runtime.sync()
    comm = _group.communicator()
    _group.set_communicator(None)
    if hasattr(comm, "close"):
        comm.close()


def rank() -> int:
    return _group.communicator().rank


def world_size() -> int:
    return _group.communicator().size


def barrier() -> None:
    runtime.sync()
    comm = _group.communicator()
    if hasattr(comm, "barrier"):
        comm.barrier()


def _check(op: str, t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"distributed.{op}: expects a Tensor, got {type(t).__name__}")
    return t


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """Combine `t` across every process (sum, mean, prod, max, min); every process gets
    the result. Recorded like any op: it runs inside the next sync's program."""
    t = _check("all_reduce", t)
    if op not in REDUCE_OPS:
        raise ValueError(f"distributed.all_reduce: op must be one of {REDUCE_OPS}, got {op!r}")
    node = apply("all_reduce", t._node, kind="sum" if op == "mean" else op)
    out = Tensor._wrap(node, t._state)
    return out / world_size() if op == "mean" else out


def broadcast(t: Tensor, src: int = 0) -> Tensor:
    """Process `src`'s value of `t`, on every process."""
    t = _check("broadcast", t)
    if not 0 <= src < world_size():
        raise ValueError(f"distributed.broadcast: src {src} is not a rank of this group of "
                         f"{world_size()} processes")
    return Tensor._wrap(apply("broadcast", t._node, root=int(src)), t._state)


def all_gather(t: Tensor) -> Tensor:
    """Every process's `t`, stacked along a new leading axis in rank order."""
    t = _check("all_gather", t)
    return Tensor._wrap(apply("all_gather", t._node, size=world_size()), t._state)


class DistributedDataParallel:
    """A model replicated on every process, as PyTorch's DDP.

    - At construction every parameter and buffer takes rank `src`'s value (a broadcast).
    - `loss.backward()` averages the gradients over the processes before it returns:
      the `.grad` of every parameter is then the mean of the processes' gradients, as
      if one process had computed the loss's mean over the combined batch. The gradients
      travel in buckets of at most `bucket_cap_mb` (one all-reduce per bucket, over the
      gradients flattened into one array; in reverse parameter order, as PyTorch fills
      them), recorded into the step's lazy program: forward, backward, the all-reduces
      and the optimizer's update are still one compiled program per step.
    - `with ddp.no_sync():` backward() only accumulates this process's gradients; the
      first backward() after the block averages the accumulated ones.
    - The tape style: `reduce_gradients(tape.gradient(loss, params))` averages a list.

    A parameter that gets no gradient in a backward() that reaches others gets the mean
    of the others' (zero here): every process runs the same collectives in the same
    order, whatever its shard used (PyTorch's `find_unused_parameters=True`)."""

    def __init__(self, module: Any, device_ids: Optional[list] = None,
                 output_device: Any = None, broadcast_buffers: bool = True,
                 bucket_cap_mb: float = 25.0, find_unused_parameters: bool = False,
                 gradient_as_bucket_view: bool = False, src: int = 0) -> None:
        """PyTorch's arguments: `device_ids` ([i], or None) and `output_device` name the
        one device the module lives on (checked: a module is not moved or split here);
        `find_unused_parameters` and `gradient_as_bucket_view` are accepted and change
        nothing (unused parameters are always handled, see above; a gradient is a lazy
        value, not a view of a bucket's memory)."""
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        params = list(module.parameters())
        _check_devices(params, device_ids, output_device)
        shared = params + (list(module.buffers()) if broadcast_buffers and
                           hasattr(module, "buffers") else [])
        for p in shared:
            p._assign(broadcast(p, src)._node)
        if shared:
            runtime.sync(shared[0]._state)
        self._params = params
        self._ids = {id(p) for p in params}
        self._buckets = buckets(params, int(self.bucket_cap_mb * (1 << 20)))
        self.require_backward_grad_sync = True
        on_backward_end(self._reduce_after_backward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self) -> Iterable[Tensor]:
        return self.module.parameters()

    # PyTorch's DDP is a module holding the model as `module`: its names carry "module."
    def named_parameters(self, prefix: str = "") -> Iterator[tuple]:
        return self.module.named_parameters(f"{prefix}.module" if prefix else "module")

    def state_dict(self) -> dict:
        """The model's state under "module."-prefixed names, as PyTorch's DDP gives it
        (`ddp.module.state_dict()` gives the plain names)."""
        return type(self.module.state_dict())(
            ("module." + k, v) for k, v in self.module.state_dict().items())

    def load_state_dict(self, state: Any, strict: bool = True) -> Any:
        """Load a state saved from a DDP (names with "module.") or from the bare model."""
        plain = {k[len("module."):] if k.startswith("module.") else k: v
                 for k, v in state.items()}
        return self.module.load_state_dict(plain, strict)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """backward() inside accumulates this process's gradients without averaging."""
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    def reduce_gradients(self, grads: Any) -> list:
        """The mean of each gradient over the processes (None stays None)."""
        return [None if g is None else all_reduce(g, "mean") for g in grads]

    def _reduce_after_backward(self, filled: list) -> None:
        """At the end of a backward() that filled any of our parameters' gradients:
        average every parameter's `.grad`, bucket by bucket."""
        if not self.require_backward_grad_sync or not any(id(t) in self._ids for t in filled):
            return
        for bucket in self._buckets:
            for p, g in zip(bucket, average_bucket(bucket)):
                p._grad = g

    def __getattr__(self, name: str) -> Any:
        if name == "module":          # (before __init__ set it: no recursion)
            raise AttributeError(name)
        return getattr(self.module, name)


def _check_devices(params: list, device_ids: Optional[list], output_device: Any) -> None:
    """device_ids ([i]) and output_device must name the one device the module is on."""
    given = list(device_ids or []) + ([output_device] if output_device is not None else [])
    if not given:
        return
    on = {p._state.index for p in params}
    named = {_index(d) for d in given}
    if len(device_ids or []) > 1 or len(on) > 1 or named != on:
        where = sorted({str(p._state) for p in params})
        raise ValueError(f"DistributedDataParallel: device_ids={device_ids!r}, "
                         f"output_device={output_device!r}, but the module's parameters "
                         f"are on {', '.join(where)}; give the one device the module is on "
                         f"(move it there first with .to(...)), or None")


def _index(device: Any) -> int:
    """The index of a device given as a number, a name ('cuda:1') or a device object."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        return runtime.get_device(device).index
    return int(getattr(device, "index", 0) or 0)


def buckets(params: list, cap_bytes: int) -> list:
    """The parameters in buckets of one device and dtype, each at most `cap_bytes` (a
    larger parameter alone), in reverse order (the order backward fills them)."""
    out: list = []
    open_by_kind: dict = {}
    for p in reversed(params):
        kind = (id(p._state), p.dtype)
        nbytes = p.size * p.dtype.itemsize
        bucket = open_by_kind.get(kind)
        if bucket is None or bucket[1] + nbytes > cap_bytes:
            bucket = open_by_kind[kind] = [[], 0]
            out.append(bucket)
        bucket[0].append(p)
        bucket[1] += nbytes
    return [b[0] for b in out]


def average_bucket(bucket: list) -> list:
    """Each parameter's `.grad` (zeros where it has none) averaged over the processes with
    one all-reduce of their concatenation."""
    from .api import concat, zeros
    flats = [(p._grad if getattr(p, "_grad", None) is not None else
              zeros(p.shape, dtype=p.dtype, device=p._state)).reshape(-1) for p in bucket]
    mean = all_reduce(concat(flats) if len(flats) > 1 else flats[0], "mean")
    out, start = [], 0
    for p in bucket:
        # a value, as backward()'s .grad is: no path back into the step's graph
        g = mean[start:start + p.size].reshape(p.shape)
        out.append(Tensor._wrap(autodiff.stop(g._node), p._state))
        start += p.size
    return out
