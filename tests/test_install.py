"""What a new user installs: the CPU test extra brings no GPU library (the NCCL and cuFFT
bindings' tests skip without them; `cuda-test` brings them), it brings SciPy so that the
LAPACK path is tested, every install command the README gives is `pip install -e ".[...]"`
from the clone (a bare `pip install lazyarray` fetches an unrelated package of that name),
and `.ci/run` runs the README's test command."""
from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
GPU_PACKAGE = re.compile(r"^(nvidia-|cuda-|nvmath|cupy)", re.I)


def _names(extra: str) -> list[str]:
    return [re.split(r"[<>=;\[ ]", req, maxsplit=1)[0].lower() for req in EXTRAS[extra]]


def test_the_cpu_test_extra_has_no_gpu_library_and_has_scipy():
    assert [n for n in _names("test") if GPU_PACKAGE.match(n)] == []
    assert "scipy" in _names("test")
    assert {"nvidia-nccl-cu12", "nvidia-cufft-cu12"} <= set(_names("cuda-test"))


def test_every_readme_install_command_installs_the_clone():
    text = "".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    commands = re.findall(r"pip install(?: -e)? +[^\s`]+", text)
    assert commands
    for command in commands:
        assert re.fullmatch(r'pip install -e "\.(\[[a-z,-]+\])?"', command), command
        for extra in re.findall(r"\[([a-z,-]+)\]", command):
            assert set(extra.split(",")) <= set(EXTRAS), command


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test]"' in ci and "python3 -m pytest" in ci
    assert 'python3 -m pip install -e ".[test]" && python3 -m pytest' in (ROOT / "README.md").read_text()
