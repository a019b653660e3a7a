"""Host object code loaded into the process (LLVM's MCJIT), functions by name.

The disk cache stores object code, so a Program's code is loaded this way whether it was
just compiled or read from disk.
"""
from __future__ import annotations

import ctypes
import functools
import struct
from typing import Any, Optional

import llvmlite.binding as llvm

from ...compiler.driver import CPU, host_objects, llvm_lock, target_id


# half-float conversions LLVM lowers to calls where the CPU lacks an instruction (no F16C;
# double <-> half everywhere): an unresolved one loads as a null address, and calling it
# is a SIGSEGV. libgcc (GCC 12 and later) has them.
_HALF_CALLS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2")


@functools.lru_cache(maxsize=None)
def _initialized() -> bool:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _resolve_half_calls()
    return True


def _resolve_half_calls() -> None:
    try:
        libgcc = ctypes.CDLL("libgcc_s.so.1")
    except OSError:
        return
    for name in _HALF_CALLS:
        if not llvm.address_of_symbol(name) and hasattr(libgcc, name):
            llvm.add_symbol(name, ctypes.cast(getattr(libgcc, name), ctypes.c_void_p).value)


def malformed(obj: bytes) -> Optional[str]:
    """Why `obj` is not a whole ELF object file, or None. LLVM's loader trusts the file's
    offsets: object code cut short (a full disk, a killed writer, a damaged cache entry
    whose hash was rewritten) made it read past the end and crash the process. Checked:
    the header, and that the section header table and every section with contents lie
    inside the file."""
    if len(obj) < 52 or obj[:4] != b"\x7fELF" or obj[4] not in (1, 2) or obj[5] not in (1, 2):
        return "not an ELF object file"
    wide, order = obj[4] == 2, "<" if obj[5] == 1 else ">"
    if wide and len(obj) < 64:
        return "its ELF header is cut short"
    shoff, shentsize, shnum = struct.unpack_from(
        order + ("Q10xHH" if wide else "I10xHH"), obj, 0x28 if wide else 0x20)
    if shnum == 0 or shentsize != (64 if wide else 40):
        return "it has no section header table"
    if shoff + shnum * shentsize > len(obj):
        return (f"its section headers end at byte {shoff + shnum * shentsize}, past its "
                f"end ({len(obj)} bytes)")
    for k in range(shnum):
        at = shoff + k * shentsize
        kind, = struct.unpack_from(order + "I", obj, at + 4)
        offset, size = struct.unpack_from(order + ("QQ" if wide else "II"), obj,
                                          at + (0x18 if wide else 0x10))
        if kind not in (_SHT_NULL, _SHT_NOBITS) and offset + size > len(obj):
            return (f"its section {k} ends at byte {offset + size}, past its end "
                    f"({len(obj)} bytes)")
    return None


_SHT_NULL, _SHT_NOBITS = 0, 8


# what one LoadedCode holds beyond its object code (its MCJIT engine, target machine and
# sections): 55 KiB measured (RSS over 300 loads of a 1 KB object, llvmlite 0.50)
ENGINE_BYTES = 56 << 10


class LoadedCode:
    """Object code in its own MCJIT engine (which owns and frees its target machine); a
    bundle (compiler/codegen/object_bundle.py: a program compiled in two halves at
    once) an engine per object, its symbols looked up in each in turn (the halves call
    nothing of each other; one engine given both objects ran code that crashed).
    Raises ValueError, before LLVM reads any of it, for code that is not whole."""

    def __init__(self, obj: bytes) -> None:
        objects = host_objects(obj)
        for o in objects:
            why = malformed(o)
            if why is not None:
                raise ValueError(f"object code refused: {why}")
        _initialized()
        self.engines = [_engine(o) for o in objects]

    def address(self, name: str) -> int:
        with llvm_lock():
            addr = next(filter(None, (e.get_function_address(name) for e in self.engines)), 0)
        if not addr:
            raise ValueError(f"compiled code has no function {name!r}")
        return addr

    def global_address(self, name: str) -> int:
        """The address of a global variable of the code (a table the device fills)."""
        with llvm_lock():
            addr = next(filter(None, (e.get_global_value_address(name)
                                      for e in self.engines)), 0)
        if not addr:
            raise ValueError(f"compiled code has no global {name!r}")
        return addr


def _engine(obj: bytes) -> Any:
    """An MCJIT engine with `obj` loaded and finalized."""
    # the host's triple, CPU and features, asked of LLVM once per process (the
    # features query was ~2 ms per load, and a first run loads several objects)
    triple, cpu, features = target_id(CPU)[:3]
    with llvm_lock():
        tm = llvm.Target.from_triple(triple).create_target_machine(
            cpu=cpu, features=features, reloc="pic", codemodel="jitdefault")
        empty = llvm.parse_assembly("")
        empty.triple = tm.triple
        engine = llvm.create_mcjit_compiler(empty, tm)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
    return engine
