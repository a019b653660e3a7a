"""Host object code loaded into the process (LLVM's MCJIT), functions by name.

The disk cache stores object code, so a Program's code is loaded this way whether it was
just compiled or read from disk.
"""
from __future__ import annotations

import functools
from typing import Any

import llvmlite.binding as llvm

from ...compiler.driver import CPU, llvm_lock, target_id


@functools.lru_cache(maxsize=None)
def _initialized() -> bool:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


class LoadedCode:
    """Object code in its own MCJIT engine (which owns and frees its target machine)."""

    def __init__(self, obj: bytes) -> None:
        _initialized()
        # the host's triple, CPU and features, asked of LLVM once per process (the
        # features query was ~2 ms per load, and a first run loads several objects)
        triple, cpu, features = target_id(CPU)[:3]
        with llvm_lock():
            tm = llvm.Target.from_triple(triple).create_target_machine(
                cpu=cpu, features=features, reloc="pic", codemodel="jitdefault")
            empty = llvm.parse_assembly("")
            empty.triple = tm.triple
            self.engine = llvm.create_mcjit_compiler(empty, tm)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()

    def address(self, name: str) -> int:
        with llvm_lock():
            addr = self.engine.get_function_address(name)
        if not addr:
            raise ValueError(f"compiled code has no function {name!r}")
        return addr

    def global_address(self, name: str) -> int:
        """The address of a global variable of the code (a table the device fills)."""
        with llvm_lock():
            addr = self.engine.get_global_value_address(name)
        if not addr:
            raise ValueError(f"compiled code has no global {name!r}")
        return addr
