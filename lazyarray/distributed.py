"""Data-parallel training across processes: `la.distributed`.

Launch one process per worker with MPI (`mpiexec -n 2 python train.py`), call `init()` in
each, wrap the model in `DistributedDataParallel` and average the gradients with
`reduce_gradients` before the optimizer step. The all-reduce is a primitive of the step's
graph, so forward, backward, the gradient all-reduce and the update are still one compiled
program per step; each process runs it on its shard of the batch.

Collectives run on MPI through mpi4py (`pip install "lazyarray[distributed]"`, which
brings Open MPI's wheel) and, for CUDA tensors, on NCCL (`lazyarray[distributed-gpu]`
adds the nvidia-nccl-cu12 wheel): each process then computes on its own GPU,
`device()`. Without `init()` a program is a group of one process and every collective is
the identity.
"""
from __future__ import annotations

from typing import Any, Iterable

from .compiler.primitives import process_group as _group
from .compiler.primitive import apply
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
    """A model replicated on every process (PyTorch's DDP, with the tape): the parameters
    start as rank 0's, each process computes gradients on its shard of the batch, and
    `reduce_gradients` averages them across processes inside the step's program."""

    def __init__(self, module: Any, src: int = 0) -> None:
        self.module = module
        params = list(module.parameters())
        for p in params:
            p._assign(broadcast(p, src)._node)
        if params:
            runtime.sync(params[0]._state)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def parameters(self) -> Iterable[Tensor]:
        return self.module.parameters()

    def reduce_gradients(self, grads: Any) -> list:
        """The mean of each gradient over the processes (None stays None)."""
        return [None if g is None else all_reduce(g, "mean") for g in grads]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


