"""Devices by name: which runtime serves 'interpreter', 'cpu' and 'cuda'."""
from __future__ import annotations

import importlib.util

from .devices.interpreter import InterpreterDevice
from . import config, debug, metrics, runtime

runtime.register_device("interpreter", lambda name: InterpreterDevice())


def _register_cpu() -> None:
    """'cpu' (the compiled device, and then the default) where llvmlite is installed.
    Its module (and LLVM) is imported when the first CPU tensor is made, not by
    `import lazyarray`: a process that only records ops, or uses another device, never
    pays for it."""
    if importlib.util.find_spec("llvmlite") is None:
        return
    runtime.register_device("cpu", _make_cpu, count=lambda: max(1, int(config.cpu_devices)))
    for stage in ("optimized_hlo", "fusion", "llvm", "asm", "dot", "ptx"):
        debug.STAGES.setdefault(stage, _stage_of_device(stage))


def _make_cpu(name: str):
    from .devices.cpu.cpu import DEFAULT_SETTINGS, CPUDevice
    names = tuple(DEFAULT_SETTINGS)
    values = config._values     # the dict itself: attribute reads cost ~1 us each per run

    def settings() -> dict:
        """What the CPU device reads from lazyarray's config, at every compile and run."""
        return {k: values[k] for k in names}

    def run_settings() -> tuple:
        """What a cached run depends on, read at every run."""
        return values["num_threads"], values["debug"]
    return _named(CPUDevice(settings, run_settings), name)


def _named(device, name: str):
    """A logical CPU device other than the first reports its own name ('cpu:1')."""
    device.name = name
    return device


def _stage_of_device(stage: str):
    def text(module, device) -> str:
        if not hasattr(device, "stage"):
            raise ValueError(f"ir: device {device.name!r} has no stage {stage!r}; "
                             f"compute the tensors on 'cpu' to see it")
        return device.stage(module, stage)
    return text


_register_cpu()


def _cuda_settings() -> dict:
    v = config._values
    return {"cuda_graphs": v["cuda_graphs"], "cache_dir": v["cache_dir"], "debug": v["debug"],
            "dump": v["dump"]}


def _make_cuda(name: str):
    """A CUDA device; where none can be made, the error says whether the GPU, the NVIDIA
    driver or the `cuda` extra (cuda-python) is missing."""
    from .devices.cuda import cuda
    return cuda.CudaDevice(name, _cuda_settings, fake=config.fake_cuda)


def _cuda_stats() -> dict:
    """Counters of every CUDA device made so far (summed), for la.debug.metrics()."""
    total: dict = {}
    for state in runtime.live_states():
        if state.device.platform == "cuda":
            for k, v in state.device.stats().items():
                total[k] = total.get(k, 0) + v
    return total


def _register_cuda() -> None:
    """'cuda' and 'cuda:N' are always known names; making one raises a clear error where
    no GPU (or the stand-in, LAZYARRAY_FAKE_CUDA=1) is usable."""
    from .devices.cuda import libraries
    libraries.use_stand_ins(config.fake_cuda)  # so that cuda.available() tells the truth
    runtime.register_device("cuda", _make_cuda, count=_cuda_count)
    metrics.register_source(_cuda_stats)


def _cuda_count() -> int:
    """The GPUs the driver counts; 1 where none is usable (making 'cuda' then says why)."""
    from .devices.cuda.cuda_driver import check
    from .devices.cuda.libraries import libraries
    libs = libraries(config.fake_cuda)
    if libs.missing() is not None:
        return 1
    return check(libs.driver().cuDeviceGetCount(), "cuDeviceGetCount")


_register_cuda()
