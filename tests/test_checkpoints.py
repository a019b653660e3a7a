"""Checkpoints shared with PyTorch: `la.load` reads `torch.save`'s zip format without
torch (a committed fixture file everywhere; a fresh `torch.save` file where torch is
installed), under weights-only rules; a module's `state_dict` lists a tied tensor under
every name, as PyTorch, so a tied model's checkpoint loads strictly both ways."""
from __future__ import annotations

import collections
import io
import os
import pickle
import zipfile

import ml_dtypes
import numpy as np
import pytest

import lazyarray as la

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "torch_save_checkpoint.pt")


def _values() -> dict:
    """The fixture's content as NumPy arrays (its tensors are made from these)."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
        "f64": np.linspace(-1, 1, 5),
        "f16": np.array([0.5, -2.25, 65504.0], np.float16),
        "bf16": np.array([1.5, -3.0, 0.0078125], ml_dtypes.bfloat16),
        "i64": np.array([-(2 ** 40), 7], np.int64),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.array([0, 255], np.uint8),
        "bool": np.array([True, False, True]),
        "c64": np.array([1 + 2j, -0.5j], np.complex64),
        "base": base,
        "strided": base.T[1:4, ::2],          # a view of base's storage: offset and strides
        "scalar": np.array(2.5, np.float32),
    }


def _torch_objects(torch):
    """What the fixture file holds, built with torch from _values()."""
    v = {k: torch.from_numpy(np.array(a.view(np.int16) if k == "bf16" else a, order="C"))
         for k, a in _values().items() if k != "strided"}
    v["bf16"] = v["bf16"].view(torch.bfloat16)
    v["strided"] = v["base"].t()[1:4, ::2]
    linear = torch.nn.Linear(3, 2)
    with torch.no_grad():
        linear.weight.copy_(v["f32"])
        linear.bias.copy_(torch.tensor([0.25, -0.75]))
    return {
        "tensors": {k: t for k, t in v.items() if k != "base"},
        "view_and_base": [v["base"], v["strided"]],     # one storage, two tensors
        "nested": {"list": [v["i64"], 3, 2.5, "text", None, True], "tuple": (v["u8"],),
                   "dict": {"deeper": {"x": v["f64"]}}},
        "state_dict": linear.state_dict(),
        "parameter": torch.nn.Parameter(v["f32"].clone()),
        "epoch": 7, "lr": 1e-3, "shape": v["base"].shape, "dtype": torch.float16,
    }


def _check(loaded) -> None:
    want = _values()
    tensors = loaded["tensors"]
    assert set(tensors) == set(want) - {"base"}
    for name, t in tensors.items():
        assert isinstance(t, la.Tensor), name
        got = t.numpy()
        assert got.dtype == want[name].dtype and got.shape == want[name].shape, name
        np.testing.assert_array_equal(got, want[name], err_msg=name)
    base, view = loaded["view_and_base"]
    np.testing.assert_array_equal(base.numpy(), want["base"])
    np.testing.assert_array_equal(view.numpy(), want["strided"])
    nested = loaded["nested"]
    np.testing.assert_array_equal(nested["list"][0].numpy(), want["i64"])
    assert nested["list"][1:] == [3, 2.5, "text", None, True]
    np.testing.assert_array_equal(nested["tuple"][0].numpy(), want["u8"])
    np.testing.assert_array_equal(nested["dict"]["deeper"]["x"].numpy(), want["f64"])
    state = loaded["state_dict"]
    assert type(state) is collections.OrderedDict and list(state) == ["weight", "bias"]
    np.testing.assert_array_equal(state["weight"].numpy(), want["f32"])
    np.testing.assert_array_equal(state["bias"].numpy(), [0.25, -0.75])
    assert loaded["parameter"].requires_grad and not state["weight"].requires_grad
    assert loaded["epoch"] == 7 and loaded["lr"] == 1e-3
    assert tuple(loaded["shape"]) == (4, 6) and loaded["dtype"] is la.float16


def test_reads_the_committed_torch_save_file():
    """Written once by torch.save (torch 2.13, its default zip format); read without torch."""
    _check(la.load(FIXTURE))


def test_loaded_state_dict_loads_into_a_module():
    model = la.nn.Linear(3, 2)
    model.load_state_dict(la.load(FIXTURE)["state_dict"])
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(model(la.asarray(x)).numpy(),
                               x @ _values()["f32"].T + [0.25, -0.75], rtol=1e-6)


def test_reads_a_file_object_too():
    with open(FIXTURE, "rb") as f:
        _check(la.load(io.BytesIO(f.read())))


def test_a_fresh_torch_save_file_reads_back(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "fresh.pt"
    torch.save(_torch_objects(torch), path)
    _check(la.load(path))


def _rewritten(pickled: bytes) -> bytes:
    """The fixture archive with its data.pkl replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(FIXTURE) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, pickled if name.endswith("/data.pkl") else src.read(name))
    return out.getvalue()


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_a_file_naming_other_code_is_refused():
    with pytest.raises(pickle.UnpicklingError, match="weights-only"):
        la.load(io.BytesIO(_rewritten(pickle.dumps({"x": _Evil()}, protocol=2))))


