"""`torch.autograd`: `grad` (gradients of outputs with respect to inputs) and
`backward`, over lazyarray's reverse mode."""
from __future__ import annotations

from typing import Any, Sequence

import lazyarray as _la
from lazyarray import backward as _backward
from lazyarray.compiler.transforms import autodiff as _autodiff
from lazyarray.tensor import Tensor


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Any = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """d outputs / d inputs (a tuple, one per input), without touching `.grad`."""
    outs = [outputs] if type(outputs) is Tensor else list(outputs)
    ins = [inputs] if type(inputs) is Tensor else list(inputs)
    seeds = [None] * len(outs) if grad_outputs is None else (
        [grad_outputs] if type(grad_outputs) is Tensor else list(grad_outputs))
    nodes = []
    for o, s in zip(outs, seeds):
        if s is None:
            if o.size != 1:
                raise RuntimeError("grad: grad_outputs is needed for a non-scalar output "
                                   f"of shape {tuple(o.shape)}")
            s = _la.ones_like(o)
        nodes.append(s._node)
    cts = _autodiff.vjp_many([o._node for o in outs], nodes, [i._node for i in ins])
    result = []
    for i, ct in zip(ins, cts):
        if ct is None:
            if not allow_unused:
                raise RuntimeError("grad: one of the inputs was not used to compute the "
                                   "outputs (pass allow_unused=True to get None for it)")
            result.append(None)
            continue
        node = ct if create_graph else _autodiff.stop(ct)
        result.append(Tensor._wrap(node, i._state))
    return tuple(result)


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None,
             inputs: Any = None) -> None:
    ts = [tensors] if type(tensors) is Tensor else list(tensors)
    gs = [grad_tensors] * len(ts) if grad_tensors is None or type(grad_tensors) is Tensor \
        else list(grad_tensors)
    for t, g in zip(ts, gs):
        _backward.backward(t, g, bool(retain_graph), inputs)


no_grad, enable_grad, set_grad_enabled = _la.no_grad, _la.enable_grad, _la.set_grad_enabled
