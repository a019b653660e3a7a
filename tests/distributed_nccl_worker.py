"""One process of the NCCL path's test (tests/test_distributed_nccl.py launches two with
`mpiexec -n 2` and LAZYARRAY_FAKE_CUDA=1): `init(backend="nccl")` over the fake CUDA
driver and the NCCL stand-in (devices/stand_ins/nccl_fake.py), collectives of CUDA tensors, the
binding's group and error paths, then data-parallel training on the "GPU". Rank 0 saves
what it saw; the test compares it with NumPy and with one process on the whole batch."""
from __future__ import annotations

import sys
import warnings

import numpy as np

import lazyarray as la
from lazyarray.compiler.primitives import process_group as group
from lazyarray.devices.stand_ins import cuda_fake
from lazyarray.devices.cuda.nccl_library import NcclError

import distributed_worker as plain


def collectives(rank: int, size: int, dev: str) -> dict:
    """Each collective on a CUDA tensor whose value depends on the rank."""
    base = np.arange(1.0, 7.0).reshape(2, 3) + rank
    t = la.asarray(base.astype(np.float32), device=dev)
    out = {f"reduce_{op}": la.distributed.all_reduce(t, op).numpy()
           for op in ("sum", "mean", "prod", "max", "min")}
    out["reduce_bf16"] = la.distributed.all_reduce(t.astype("bfloat16"), "sum").astype("float32").numpy()
    out["reduce_c64"] = la.distributed.all_reduce(
        la.asarray((base + 1j * rank).astype(np.complex64), device=dev), "sum").numpy()
    out["reduce_i64_max"] = la.distributed.all_reduce(t.astype("int64") * (rank + 1), "max").numpy()
    out["broadcast_1"] = la.distributed.broadcast(t, src=size - 1).numpy()
    out["gather"] = la.distributed.all_gather(t).numpy()
    out["gather_bool"] = la.distributed.all_gather(t > 3.5).numpy()
    before = la.distributed.stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["reduce_i16"] = la.distributed.all_reduce(t.astype("int16"), "sum").numpy()
    after = la.distributed.stats()
    out["i16_path"] = np.array([after["nccl"] - before["nccl"], after["host"] - before["host"]])
    out["i16_note"] = np.array(" | ".join(str(w.message) for w in caught))
    return out


def stream_order(dev: str) -> dict:
    """The all-reduce is queued on the stream behind the kernel that makes its operand and
    before the one that reads it: after a sync nothing has run yet on the stand-in (its
    work runs when the stream is waited for), and the value read is still right."""
    stream = la.runtime.get_device(dev).device.stream
    t = la.asarray(np.full((4, 4), 0.5, np.float32), device=dev)
    la.cuda.synchronize(dev)
    y = la.distributed.all_reduce(la.tanh(t) * 2, "sum") + 1
    la.sync()
    fake = la.runtime.get_device(dev).device.fake
    pending = cuda_fake.FAKE_DRIVER.pending(stream) if fake else -1
    return {"pending_after_sync": np.array(pending), "chain": y.numpy()}


def binding(rank: int, dev: str) -> dict:
    """The binding on device buffers directly: a group of two all-reduces, in place, and a
    pointer NCCL rejects."""
    comm = group.communicator()
    device = la.runtime.get_device(dev).device
    nccl = comm.nccl
    a = device.put(np.full(5, rank + 1.0, np.float32))
    b = device.put(np.full(3, 10.0 * (rank + 1), np.float64))
    with nccl.group():
        nccl.all_reduce(a.ptr, a.ptr, 5, 7, "sum", comm.handle, int(device.stream))
        nccl.all_reduce(b.ptr, b.ptr, 3, 8, "max", comm.handle, int(device.stream))
    out = {"group_a": device.get(a), "group_b": device.get(b),
           "comm_count": np.array(nccl.count(comm.handle)),
           "comm_rank": np.array(nccl.user_rank(comm.handle)),
           "async_error": np.array(nccl.async_error(comm.handle))}
    if not device.fake:           # on a GPU a wild pointer may fault rather than fail
        return out
    try:
        nccl.all_reduce(a.ptr, a.ptr + (1 << 40), 5, 7, "sum", comm.handle, int(device.stream))
        out["bad_pointer"] = np.array("no error")
    except NcclError as e:
        out["bad_pointer"] = np.array(str(e))
    return out


def training(rank: int, size: int, dev: str) -> dict:
    x, y = plain.data()
    shard = slice(rank * len(x) // size, (rank + 1) * len(x) // size)
    with la.config.override(device=dev):
        ddp = la.distributed.DistributedDataParallel(plain.model(seed=rank))
        params = list(ddp.parameters())
        la.debug.reset_metrics()
        before = la.distributed.stats()
        losses = plain.train(ddp, params, x[shard], y[shard], ddp.reduce_gradients)
        metrics = la.debug.metrics()
        after = la.distributed.stats()
    out = {f"param_{i}": p.numpy() for i, p in enumerate(params)}
    out.update(losses=np.array(losses), compiles=np.array(metrics.cache_misses),
               bytes_from_device=np.array(metrics.bytes_from_device),
               train_nccl=np.array(after["nccl"] - before["nccl"]),
               train_host=np.array(after["host"] - before["host"]),
               param_devices=np.array([str(p.device) for p in params]))
    return out


def other_paths(rank: int) -> dict:
    """The host path, with its note: a CUDA tensor on another device than the
    communicator's, then every CUDA tensor after `init(backend="mpi")`."""
    from lazyarray import devices_registry
    from lazyarray.devices.cuda.cuda import CudaDevice
    la.runtime.register_device(
        "othergpu", lambda name: CudaDevice(name, devices_registry._cuda_settings, fake=True))
    out = {}
    for name, dev in (("other_gpu", "othergpu"), ("mpi_backend", "cuda")):
        if name == "mpi_backend":
            la.distributed.shutdown()
            la.distributed.init(backend="mpi")
            out["mpi_device"] = np.array(la.distributed.device())
        t = la.asarray(np.full(3, rank + 1.0, np.float32), device=dev)
        before = la.distributed.stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out[name] = la.distributed.all_reduce(t, "sum").numpy()
        after = la.distributed.stats()
        out[f"{name}_path"] = np.array([after["nccl"] - before["nccl"], after["host"] - before["host"]])
        out[f"{name}_note"] = np.array(" | ".join(str(w.message) for w in caught))
    return out


def main(out_path: str) -> None:
    la.distributed.init(backend="nccl")
    rank, size = la.distributed.rank(), la.distributed.world_size()
    dev = la.distributed.device()
    out = {"backend": np.array(la.distributed.backend()), "device": np.array(dev),
           "size": np.array(size)}
    out.update(collectives(rank, size, dev))
    out.update(stream_order(dev))
    out.update(binding(rank, dev))
    out.update(training(rank, size, dev))
    out.update(other_paths(rank))
    la.distributed.barrier()
    if rank == 0:
        np.savez(out_path, **out)
    la.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
