"""examples/generate.py: greedy decoding with a fixed-size KV cache runs one compiled
program for any number of new tokens, and its tokens are the NumPy decoder's."""
import importlib.util
import os

import lazyarray as la
from lazyarray import runtime

_PATH = os.path.join(os.path.dirname(__file__), "..", "examples", "generate.py")


def _example():
    spec = importlib.util.spec_from_file_location("generate_example", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_compile_for_any_number_of_new_tokens(capsys):
    gen = _example()
    for n in (3, 11):
        runtime.clear_caches()
        with la.config.override(cache_dir="off"):
            result = gen.main(["--new-tokens", str(n), "--prompt", "5", "17", "2"])
        assert result["compiles"] == 1
        assert len(result["tokens"]) == n and result["tokens"] == result["reference"]
    out = capsys.readouterr().out
    assert "ran 1 compiled program (one program for any number of new tokens)" in out
    assert "tokens match the NumPy decoder" in out
