"""Several object files in one `Program.code`: a CPU program whose halves were compiled
on two threads at once (compiler/driver.py) has an object per half. The CPU device loads
every object of the bundle into one engine, whose linker resolves symbols across them
(devices/cpu/object_code.py). A single object is stored as it is, not as a bundle.

    MAGIC, count (u32), count lengths (u64), the objects one after another
"""
from __future__ import annotations

import struct

MAGIC = b"LAOBJS01"


def pack(objects: list) -> bytes:
    """The bundle of `objects` (the object itself where there is one)."""
    if len(objects) == 1:
        return objects[0]
    head = MAGIC + struct.pack("<I", len(objects)) + b"".join(
        struct.pack("<Q", len(o)) for o in objects)
    return head + b"".join(objects)


def unpack(code: bytes) -> list:
    """The objects in `code`: itself where it is not a bundle. Raises ValueError for a
    bundle cut short (a damaged cache entry), before any object is read."""
    if not code.startswith(MAGIC):
        return [code]
    at = len(MAGIC)
    if len(code) < at + 4:
        raise ValueError("object bundle cut short in its header")
    count, = struct.unpack_from("<I", code, at)
    at += 4
    if len(code) < at + 8 * count:
        raise ValueError("object bundle cut short in its lengths")
    lengths = struct.unpack_from(f"<{count}Q", code, at)
    at += 8 * count
    if at + sum(lengths) != len(code):
        raise ValueError(f"object bundle of {len(code)} bytes, its objects say "
                         f"{at + sum(lengths)}")
    objects = []
    for n in lengths:
        objects.append(code[at:at + n])
        at += n
    return objects
