"""What a PyTorch user reaches for: aliases, `x.size()`, module containers, state_dict
errors, MHA mask checks, buffer sharing with NumPy, pickling, la.save/load, DLPack."""
from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest

import lazyarray as la


# ---- aliases and the two conventions ------------------------------------------------------

def test_aliases_a_pytorch_user_types():
    assert la.long is la.int64 and la.float is la.float32 and la.double is la.float64
    assert la.zeros(3, 4).shape == (3, 4) and la.ones((2, 5)).shape == (2, 5)
    assert la.zeros(3, 4, dtype=la.long).dtype is la.int64
    np.testing.assert_array_equal(la.cat([la.ones(2), la.zeros(1)]).numpy(), [1, 1, 0])
    np.testing.assert_array_equal(la.cat([la.ones((1, 2)), la.zeros((1, 2))], dim=1).numpy(),
                                  [[1, 1, 0, 0]])
    la.manual_seed(3)
    a = la.randperm(10).numpy()
    la.manual_seed(3)
    assert sorted(a.tolist()) == list(range(10)) and (la.randperm(10).numpy() == a).all()
    assert la.randperm(5).dtype is la.int64
    w = la.zeros(3, requires_grad=True)
    assert w.requires_grad and la.full((2,), 1.0, requires_grad=True).requires_grad
    assert la.tensor([1.0], requires_grad=True).requires_grad
    assert la.zeros(2, device="interpreter").device.device.name == "interpreter"
    assert la.randn(2, 3).shape == (2, 3)


def test_dim_keepdim_wherever_axis_keepdims_are_taken():
    x = la.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    np.testing.assert_allclose(la.sum(x, dim=1, keepdim=True).numpy(), [[6], [22], [38]])
    np.testing.assert_allclose(la.softmax(x, dim=0).numpy().sum(0), np.ones(4), rtol=1e-6) \
        if hasattr(la, "softmax") else None
    np.testing.assert_allclose(la.nn.functional.softmax(x, dim=1).numpy().sum(1), np.ones(3),
                               rtol=1e-6)
    np.testing.assert_allclose(la.argmax(x, dim=1).numpy(), [3, 3, 3])
    np.testing.assert_allclose(la.cumsum(x, dim=1).numpy(), np.cumsum(x.numpy(), 1))
    with pytest.raises(TypeError, match="both axis= and dim="):
        x.sum(axis=0, dim=1)
    with pytest.raises(TypeError, match="both"):
        la.mean(x, axis=0, dim=1)


def test_axis_means_numpy_dim_and_positional_mean_pytorch():
    """Tensor methods the array API lacks are PyTorch's: a positional dim is PyTorch's
    (`_, pred = out.max(1)`); NumPy's keywords keep NumPy's meaning."""
    x = la.asarray(np.array([[1.0, 5.0], [3.0, 2.0]], np.float32))
    values, indices = x.max(1)                                          # PyTorch: a pair
    np.testing.assert_allclose(values.numpy(), [5, 3])
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    np.testing.assert_allclose(x.max(axis=1).numpy(), [5, 3])           # NumPy: values
    np.testing.assert_allclose(x.var(0).numpy(), [2.0, 4.5])            # PyTorch: n - 1
    np.testing.assert_allclose(x.var().numpy(), np.var(x.numpy(), ddof=1), rtol=1e-6)
    values, indices = x.max(dim=1)                                      # PyTorch: a pair
    np.testing.assert_allclose(values.numpy(), [5, 3])
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    np.testing.assert_allclose(x.var(axis=0).numpy(), [1.0, 2.25])      # n
    np.testing.assert_allclose(x.var(dim=0).numpy(), [2.0, 4.5])        # n - 1
    with pytest.raises(TypeError, match="one int dim"):
        x.max(dim=(0, 1))


def test_size_is_the_int_and_callable():
    x = la.zeros(2, 3)
    assert x.size == 6 and isinstance(x.size, int)
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-1) == 3
    assert x.numel() == 6 and x.dim() == 2
    with pytest.raises(IndexError, match="size\\(2\\)"):
        x.size(2)


# ---- containers and state dicts ---------------------------------------------------------------

