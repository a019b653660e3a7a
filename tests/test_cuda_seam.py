"""The CUDA runtime opens NVIDIA's libraries through one seam (devices/cuda/libraries.py):
the real ones or the stand-ins of devices/stand_ins/, chosen there and nowhere else."""
from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

from lazyarray.devices.cuda import libraries as L
from lazyarray.devices.stand_ins.libraries import STAND_INS, StandIns

CUDA = pathlib.Path(L.__file__).resolve().parent


def stand_in_imports(source: str) -> list:
    """Lines of `source` that import a stand-in module (absolute or relative)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any("stand_ins" in n or n.endswith("_fake") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_seam_imports_the_stand_ins():
    found = {p.name: stand_in_imports(p.read_text()) for p in sorted(CUDA.glob("*.py"))
             if p.name != "libraries.py"}
    assert not {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("source, found", [
    ("from ..stand_ins.cuda_fake import FakeCublas\n", [1]),
    ("def f():\n    from ..stand_ins import nccl_fake\n", [2]),
    ("from . import cuda_blas\n", []),
])
def test_the_checker_finds_a_stand_in_import(source, found):
    assert stand_in_imports(source) == found


def test_both_sides_provide_every_library():
    wanted = {n for n in vars(L.Libraries) if not n.startswith("_")} - {"stand_in"}
    for side in (L.Nvidia, StandIns):
        for name in wanted:
            theirs = inspect.signature(getattr(side, name))
            assert theirs.parameters.keys() == \
                inspect.signature(getattr(L.Libraries, name)).parameters.keys(), (side, name)


def test_the_choice_is_made_once():
    assert L.libraries(True) is STAND_INS and L.libraries(False) is L.NVIDIA
    assert STAND_INS.stand_in and not L.NVIDIA.stand_in
    assert STAND_INS.missing() is None


def test_a_stand_in_device_gets_every_library_from_the_seam():
    from lazyarray.devices.cuda import cuda_fft, cuda_solver
    from lazyarray.devices.cuda.cuda import CudaDevice
    from lazyarray.devices.stand_ins import cuda_fake, cuda_fft_fake, cuda_solver_fake
    device = CudaDevice("cuda", fake=True)
    assert device.libs is STAND_INS and device.cu is cuda_fake.FAKE_DRIVER
    assert isinstance(device.cublas()[0], cuda_fake.FakeCublas)
    assert isinstance(cuda_fft.plan_cache(device).cufft.lib, cuda_fft_fake.FakeCufft)
    blas, solver = cuda_solver._libraries(device)
    assert isinstance(blas, cuda_solver_fake.FakeCublasRoutines)
    assert isinstance(solver, cuda_solver_fake.FakeCusolverDn)


# ---- one way to bind a C library: cuBLAS as NCCL and cuFFT -----------------------------

def test_cublas_declares_every_function_its_wrapper_calls():
    from lazyarray.devices.cuda import cuda_blas
    source = inspect.getsource(cuda_blas.CublasLib)
    called = {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)
              and isinstance(n.value, ast.Attribute) and n.value.attr == "lib"}
    called |= {n.value for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.Constant) and str(n.value).startswith("cublas")
               and str(n.value).endswith("_v2")}     # (not the error labels)
    assert called and called <= set(cuda_blas.PROTOTYPES), called - set(cuda_blas.PROTOTYPES)


def test_cublas_loads_through_the_shared_loader(monkeypatch, tmp_path):
    import types
    from lazyarray.devices import ctypes_library
    from lazyarray.devices.cuda import cuda_blas
    monkeypatch.setattr(cuda_blas, "library_paths", lambda: [str(tmp_path / "libcublas.so.12")])
    lib, why = cuda_blas.load()
    assert lib is None and "cuBLAS cannot be loaded" in why and "nvidia-cublas" in why
    fake = types.SimpleNamespace(**{name: types.SimpleNamespace() for name in cuda_blas.PROTOTYPES})
    bound = cuda_blas.CublasLib(ctypes_library.bind(fake, cuda_blas.PROTOTYPES), "fake")
    assert bound.lib.cublasGemmStridedBatchedEx.argtypes[0] is cuda_blas._VP
