"""The differential fuzzer against NumPy (tests/fuzz_programs.py) in the suite: first the
programs it and the reliability probe found, then random programs, on every device.

Each batch runs in a fresh process, so a program that corrupts memory fails its test
(naming the program) instead of killing the run. Profiles (tests/hypothesis_profiles.py
names them): "ci" runs fixed seeds, 60 programs per device; "long" 10,000
(`HYPOTHESIS_PROFILE=long pytest tests/test_fuzz_numpy.py`); `bench/fuzz_numpy.py` runs
for as long as asked. Fixed findings become named cases in fuzz_programs.CASES.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

from fuzz_programs import CASES, run_child
from harness import device_names

CHUNKS = 4


def _programs() -> int:
    name = os.environ.get("HYPOTHESIS_PROFILE") or settings.get_current_profile_name()
    return 10_000 if name == "long" else 60


def _verdict(result: dict) -> None:
    if result["crashed"] is not None:
        what, program, how = result["crashed"]
        pytest.fail(f"the process died running {what} ({how}):\n{program}")
    if result["failed"]:
        what, text = result["failed"][0]
        pytest.fail(f"{len(result['failed'])} differ from NumPy; first, {what}:\n{text}")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("device_name", device_names())
def test_found_programs_agree_with_numpy(device_name, case):
    result = run_child(device_name, [case])
    _verdict(result)
    assert result["ok"] == 1


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("device_name", device_names())
def test_random_programs_agree_with_numpy(device_name, chunk):
    seeds = list(range(chunk, _programs(), CHUNKS))
    result = run_child(device_name, seeds)
    _verdict(result)
    assert result["ok"] == len(seeds)


def test_a_crash_fails_the_test_and_names_the_program():
    """The parent's reading of a child that died mid-program (as a SIGSEGV leaves it)."""
    from fuzz_programs import _parse
    out = "\x1eSTART 7\n\x1ePROGRAM\nprogram:\n  v0 = asarray(int8 [3])\n"
    result = _parse(out, "Fatal Python error: Segmentation fault", -11)
    assert result["crashed"][0] == "7"
    assert "v0 = asarray(int8 [3])" in result["crashed"][1]
    assert "exit status -11" in result["crashed"][2]
