"""examples/generate.py: greedy decoding with a fixed-size KV cache runs one compiled
program for any number of new tokens, and its tokens are the NumPy decoder's -- with the
token loop compiled (one la.fori_loop: an HLO while) and with a Python loop over the step
program."""
import importlib.util
import os

import pytest

import lazyarray as la
from lazyarray import runtime

_PATH = os.path.join(os.path.dirname(__file__), "..", "examples", "generate.py")


def _example():
    spec = importlib.util.spec_from_file_location("generate_example", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("loop", ["compiled", "python"])
def test_one_compile_for_any_number_of_new_tokens(capsys, loop):
    gen = _example()
    for n in (3, 11):
        runtime.clear_caches()
        with la.config.override(cache_dir="off"):
            result = gen.main(["--new-tokens", str(n), "--prompt", "5", "17", "2",
                               "--loop", loop])
        assert result["compiles"] == 1 and result["loop"] == loop
        assert len(result["tokens"]) == n and result["tokens"] == result["reference"]
    out = capsys.readouterr().out
    assert "ran 1 compiled program (one program for any number of new tokens)" in out
    assert "tokens match the NumPy decoder" in out


def test_the_compiled_token_loop_is_one_program_for_every_length():
    """Another number of new tokens and another prompt length reuse the program: the
    trip count and the prompt length are runtime values of the one HLO while."""
    gen = _example()
    weights = gen.make_weights()
    runtime.clear_caches()
    with la.config.override(cache_dir="off"):
        seen = 0
        for prompt, n in (([5, 17, 2], 4), ([5, 17, 2], 9), ([1, 2, 3, 4, 5, 6], 2)):
            tokens, compiles = gen.la_generate_compiled(weights, prompt, n)
            seen += compiles
            assert tokens == gen.np_generate(weights, prompt, n)
    assert seen == 1
