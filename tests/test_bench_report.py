"""bench/report.py: the ratio column compares lazyarray with other projects only."""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), os.pardir, "bench", "report.py")
_SPEC = importlib.util.spec_from_file_location("bench_report", _PATH)
report = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(report)


def test_our_own_columns_are_not_peers():
    assert report.is_peer("jax.jit") and report.is_peer("torch.compile")
    assert not report.is_peer("lazyarray (run only)")
    assert not report.is_peer("python pool (before)")


def test_ratio_is_the_best_peer_over_lazyarray():
    table = {"step": {"lazyarray": (5.0, None), "lazyarray (run only)": (4.0, None),
                      "jax.jit": (6.0, None), "torch": (7.5, None)},
             "dispatch": {"lazyarray": (1.0, None), "python pool (before)": (14.0, None)}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in report.markdown(table).splitlines()}
    assert rows["step"].endswith("| 1.20x |")       # jax 6.0 / 5.0, not run-only 4.0 / 5.0
    assert rows["dispatch"].endswith("| — |")        # no peer ran: no ratio
    inter = report.markdown_interleaved({"w": {"lazyarray": 2.0, "jax.jit": 3.0}})
    assert "| 1.50x |" in inter


def test_the_ratio_says_its_direction_and_the_table_names_its_machine(tmp_path):
    table = {"w": {"lazyarray": (2.0, None), "numpy": (3.0, None)}}
    head = report.markdown(table).splitlines()[0]
    assert "best peer time / lazyarray time (>1: lazyarray faster)" in head
    run = tmp_path / "run.json"
    run.write_text('{"machine_info": {"machine": "x86_64", "system": "Linux", "release": "6",'
                   ' "python_version": "3.11.7", "cpu": {"brand_raw": "AMD EPYC", "count": 2}},'
                   ' "datetime": "2026-11-24T13:02:41", "benchmarks": []}')
    assert report.machine(str(run)).startswith("Machine: AMD EPYC, 2 cores (x86_64, Linux 6)")
