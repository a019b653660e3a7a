"""Devices by name: which runtime serves 'interpreter', 'cpu' and 'cuda'."""
from __future__ import annotations

from .devices.interpreter import InterpreterDevice
from . import config, debug, runtime

runtime.register_device("interpreter", lambda name: InterpreterDevice())


def _cpu_settings() -> dict:
    """What the CPU device reads from lazyarray's config, at every compile and run."""
    v = config._values      # the values dict itself: attribute reads cost ~1 us each per run
    return {"num_threads": v["num_threads"], "cache_dir": v["cache_dir"],
            "cache_max_mb": v["cache_max_mb"],
            "dump": v["dump"], "debug": v["debug"], "verify": v["verify"]}


def _register_cpu() -> None:
    """'cpu' (the compiled device, and then the default) where llvmlite imports."""
    try:
        from .devices.cpu import CPUDevice
    except ImportError:
        return
    runtime.register_device("cpu", lambda name: _named(CPUDevice(_cpu_settings), name),
                            count=lambda: max(1, int(config.cpu_devices)))
    for stage in ("optimized_hlo", "llvm", "asm", "dot"):
        debug.STAGES.setdefault(stage, _stage_of_device(stage))


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


def _register_cuda() -> None:
    """'cuda' and 'cuda:N' exist only where cuda-python imports and a GPU is present."""
    from .devices import cuda
    if cuda.available():
        runtime.register_device("cuda", lambda name: cuda.CudaDevice(name),
                                count=lambda: cuda.check(cuda.driver().cuDeviceGetCount(),
                                                         "cuDeviceGetCount"))


_register_cuda()
