"""A concatenate along the loop's innermost dimension, before and after that loop is split
into one piece per operand (cpu_kernels.innermost_cuts): the kernels of the GPT step's
fused qkv projection backward, each run on one thread, measured in alternating processes.

    python bench/concat_pieces.py [--rounds 5] [--calls 50]

"before" is the same code with the split turned off (index_rules.MAX_PIECES = 0: every
concatenate keeps its clamp-and-select chain). Figures: medians over the rounds of each
process's median thread CPU time per call (`time.thread_time`), in ms.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

B, H, T, D_HEAD = 8, 4, 128, 64     # bench_models.py's GPT: width 256, 4 heads, sequence 128
C = H * D_HEAD


def _modules() -> dict:
    from lazyarray.compiler.hlo import dtypes as D
    from lazyarray.compiler.hlo.module import Instruction as I, Module
    f = D.float32

    def heads(transposed: bool) -> list:
        if not transposed:          # three (B*T, C) gradients, as a fused kernel reads them
            return [I("parameter", (), (B * T, C), f, {"number": k}) for k in range(3)], \
                (B * T, 3 * C)
        ins = [I("parameter", (), (B, H, T, D_HEAD), f, {"number": k}) for k in range(3)]
        for k in range(3):          # the head merge: (B, H, T, D) -> (B, T, H, D) -> (B*T, C)
            ins.append(I("transpose", (k,), (B, T, H, D_HEAD), f, {"permutation": (0, 2, 1, 3)}))
            ins.append(I("reshape", (len(ins) - 1,), (B * T, C), f, {}))
        return ins, (B * T, 3 * C)

    out = {}
    for name, transposed in (("qkv grad + bias sum", False), ("head merge + qkv grad + bias sum",
                                                               True)):
        ins, shape = heads(transposed)
        parts = tuple(range(len(ins) - 5, len(ins), 2)) if transposed else (0, 1, 2)
        ins.append(I("concatenate", parts, shape, f, {"dimension": 1}))
        cat = len(ins) - 1
        ins.append(I("reduce", (cat,), (shape[1],), f, {"axes": (0,), "kind": "sum"}))
        out[name] = Module("concat_bench", ins, [cat, len(ins) - 1])
    return out


def child(pieces: bool, calls: int) -> None:
    from lazyarray.compiler.codegen import index_rules
    from lazyarray.devices.cpu.cpu import CPUDevice
    if not pieces:
        index_rules.MAX_PIECES = 0
    dev = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1})
    rng = np.random.default_rng(0)
    result = {}
    for name, m in _modules().items():
        args = [rng.standard_normal(m.instructions[p].shape).astype(np.float32)
                for p in m.parameters]
        run = dev.compile(m).run
        run(args)
        times = []
        for _ in range(calls):
            t0 = time.thread_time()
            run(args)
            times.append(time.thread_time() - t0)
        result[name] = statistics.median(times) * 1e3
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--child", choices=("on", "off"))
    a = p.parse_args()
    if a.child:
        child(a.child == "on", a.calls)
        return
    runs: dict = {"off": [], "on": []}
    for r in range(a.rounds):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--calls",
                                  str(a.calls)], capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"| kernel (1 thread, thread CPU ms, median of {a.rounds} processes) | before | after |")
    print("|---|---|---|")
    for name in runs["on"][0]:
        before = statistics.median(x[name] for x in runs["off"])
        after = statistics.median(x[name] for x in runs["on"])
        print(f"| {name} | {before:.3f} | {after:.3f} ({before / after:.1f}x) |")


if __name__ == "__main__":
    main()
