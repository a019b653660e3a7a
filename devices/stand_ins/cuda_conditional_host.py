"""The set-conditional kernels (devices/cuda/conditional_kernels.py) run by the stand-in
driver: the same LLVM IR as their PTX, built for the host, its `cudaGraphSetConditional`
bound to the stand-in driver's (cuda_fake.FakeDriver.set_conditional). So the stand-in
runs our kernel's own loads, clamping and calls, not a Python twin of them."""
from __future__ import annotations

import ctypes
import functools
from typing import Callable

import llvmlite.binding as llvm

from ...compiler.driver import host_object, llvm_lock
from ..cpu.object_code import LoadedCode
from ..cuda import conditional_kernels as ck
from .cuda_fake import FAKE_DRIVER, FakeError

_SETTER = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint32)
_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_ERRORS: list = []           # raised in the callback (ctypes would only print them)


def _set(handle: int, value: int) -> None:
    try:
        FAKE_DRIVER.set_conditional(handle, value)
    except FakeError as e:
        _ERRORS.append(e)


_CALLBACK = _SETTER(_set)


@functools.lru_cache(maxsize=1)
def _code() -> LoadedCode:
    with llvm_lock():
        llvm.add_symbol(ck.SET_CONDITIONAL, ctypes.cast(_CALLBACK, ctypes.c_void_p).value)
    return LoadedCode(host_object(str(ck.module(host=True)), "lazyarray_conditional"))


def host_kernels() -> dict:
    """Entry name -> (callable(device pointers), number of parameters), as the stand-in
    driver's `register_host_kernels` takes them."""
    code = _code()
    return {name: (_runner(_KERNEL(code.address(name))), 2) for name in ck.ENTRIES}


def _runner(fn: Callable) -> Callable:
    def run(pointers: list) -> None:
        fn(*pointers)
        if _ERRORS:
            raise _ERRORS.pop()
    return run
