"""The differential fuzzer against NumPy, for as long as asked (not part of the suite).

    python bench/fuzz_numpy.py --minutes 30 --devices cpu,interpreter --start 100000

Runs random programs of tests/fuzz_programs.py (lazyarray and NumPy side by side, several
values synced together) in batches, each batch in a fresh process so that a crash is
reported with the program that caused it and the run goes on from the next seed. Prints
each finding as it comes and, at the end, how many programs ran clean on each device.
Exit status 1 when anything differed or crashed. The seeds of tests/test_fuzz_numpy.py are
0.. (the suite); start elsewhere to look at new programs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from fuzz_programs import run_child  # noqa: E402


def fuzz(devices: list, start: int, minutes: float, batch: int) -> int:
    end = time.monotonic() + 60 * minutes
    clean = {d: 0 for d in devices}
    findings = []
    seed = start
    while time.monotonic() < end:
        for device in devices:
            seeds = list(range(seed, seed + batch))
            while seeds:
                result = run_child(device, seeds)
                clean[device] += result["ok"]
                for what, text in result["failed"]:
                    findings.append((device, what))
                    print(f"== differs on {device}, seed {what}:\n{text}\n", flush=True)
                crashed = result["crashed"]
                if crashed is None:
                    break
                what, program, how = crashed
                findings.append((device, what))
                print(f"== crashed on {device}, seed {what} ({how}):\n{program}\n", flush=True)
                done = seeds.index(int(what)) + 1 if what is not None else len(seeds)
                seeds = seeds[done:]
        seed += batch
    ran = seed - start
    for device in devices:
        print(f"{device}: {clean[device]} of {ran} programs clean (seeds {start}..{seed - 1})")
    print(f"findings: {len(findings)} {findings[:20]}")
    return 1 if findings else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--devices", default="cpu,interpreter")
    ap.add_argument("--start", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=200, help="programs per fresh process")
    args = ap.parse_args()
    return fuzz(args.devices.split(","), args.start, args.minutes, args.batch)


if __name__ == "__main__":
    sys.exit(main())