def _with_view(offset: int, size: tuple, stride: tuple) -> bytes:
    """The fixture archive whose data.pkl is one torch tensor over storage '0' (6 floats)
    with the view given, the pickle written out opcode by opcode (protocol 0 text)."""
    def ints(xs):
        return "(" + "".join(f"I{x}\n" for x in xs) + "t"
    text = ("ctorch._utils\n_rebuild_tensor_v2\n("
            "(Vstorage\nctorch\nFloatStorage\nV0\nVcpu\nI6\ntQ"      # the storage's id
            f"I{offset}\n{ints(size)}{ints(stride)}I00\n"
            "ccollections\nOrderedDict\n)RtR.")
    return _rewritten(text.encode())


def test_a_view_past_its_storage_is_refused():
    """Storage '0' of the fixture holds 6 floats: a view reaching beyond is refused
    (never read out of bounds)."""
    ok = la.load(io.BytesIO(_with_view(1, (2, 2), (0, 2))))
    np.testing.assert_array_equal(ok.numpy(), [[0.25, 0.75], [0.25, 0.75]])
    for view in [(0, (10 ** 6,), (1,)), (0, (2, 2), (10 ** 6, 1)), (-1, (2,), (1,)),
                 (0, (2,), (-1,)), (6, (1,), (1,))]:
        with pytest.raises(pickle.UnpicklingError, match="storage|malformed"):
            la.load(io.BytesIO(_with_view(*view)))


def test_legacy_torch_format_is_named():
    legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19" + b"rest"
    with pytest.raises(pickle.UnpicklingError, match="legacy"):
        la.load(io.BytesIO(legacy))


def test_lazyarray_files_still_load(tmp_path):
    path = tmp_path / "own.la"
    la.save({"w": la.asarray([1.0, 2.0]), "n": 3}, path)
    back = la.load(path)
    np.testing.assert_array_equal(back["w"].numpy(), [1.0, 2.0])
    assert back["n"] == 3


# ---- tied weights ---------------------------------------------------------------------

class _TiedLM(la.nn.Module):
    def __init__(self, vocab=11, dim=4):
        super().__init__()
        self.wte = la.nn.Embedding(vocab, dim)
        self.ln = la.nn.LayerNorm(dim)
        self.lm_head = la.nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight        # tied, as GPT-2

    def forward(self, idx):
        return self.lm_head(self.ln(self.wte(idx)))


def test_state_dict_lists_a_tied_tensor_under_every_name():
    model = _TiedLM()
    state = model.state_dict()
    assert list(state) == ["wte.weight", "ln.weight", "ln.bias", "lm_head.weight"]
    assert state["wte.weight"] is state["lm_head.weight"]          # read once, shared
    assert [n for n, _ in model.named_parameters()] == ["wte.weight", "ln.weight", "ln.bias"]
    assert len(list(model.named_parameters(remove_duplicate=False))) == 4


def test_state_dict_listing_a_tied_tensor_once_still_loads():
    model, other = _TiedLM(), _TiedLM()
    state = model.state_dict()
    del state["lm_head.weight"]
    assert other.load_state_dict(state).missing_keys == []
    np.testing.assert_array_equal(other.lm_head.weight.numpy(), state["wte.weight"])


def _torch_tied(torch):
    class TiedLM(torch.nn.Module):
        def __init__(self, vocab=11, dim=4):
            super().__init__()
            self.wte = torch.nn.Embedding(vocab, dim)
            self.ln = torch.nn.LayerNorm(dim)
            self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            return self.lm_head(self.ln(self.wte(idx)))
    return TiedLM()


def test_pytorch_tied_checkpoint_loads_strictly_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs, ours = _torch_tied(torch), _TiedLM()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    path = tmp_path / "tied.pt"
    torch.save(theirs.state_dict(), path)
    ours.load_state_dict(la.load(path), strict=True)
    idx = np.array([[1, 2, 3], [4, 5, 10]])
    np.testing.assert_allclose(ours(la.asarray(idx)).numpy(),
                               theirs(torch.tensor(idx)).detach().numpy(), rtol=1e-5, atol=1e-6)
    back = _torch_tied(torch)
    back.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()},
                         strict=True)
    assert torch.equal(back.wte.weight, theirs.wte.weight)
