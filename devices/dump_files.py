"""What `LAZYARRAY_DUMP=dir` writes for a compiled program, on every device.

The runtime writes `<name>.hlo` (the module as traced, its runtime scalars in comment
lines) and `<name>.inputs.npz`; the device writes the texts of the later stages that its
Program carries (`Program.dumps`, filled when compiled with dumps=True), each to its own
file. A program loaded from the disk cache carries no texts: the device compiles it again
for them (only while dumping), so a cache hit writes the same files as a miss.
"""
from __future__ import annotations

import os

from ..compiler.program import Program

# stage (a key of Program.dumps) -> the file's suffix
SUFFIXES = {"optimized_hlo": ".optimized.hlo", "fusion": ".fusion.txt", "dot": ".dot",
            "llvm": ".ll", "asm": ".s", "ptx": ".ptx"}


def write_dump(directory: str, name: str, program: Program) -> list:
    """Write every stage text of `program` under `directory`; the paths written."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for stage, suffix in SUFFIXES.items():
        text = program.dumps.get(stage)
        if text is None:
            continue
        path = os.path.join(directory, name + suffix)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    # a loop's or branch's sub-programs (dump keys "sub.<name>.<stage>", compiler/driver.py)
    # as files `<name>.<sub name><suffix>`
    for key, text in program.dumps.items():
        where, _, stage = key[len("sub."):].rpartition(".")
        if key.startswith("sub.") and stage in SUFFIXES:
            path = os.path.join(directory, f"{name}.{where.replace('sub.', '')}{SUFFIXES[stage]}")
            with open(path, "w") as f:
                f.write(text)
            written.append(path)
    return written