class Net(la.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = la.nn.ModuleList([la.nn.Linear(3, 3) for _ in range(3)])
        self.heads = la.nn.ModuleDict({"cls": la.nn.Linear(3, 2)})
        self.extra = la.nn.ParameterList([la.ones(3)])
        self.plain = [la.nn.Linear(3, 3)]        # a Python list is not registered (PyTorch too)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) * self.extra[0]
        return self.heads["cls"](x)


def test_containers_register_what_they_hold():
    net = Net()
    names = list(net.state_dict())
    assert names == ["extra.0", "layers.0.weight", "layers.0.bias", "layers.1.weight",
                     "layers.1.bias", "layers.2.weight", "layers.2.bias", "heads.cls.weight",
                     "heads.cls.bias"] or set(names) == {
        "extra.0", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
        "layers.2.weight", "layers.2.bias", "heads.cls.weight", "heads.cls.bias"}
    assert len(net.parameters()) == 9
    assert net(la.ones((4, 3))).shape == (4, 2)
    assert len(net.layers) == 3 and isinstance(net.layers[-1], la.nn.Linear)
    assert len(net.layers[:2]) == 2 and "cls" in net.heads
    net.layers.append(la.nn.Linear(3, 3))
    assert len(net.parameters()) == 11
    with pytest.raises(TypeError, match="expected a Module"):
        net.layers.append(la.ones(3))


def test_load_state_dict_errors_name_the_module_and_key():
    net = Net()
    state = net.state_dict()
    extra = dict(state, **{"layers.9.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(KeyError, match="unexpected keys 'layers.9.weight'"):
        net.load_state_dict(extra)
    missing = {k: v for k, v in state.items() if k != "heads.cls.bias"}
    with pytest.raises(KeyError, match="Net.load_state_dict: missing keys 'heads.cls.bias'"):
        net.load_state_dict(missing)
    result = net.load_state_dict(missing, strict=False)
    assert result.missing_keys == ["heads.cls.bias"] and result.unexpected_keys == []
    bad = dict(state, **{"layers.1.weight": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="'layers.1.weight' \\(in Linear at 'layers.1'\\)"):
        net.load_state_dict(bad)


def test_multihead_attention_rejects_bad_masks():
    mha = la.nn.MultiheadAttention(8, 2, batch_first=True)
    x = la.ones((2, 5, 8))
    with pytest.raises(TypeError, match="attn_mask must be bool .* got int64"):
        mha(x, x, x, attn_mask=la.zeros((5, 5), dtype=la.int64))
    with pytest.raises(ValueError, match="attn_mask has shape \\(4, 4\\)"):
        mha(x, x, x, attn_mask=la.zeros((4, 4), dtype=la.bool))
    with pytest.raises(ValueError, match="key_padding_mask has shape \\(5, 2\\)"):
        mha(x, x, x, key_padding_mask=la.zeros((5, 2), dtype=la.bool))
    with pytest.raises(ValueError, match="query must be \\(N, L, E\\)"):
        mha(la.ones((2, 5, 4)))


def test_multihead_attention_bool_mask_true_means_masked_out():
    """PyTorch's convention (the opposite of scaled_dot_product_attention's)."""
    mha = la.nn.MultiheadAttention(4, 1)                 # (L, N, E): batch_first=False
    x = la.asarray(np.random.default_rng(0).standard_normal((3, 1, 4)).astype(np.float32))
    causal = np.triu(np.ones((3, 3), bool), 1)
    _, w = mha(x, x, x, attn_mask=la.asarray(causal))
    assert (w.numpy()[0][causal] == 0).all() and np.allclose(w.numpy().sum(-1), 1)


# ---- sharing, pickling, saving, DLPack --------------------------------------------------------

def test_asarray_shares_a_numpy_buffer_and_never_writes_it():
    a = np.arange(6, dtype=np.float32)
    t = la.asarray(a)
    y = t * 2                                   # recorded; reads `a` at the sync
    a[0] = 100.0                                # documented: seen by pending ops
    np.testing.assert_allclose(y.numpy()[:2], [200.0, 2.0])
    assert a.flags.writeable
    c = la.asarray(a, copy=True)
    a[1] = -1.0
    assert c.numpy()[1] == 1.0 and t.numpy()[1] == -1.0
    with pytest.raises(ValueError, match="copy=False"):
        la.asarray([1.0, 2.0], copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        la.asarray(np.arange(6.0)[::2], copy=False)
    assert la.asarray(np.arange(3.0)[::2]).numpy().tolist() == [0.0, 2.0]   # copied


def test_a_shared_buffer_is_never_donated(clean_metrics):
    a = np.ones(4, np.float32)
    p = la.asarray(a)
    opt = la.optim.SGD([p], lr=0.5)
    for _ in range(3):
        opt.apply_gradients([la.ones(4)])
        la.sync()
    np.testing.assert_allclose(a, 1.0)            # the user's memory is untouched
    np.testing.assert_allclose(p.numpy(), -0.5)


def test_np_array_of_a_tensor_is_a_writable_copy():
    t = la.asarray(np.arange(3, dtype=np.float32))
    arr = np.array(t)
    arr[0] = 9.0
    assert arr.flags.writeable and t.numpy()[0] == 0.0


def test_pickle_and_deepcopy_of_tensors_and_modules():
    t = la.asarray([1.0, 2.0]) * 3                  # pending: computed first
    assert pickle.loads(pickle.dumps(t)).tolist() == [3.0, 6.0]
    assert copy.deepcopy(t).tolist() == [3.0, 6.0]
    net = Net()
    twin = copy.deepcopy(net)
    x = la.ones((2, 3))
    np.testing.assert_allclose(twin(x).numpy(), net(x).numpy())
    assert twin.layers[0].weight is not net.layers[0].weight
    assert len(twin.parameters()) == len(net.parameters())
    again = pickle.loads(pickle.dumps(net))
    np.testing.assert_allclose(again(x).numpy(), net(x).numpy())
    twin.layers[0].weight = la.nn.Parameter(la.zeros((3, 3)))     # still registrable
    assert len(twin.parameters()) == len(net.parameters())


def test_save_and_load(tmp_path):
    net = Net()
    state = {"model": net.state_dict(), "step": 3, "w": la.ones(2, requires_grad=True)}
    la.save(state, tmp_path / "ckpt.pt")
    back = la.load(tmp_path / "ckpt.pt")
    assert back["step"] == 3 and back["w"].requires_grad
    assert list(back["model"]) == list(state["model"])
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        la.load(io.BytesIO(pickle.dumps(net)))
    buf = io.BytesIO()
    la.save(net, buf)
    buf.seek(0)
    assert isinstance(la.load(buf, weights_only=False), Net)


def test_dlpack_round_trip_with_bfloat16_and_versions():
    x = la.asarray(np.array([1.5, -2.0, 3.25], np.float32)).astype(la.bfloat16)
    back = la.from_dlpack(x)
    assert back.dtype is la.bfloat16 and back.numpy().astype(np.float32).tolist() == [1.5, -2.0, 3.25]
    capsule = x.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    y = la.asarray(np.arange(3, dtype=np.float32))
    assert np.from_dlpack(y).tolist() == [0.0, 1.0, 2.0]
    z = la.from_dlpack(y, copy=True)
    assert z.tolist() == [0.0, 1.0, 2.0]


def test_dlpack_bfloat16_with_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    t = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    ours = la.from_dlpack(t)
    assert ours.dtype is la.bfloat16
    assert ours.astype(la.float32).tolist() == [1.5, -2.0, 3.25]
    back = torch.from_dlpack(ours)
    assert back.dtype == torch.bfloat16 and back.float().tolist() == [1.5, -2.0, 3.25]
    shared = la.from_dlpack(torch.arange(4.0))
    assert shared.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_clip_grad_norm_in_place_and_nonfinite_error():
    w = la.asarray([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()                          # grad (6, 8): norm 10
    norm = la.nn.utils.clip_grad_norm_([w], 1.0)
    assert abs(norm.item() - 10.0) < 1e-5
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    w.grad = la.asarray([np.inf, 0.0])
    with pytest.raises(RuntimeError, match="total norm"):
        la.nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)


def test_a_deep_copied_model_trains_with_backward():
    net = la.nn.Linear(3, 2)
    twin = copy.deepcopy(net)
    assert twin.weight.requires_grad
    twin(la.ones((4, 3))).sum().backward()
    assert twin.weight.grad is not None and net.weight.grad is None


def test_pytorch_names_in_the_namespace():
    x = la.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_allclose(la.softmax(x, dim=1).numpy().sum(1), np.ones((2, 4)), rtol=1e-6)
    np.testing.assert_allclose(la.log_softmax(x, dim=-1).numpy(),
                               la.nn.functional.log_softmax(x, -1).numpy())
    assert la.unsqueeze(x, 0).shape == (1, 2, 3, 4) and la.permute(x, (2, 0, 1)).shape == (4, 2, 3)
    assert la.flatten(x, 1).shape == (2, 12) and x.flatten(0, 1).shape == (6, 4)
    np.testing.assert_allclose(la.clamp(x, 2, 5).numpy(), np.clip(x.numpy(), 2, 5))
    with la.inference_mode():
        assert not la.is_grad_enabled()
    assert la.is_grad_enabled()


def test_device_type_as_pytorch_spells_it():
    assert la.zeros(2).device.type == "cpu" or la.zeros(2).device.type == "interpreter"
    assert la.zeros(2, device="interpreter").device.type == "interpreter"
