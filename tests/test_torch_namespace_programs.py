"""Ten ordinary PyTorch programs, each written once as PyTorch code (a function of the
`torch` module), run with `torch` and with `lazyarray.torch`, and compared value by value:
losses step by step, predictions, gradients, checkpoints. Small sizes, a few steps.

Weights come from the PyTorch run: right after building its model, a program calls
`share(model)`; the PyTorch run records the state_dict, the lazyarray run loads it
(random initializers draw different numbers in the two libraries). Data is NumPy, made the
same in both runs. Skipped with the reason where torch is not installed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazyarray.torch as lazy_torch

real_torch = pytest.importorskip("torch", reason="PyTorch is not installed: these programs "
                                                 "are compared with it (pip install torch)")


class Sharer:
    """Copies the PyTorch run's weights into the lazyarray run's models, in order."""

    def __init__(self) -> None:
        self.states: list = []
        self.replay = False

    def __call__(self, model):
        if not self.replay:
            self.states.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        else:
            state = self.states.pop(0)
            ours = model.state_dict()
            assert list(ours) == list(state), f"state_dict names differ: {list(ours)} vs {list(state)}"
            model.load_state_dict(state)
        return model


def values(x):
    """Tensors (either library), tuples, numbers -> NumPy / Python values."""
    if isinstance(x, (list, tuple)):
        return [values(e) for e in x]
    if isinstance(x, dict):
        return {k: values(v) for k, v in x.items()}
    if hasattr(x, "detach"):
        return np.asarray(x.detach().numpy())
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return x


def compare(ours, theirs, rtol, where="result"):
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, rtol, f"{where}[{i}]")
    elif isinstance(theirs, dict):
        assert sorted(ours) == sorted(theirs), where
        for k in theirs:
            compare(ours[k], theirs[k], rtol, f"{where}[{k!r}]")
    elif isinstance(theirs, np.ndarray):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, \
            f"{where}: {ours.dtype}{ours.shape} vs {theirs.dtype}{theirs.shape}"
        if theirs.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=rtol, err_msg=where)
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, float):
        assert math.isclose(ours, theirs, rel_tol=rtol, abs_tol=rtol), f"{where}: {ours} vs {theirs}"
    else:
        assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"


def run_both(program, rtol=2e-4, **kw):
    share = Sharer()
    theirs = values(program(real_torch, share, **kw))
    share.replay = True
    ours = values(program(lazy_torch, share, **kw))
    compare(ours, theirs, rtol)
    return ours


def data(seed, *shape, classes=None):
    rng = np.random.default_rng(seed)
    if classes:
        return rng.integers(0, classes, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


# ---- 1. an MLP classifier -------------------------------------------------------------------

def mlp(torch, share):
    nn = torch.nn
    X, y = torch.tensor(data(0, 64, 10)), torch.tensor(data(1, 64, classes=3))
    model = share(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    out = []
    for epoch in range(5):
        opt.zero_grad()
        logits = model(X)
        loss = criterion(logits, y)
        loss.backward()
        opt.step()
        _, predicted = torch.max(logits, 1)
        correct = (predicted == y).sum().item()
        out.append((loss.item(), correct))
    with torch.no_grad():
        probs = torch.softmax(model(X), dim=1)
    return out, probs, model[0].weight.grad.norm().item()


def test_mlp():
    run_both(mlp)


# ---- 2. a CNN with BatchNorm ------------------------------------------------------------------

def cnn(torch, share):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            # no bias before a BatchNorm (it cancels; its gradient is rounding noise, which
            # Adam would amplify into steps that differ between any two libraries)
            self.conv1 = nn.Conv2d(1, 4, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 8, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(8)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            x = self.pool(F.relu(self.bn1(self.conv1(x))))
            x = self.pool(F.relu(self.bn2(self.conv2(x))))
            x = F.adaptive_avg_pool2d(x, 1)
            x = torch.flatten(x, 1)
            return self.fc(x)

    X = torch.tensor(data(2, 16, 1, 8, 8))
    y = torch.tensor(data(3, 16, classes=5))
    model = share(Net())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for _ in range(4):
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(X)
    return losses, logits, model.bn1.running_mean, model.bn2.running_var


def test_cnn_with_batchnorm():
    run_both(cnn, rtol=1e-3)


# ---- 3. a tiny GPT with causal attention --------------------------------------------------------

def gpt(torch, share, steps=4):
    nn, F = torch.nn, torch.nn.functional
    V, T, C, H = 11, 8, 16, 2

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)

        def forward(self, x):
            B, T_, _ = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            k = k.view(B, T_, H, C // H).transpose(1, 2)
            q = q.view(B, T_, H, C // H).transpose(1, 2)
            v = v.view(B, T_, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                               is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T_, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * C, C))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(2)])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, V, bias=False)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            B, T_ = idx.size()
            pos = torch.arange(0, T_, dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

        @torch.no_grad()
        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                logits, _ = self(idx[:, -T:])
                logits = logits[:, -1, :]
                v, _ = torch.topk(logits, 3)
                logits[logits < v[:, [-1]]] = -float("inf")
                idx_next = torch.argmax(F.softmax(logits, dim=-1), dim=-1, keepdim=True)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    tokens = data(4, 4, T + 1, classes=V)
    x, y = torch.tensor(tokens[:, :-1]), torch.tensor(tokens[:, 1:])
    model = share(GPT())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    losses = []
    for _ in range(steps):
        logits, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append((loss.item(), norm.item()))
    model.eval()
    return losses, model.generate(x[:2, :3], 4)


def test_tiny_gpt_with_causal_attention():
    run_both(gpt, rtol=1e-3)


# ---- 4. checkpoint and resume ------------------------------------------------------------------

def checkpoint(torch, share, path):
    nn = torch.nn
    X, y = torch.tensor(data(5, 32, 6)), torch.tensor(data(6, 32, 2))

    def make():
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))

    model = share(make())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []

    def step(model, opt):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(X), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        losses.append(step(model, opt))
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3},
               str(path))
    ckpt = torch.load(str(path))
    model2 = make()
    model2.load_state_dict(ckpt["model"])
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
    opt2.load_state_dict(ckpt["optimizer"])
    for _ in range(3):
        losses.append(step(model2, opt2))
        step(model, opt)
    same = all(torch.allclose(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    return losses, ckpt["epoch"], same


def test_checkpoint_and_resume(tmp_path):
    share = Sharer()
    theirs = values(checkpoint(real_torch, share, tmp_path / "torch.pt"))
    share.replay = True
    ours = values(checkpoint(lazy_torch, share, tmp_path / "lazy.pt"))
    compare(ours, theirs, 2e-4)
    assert ours[2] is True


# ---- 5. tensor operations -----------------------------------------------------------------------

def tensor_ops(torch, share):
    a = torch.tensor(data(7, 4, 5))
    perm = torch.tensor([3, 0, 2, 1])
    m = torch.ones(4, 4)
    out = {
        "sort": torch.sort(perm).values, "argsort": torch.sort(perm).indices,
        "triu": torch.triu(m, diagonal=1), "tril": torch.tril(m, -1),
        "equal": torch.equal(a, a.clone()), "allclose": torch.allclose(a, a + 1e-9),
        "bmm": torch.bmm(a.view(2, 2, 5), a.view(2, 5, 2)),
        "split": torch.split(a, 2, dim=1), "chunk": a.chunk(2, dim=0),
        "max": a.max(dim=1), "min": torch.min(a, 0),
        "topk": torch.topk(a, 2, dim=1), "cumsum": a.cumsum(1), "t": a.t(),
        "where": torch.where(a > 0, a, torch.zeros_like(a)),
        "gather": torch.gather(a, 1, torch.tensor([[0], [1], [2], [3]])),
        "cat": torch.cat([a, a], dim=0).shape[0], "stack": torch.stack([a, a], 1).shape,
        "unsqueeze": a.unsqueeze(0).size(), "permute": a.view(2, 2, 5).permute(2, 0, 1),
        "norm": a.norm().item(), "mean": a.mean(dim=1, keepdim=True), "var": a.var(),
        "item": a[0, 0].item(), "numel": a.numel(), "dim": a.dim(),
        "argmax": a.argmax(dim=1), "masked": a.masked_fill(a < 0, 0.0),
        "unbind": torch.unbind(a, 1)[2], "flatten": a.flatten(), "clamp": a.clamp(-0.5, 0.5),
        "arange": torch.arange(10).reshape(2, 5), "linspace": torch.linspace(0, 1, 5),
        "eye": torch.eye(3), "full": torch.full((2, 2), 3.0), "abs": a.abs().sum().item(),
        "median": a.median(), "mode": torch.tensor([1, 2, 2, 3, 3]).mode().values.item(),
        "long": a.long(), "float": torch.arange(3).float(), "dtype": str(a.dtype).split(".")[-1],
        "to": a.to(torch.float64).dtype == torch.float64, "einsum": torch.einsum("ij->j", a),
        "repeat": a[:1].repeat(2, 1), "expand": a[:1].expand(3, -1), "real": a.real,
        "unique": torch.unique(torch.tensor([3, 1, 3, 2])), "numpy": a.numpy(),
        "tolist": a[:1].tolist()[0][0], "contiguous": a.t().contiguous().is_contiguous(),
    }
    return out


def test_tensor_operations():
    run_both(tensor_ops)


# ---- 6. autograd basics -------------------------------------------------------------------------

def autograd_basics(torch, share):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = torch.tensor(data(8, 3, 3), requires_grad=True)
    y = (w @ x).pow(2).sum()
    facts = [x.is_leaf, y.is_leaf, y.requires_grad, x.requires_grad]
    y.backward()
    grads = [x.grad.clone(), w.grad.clone(), w.grad.norm().item()]
    with torch.no_grad():
        w -= 0.01 * w.grad
        z = w * 2
    facts.append(z.requires_grad)
    w.grad.zero_()
    x.grad = None
    y2 = torch.sigmoid(w @ x).sum()
    (gx,) = torch.autograd.grad(y2, x)
    y3 = (x.detach() * w).sum()
    y3.backward()
    grads += [gx, w.grad, x.grad is None]
    return facts, grads


def test_autograd_basics():
    run_both(autograd_basics)


# ---- 7. embeddings --------------------------------------------------------------------------

def embeddings(torch, share):
    nn = torch.nn

    class BagOfWords(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(12, 6, padding_idx=0)
            self.out = nn.Linear(6, 2)

        def forward(self, ids):
            mask = (ids != 0).float().unsqueeze(-1)
            e = self.emb(ids) * mask
            return self.out(e.sum(1) / mask.sum(1).clamp(min=1.0))

    ids = torch.tensor(data(9, 8, 5, classes=12))
    labels = torch.tensor(data(10, 8, classes=2))
    model = share(BagOfWords())
    first_row = model.emb.weight[0].clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, first_row, model.emb.weight[0], model.emb.weight.grad[0], model.emb.weight


def test_embeddings_with_padding_idx():
    ours = run_both(embeddings)
    assert not ours[1].any() and not ours[2].any() and not ours[3].any()   # row 0 stays zero


# ---- 8. fine-tuning: a frozen backbone, a new head, a schedule ----------------------------------

def fine_tune(torch, share):
    nn = torch.nn
    backbone = share(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU()))
    for p in backbone.parameters():
        p.requires_grad = False
    head = share(nn.Linear(16, 3))
    model = nn.Sequential(backbone, head)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    X, y = torch.tensor(data(11, 24, 8)), torch.tensor(data(12, 24, classes=3))
    before = backbone[0].weight.clone()
    losses, lrs = [], []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        lrs.append(opt.param_groups[0]["lr"])
    return (losses, lrs, len(trainable), torch.equal(before, backbone[0].weight),
            backbone[0].weight.grad is None, head.weight)


def test_fine_tuning_a_frozen_backbone():
    run_both(fine_tune)


# ---- 9. regression with a DataLoader -------------------------------------------------------------

def regression(torch, share):
    from importlib import import_module
    data_mod = import_module(torch.__name__ + ".utils.data")
    nn = torch.nn
    X = data(13, 40, 3)
    y = (X @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    loader = data_mod.DataLoader(data_mod.TensorDataset(torch.tensor(X), torch.tensor(y)),
                                 batch_size=8, shuffle=False)
    model = share(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    crit = nn.MSELoss()
    epochs = []
    for _ in range(3):
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            loss = crit(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * xb.size(0)
        sched.step()
        epochs.append(total / len(loader.dataset))
    return epochs, model.weight, model.bias, len(loader)


def test_regression_with_a_data_loader():
    run_both(regression)


# ---- 10. a residual model with buffers, eval and inference ---------------------------------------

def residual(torch, share):
    nn, F = torch.nn, torch.nn.functional

    class Residual(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.fc = nn.Linear(d, d)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            return x + self.drop(F.silu(self.fc(self.norm(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor(0.5))
            self.inp = nn.Linear(4, 8)
            self.blocks = nn.ModuleList([Residual(8) for _ in range(3)])
            self.out = nn.Linear(8, 1)

        def forward(self, x):
            h = self.inp(x) * self.scale
            for b in self.blocks:
                h = b(h)
            return self.out(h).squeeze(-1)

    X, y = torch.tensor(data(14, 16, 4)), torch.tensor(data(15, 16))
    model = share(Model())
    model.eval()                         # dropout off: the two libraries draw differently
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = F.smooth_l1_loss(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.inference_mode():
        pred = model(X[:3])
    names = [n for n, _ in model.named_parameters()]
    return losses, pred, names, list(model.state_dict())[:3], \
        sum(p.numel() for p in model.parameters())


def test_residual_model_with_buffers():
    run_both(residual)
