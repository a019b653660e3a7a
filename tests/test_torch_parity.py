"""The same small programs in lazyarray and in PyTorch give the same numbers: nn modules,
losses, optimizers, schedulers, clipping, reductions with dim/keepdim. Skipped (with the
reason) where torch is not installed; `pip install torch` to run them."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the parity suite "
                                            "compares against it (pip install torch)")
tnn = torch.nn

RTOL, ATOL = 1e-5, 1e-5


def close(ours, theirs, rtol=RTOL, atol=ATOL):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    np.testing.assert_allclose(np.asarray(ours.numpy() if hasattr(ours, "numpy") else ours),
                               theirs, rtol=rtol, atol=atol)


def twin(torch_module, ours):
    """`ours` loaded with `torch_module`'s weights, through PyTorch's state_dict names."""
    state = {k: v.detach().numpy() for k, v in torch_module.state_dict().items()}
    assert list(ours.state_dict()) == list(state), "state_dict keys differ from PyTorch's"
    ours.load_state_dict(state)
    return ours


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- modules -------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal_bool", "float", "padding", "per_head"])
def test_multihead_attention(batch_first, mask):
    torch.manual_seed(0)
    theirs = tnn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    ours = twin(theirs, la.nn.MultiheadAttention(8, 2, batch_first=batch_first)).eval()
    n, length = 3, 5
    x = rand(n, length, 8) if batch_first else rand(length, n, 8)
    kw_t, kw_l = {}, {}
    if mask == "causal_bool":
        m = np.triu(np.ones((length, length), bool), 1)        # True = masked out
        kw_t["attn_mask"], kw_l["attn_mask"] = torch.from_numpy(m), la.asarray(m)
    elif mask == "float":
        m = rand(length, length, seed=1)
        kw_t["attn_mask"], kw_l["attn_mask"] = torch.from_numpy(m), la.asarray(m)
    elif mask == "padding":
        m = np.zeros((n, length), bool)
        m[0, -2:] = True
        kw_t["key_padding_mask"], kw_l["key_padding_mask"] = torch.from_numpy(m), la.asarray(m)
    elif mask == "per_head":
        m = np.random.default_rng(2).random((n * 2, length, length)) < 0.3
        m[..., 0] = False                                        # no row fully masked
        kw_t["attn_mask"], kw_l["attn_mask"] = torch.from_numpy(m), la.asarray(m)
    xt = torch.from_numpy(x)
    out_t, w_t = theirs(xt, xt, xt, **kw_t)
    out_l, w_l = ours(la.asarray(x), la.asarray(x), la.asarray(x), **kw_l)
    close(out_l, out_t)
    close(w_l, w_t)
    _, w_t = theirs(xt, xt, xt, average_attn_weights=False, **kw_t)
    _, w_l = ours(la.asarray(x), la.asarray(x), la.asarray(x), average_attn_weights=False,
                  **kw_l)
    close(w_l, w_t)


def test_multihead_attention_backward_matches():
    torch.manual_seed(1)
    theirs = tnn.MultiheadAttention(8, 2, batch_first=True)
    ours = twin(theirs, la.nn.MultiheadAttention(8, 2, batch_first=True))
    x = rand(2, 4, 8)
    m = np.triu(np.ones((4, 4), bool), 1)
    theirs(*(torch.from_numpy(x),) * 3, attn_mask=torch.from_numpy(m))[0].square().sum().backward()
    ours(*(la.asarray(x),) * 3, attn_mask=la.asarray(m))[0].square().sum().backward()
    close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad, 1e-4, 1e-4)
    close(ours.out_proj.bias.grad, theirs.out_proj.bias.grad, 1e-4, 1e-4)


@pytest.mark.parametrize("make", [
    lambda m: m.Linear(6, 4),
    lambda m: m.Conv1d(3, 4, 3, stride=2, padding=1),
    lambda m: m.Conv2d(3, 4, 3, padding=1),
    lambda m: m.LayerNorm(6),
    lambda m: m.Embedding(10, 5),
], ids=["Linear", "Conv1d", "Conv2d", "LayerNorm", "Embedding"])
def test_layers_forward_and_backward(make):
    torch.manual_seed(2)
    theirs = make(tnn)
    ours = twin(theirs, make(la.nn))
    name = type(theirs).__name__
    if name == "Embedding":
        x = np.array([[1, 2, 9], [0, 0, 3]])
    else:
        shape = {"Linear": (5, 6), "Conv1d": (2, 3, 9), "Conv2d": (2, 3, 6, 6),
                 "LayerNorm": (5, 6)}[name]
        x = rand(*shape)
    out_t = theirs(torch.from_numpy(x))
    out_l = ours(la.asarray(x))
    close(out_l, out_t, 1e-4, 1e-5)
    out_t.square().sum().backward()
    out_l.square().sum().backward()
    close(ours.weight.grad, theirs.weight.grad, 1e-4, 1e-4)


@pytest.mark.parametrize("dims", [1, 2])
def test_batch_norm_train_then_eval(dims):
    torch.manual_seed(3)
    cls_t, cls_l = (tnn.BatchNorm1d, la.nn.BatchNorm1d) if dims == 1 else \
        (tnn.BatchNorm2d, la.nn.BatchNorm2d)
    theirs, ours = cls_t(4), cls_l(4)
    twin(theirs, ours)
    for seed in range(3):
        x = rand(*((8, 4) if dims == 1 else (2, 4, 3, 3)), seed=seed)
        close(ours(la.asarray(x)), theirs(torch.from_numpy(x)), 1e-4, 1e-5)
    close(ours.running_mean, theirs.running_mean)
    close(ours.running_var, theirs.running_var, 1e-4, 1e-5)
    assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked)
    theirs.eval(), ours.eval()
    x = rand(*((8, 4) if dims == 1 else (2, 4, 3, 3)), seed=9)
    close(ours(la.asarray(x)), theirs(torch.from_numpy(x)), 1e-4, 1e-5)


def test_dropout_in_eval_is_the_identity():
    x = rand(4, 5)
    assert (la.nn.Dropout(0.5).eval()(la.asarray(x)).numpy() ==
            tnn.Dropout(0.5).eval()(torch.from_numpy(x)).numpy()).all()


# ---- losses ---------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", ["ce", "ce_3d", "ce_ignore", "ce_smooth", "ce_probs", "nll",
                                  "mse", "l1", "bce"])
def test_losses(case, reduction):
    rng = np.random.default_rng(4)
    x = rand(6, 5)
    y = rng.integers(0, 5, 6)
    if case == "ce_3d":
        x, y = rand(2, 5, 3), rng.integers(0, 5, (2, 3))
    if case == "ce_ignore":
        y[[1, 4]] = -100
    if case in ("mse", "l1", "bce"):
        y = rng.random((6, 5)).astype(np.float32)
    if case == "ce_probs":
        y = rng.random((6, 5)).astype(np.float32)
        y /= y.sum(1, keepdims=True)
    if case == "nll":
        x = np.log(np.exp(x) / np.exp(x).sum(1, keepdims=True)).astype(np.float32)
    kind = {"ce": "CrossEntropyLoss", "ce_3d": "CrossEntropyLoss", "ce_ignore":
            "CrossEntropyLoss", "ce_smooth": "CrossEntropyLoss", "ce_probs": "CrossEntropyLoss",
            "nll": "NLLLoss", "mse": "MSELoss", "l1": "L1Loss", "bce": "BCEWithLogitsLoss"}[case]
    kw = {"reduction": reduction}
    if case == "ce_smooth":
        kw["label_smoothing"] = 0.1
    want = getattr(tnn, kind)(**kw)(torch.from_numpy(x), torch.from_numpy(y))
    got = getattr(la.nn, kind)(**kw)(la.asarray(x), la.asarray(y))
    close(got, want, 1e-5, 1e-6)


def test_functional_softmax_with_dim():
    x = rand(3, 4)
    close(F.softmax(la.asarray(x), dim=1), torch.softmax(torch.from_numpy(x), dim=1))
    close(F.log_softmax(la.asarray(x), dim=0), torch.log_softmax(torch.from_numpy(x), dim=0))


# ---- optimizers, schedulers, clipping ----------------------------------------------------------

def _train_both(make_opt_t, make_opt_l, steps=4, clip=None):
    torch.manual_seed(5)
    theirs = tnn.Sequential(tnn.Linear(6, 8), tnn.Tanh(), tnn.Linear(8, 3))
    ours = twin(theirs, la.nn.Sequential(la.nn.Linear(6, 8), la.nn.Tanh(), la.nn.Linear(8, 3)))
    opt_t, opt_l = make_opt_t(theirs), make_opt_l(ours)
    x, y = rand(10, 6), np.random.default_rng(6).integers(0, 3, 10)
    norms = []
    for _ in range(steps):
        opt_t.zero_grad()
        opt_l.zero_grad()
        tnn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        F.cross_entropy(ours(la.asarray(x)), la.asarray(y)).backward()
        if clip:
            norms.append((torch.nn.utils.clip_grad_norm_(theirs.parameters(), clip),
                          la.nn.utils.clip_grad_norm_(ours.parameters(), clip)))
        opt_t.step()
        opt_l.step()
    for (name, t), (name_l, l) in zip(theirs.state_dict().items(), ours.state_dict().items()):
        assert name == name_l
        np.testing.assert_allclose(l, t.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    return norms


@pytest.mark.parametrize("name, kw", [
    ("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5}),
    ("Adam", {"lr": 0.01}), ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01}), ("AdamW", {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}),
])
def test_optimizers(name, kw):
    _train_both(lambda m: getattr(torch.optim, name)(m.parameters(), **kw),
                lambda m: getattr(la.optim, name)(m.parameters(), **kw))


def test_param_groups():
    def groups(m):
        return [{"params": m[0].parameters(), "lr": 0.2},
                {"params": m[2].parameters(), "momentum": 0.5}]
    _train_both(lambda m: torch.optim.SGD(groups(m), lr=0.05, momentum=0.9),
                lambda m: la.optim.SGD(groups(m), lr=0.05, momentum=0.9))


def test_clip_grad_norm():
    norms = _train_both(lambda m: torch.optim.SGD(m.parameters(), lr=0.5),
                        lambda m: la.optim.SGD(m.parameters(), lr=0.5), clip=0.1)
    for t, l in norms:
        close(l, t, 1e-5, 1e-6)


@pytest.mark.parametrize("name, kw", [
    ("StepLR", {"step_size": 3, "gamma": 0.5}), ("MultiStepLR", {"milestones": [2, 5]}),
    ("ExponentialLR", {"gamma": 0.9}), ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.01}),
    ("LinearLR", {"start_factor": 0.25, "total_iters": 4}),
    ("LambdaLR", {"lr_lambda": lambda e: 1 / (1 + e)}),
])
def test_schedulers(name, kw):
    p_t = torch.zeros(2, requires_grad=True)
    p_l = la.zeros(2, requires_grad=True)
    opt_t = torch.optim.SGD([p_t], lr=0.1)
    opt_l = la.optim.SGD([p_l], lr=0.1)
    sched_t = getattr(torch.optim.lr_scheduler, name)(opt_t, **kw)
    sched_l = getattr(la.optim.lr_scheduler, name)(opt_l, **kw)
    for _ in range(10):
        np.testing.assert_allclose(sched_l.get_last_lr(), sched_t.get_last_lr(), rtol=1e-12)
        np.testing.assert_allclose(opt_l.param_groups[0]["lr"], opt_t.param_groups[0]["lr"],
                                   rtol=1e-12)
        opt_t.step()
        opt_l.step()
        sched_t.step()
        sched_l.step()


# ---- reductions: dim/keepdim mean PyTorch's semantics -------------------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "prod", "var", "std", "amax", "argmax",
                                  "argmin", "all", "any"])
@pytest.mark.parametrize("dim, keepdim", [(1, False), (0, True), (-1, True)])
def test_reductions_with_dim(name, dim, keepdim):
    x = rand(3, 4, 5)
    xt, xl = torch.from_numpy(x), la.asarray(x)
    if name in ("all", "any"):
        xt, xl = xt > 0, xl > 0
    if name == "amax":
        close(xl.max(dim=dim, keepdim=keepdim).values, xt.amax(dim=dim, keepdim=keepdim))
        return
    close(getattr(xl, name)(dim=dim, keepdim=keepdim),
          getattr(xt, name)(dim=dim, keepdim=keepdim), 1e-5, 1e-6)
    if name in ("sum", "mean", "var", "std"):
        close(getattr(la, name)(xl, dim=dim, keepdim=keepdim),
              getattr(torch, name)(xt, dim=dim, keepdim=keepdim), 1e-5, 1e-6)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_give_values_and_indices(name):
    x = rand(4, 6)
    want = getattr(torch.from_numpy(x), name)(dim=1)
    got = getattr(la.asarray(x), name)(dim=1)
    close(got.values, want.values)
    assert (got.indices.numpy() == want.indices.numpy()).all()
    v, i = getattr(la, name)(la.asarray(x), dim=0, keepdim=True)
    wv, wi = getattr(torch, name)(torch.from_numpy(x), dim=0, keepdim=True)
    close(v, wv)
    assert (i.numpy() == wi.numpy()).all()


def test_var_std_unbiased_and_correction():
    x = rand(5, 3)
    xt, xl = torch.from_numpy(x), la.asarray(x)
    close(xl.var(dim=0, unbiased=False), xt.var(dim=0, unbiased=False))
    close(xl.std(dim=1, correction=0), xt.std(dim=1, correction=0))
    close(xl.var(dim=None), xt.var())                 # dim given: PyTorch's (unbiased)
    close(xl.var(), xt.var())                         # the method is PyTorch's
    np.testing.assert_allclose(xl.var(axis=None).numpy(), x.var(), rtol=1e-6)    # NumPy's


def test_sort_with_dim():
    x = rand(3, 5)
    want = torch.from_numpy(x).sort(dim=1, descending=True)
    got = la.asarray(x).sort(dim=1, descending=True)
    close(got.values, want.values)
    assert (got.indices.numpy() == want.indices.numpy()).all()


# ---- checkpoints --------------------------------------------------------------------------------

class _TorchNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = tnn.ModuleList([tnn.Linear(4, 4), tnn.Linear(4, 4)])
        self.heads = tnn.ModuleDict({"a": tnn.Linear(4, 2), "b": tnn.Linear(4, 3)})
        self.scales = tnn.ParameterList([tnn.Parameter(torch.ones(4)), tnn.Parameter(torch.ones(4))])
        self.norm = tnn.BatchNorm1d(4)
        self.attn = tnn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x):
        for blk, s in zip(self.blocks, self.scales):
            x = torch.relu(blk(x)) * s
        x = self.norm(x)
        y = self.attn(x[:, None], x[:, None], x[:, None])[0][:, 0]
        return self.heads["a"](y), self.heads["b"](y)


class _OurNet(la.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = la.nn.ModuleList([la.nn.Linear(4, 4), la.nn.Linear(4, 4)])
        self.heads = la.nn.ModuleDict({"a": la.nn.Linear(4, 2), "b": la.nn.Linear(4, 3)})
        self.scales = la.nn.ParameterList([la.ones(4), la.ones(4)])
        self.norm = la.nn.BatchNorm1d(4)
        self.attn = la.nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x):
        for blk, s in zip(self.blocks, self.scales):
            x = blk(x).relu() * s
        x = self.norm(x)
        y = self.attn(x[:, None], x[:, None], x[:, None])[0][:, 0]
        return self.heads["a"](y), self.heads["b"](y)


def test_state_dict_names_and_a_pytorch_safetensors_checkpoint(tmp_path):
    st = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    torch.manual_seed(7)
    theirs = _TorchNet()
    with torch.no_grad():
        for p in theirs.scales:
            p.uniform_(0.5, 1.5)
    theirs(torch.randn(6, 4))                     # move the running statistics
    theirs.eval()
    path = tmp_path / "net.safetensors"
    st.save_file(theirs.state_dict(), str(path))
    ours = _OurNet()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert len(ours.parameters()) == len(list(theirs.parameters()))
    la.nn.load(str(path), into=ours)
    ours.eval()
    x = rand(6, 4)
    for a, b in zip(ours(la.asarray(x)), theirs(torch.from_numpy(x))):
        close(a, b, 1e-5, 1e-5)
