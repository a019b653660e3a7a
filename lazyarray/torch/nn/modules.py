"""`torch.nn` modules whose PyTorch signature differs from `lazyarray.nn`'s, and small
modules it lacks; each forward is one call of `lazyarray.torch.nn.functional`."""
from __future__ import annotations

from typing import Any

import lazyarray as _la
from lazyarray import nn as _nn
from lazyarray.tensor import Tensor
from . import functional as F


class CrossEntropyLoss(_nn.CrossEntropyLoss):
    """PyTorch's argument order: (weight, size_average, ignore_index, reduce, reduction,
    label_smoothing); class weights are not supported (they raise)."""

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        F._no("CrossEntropyLoss", weight=weight)
        super().__init__(ignore_index=ignore_index,
                         reduction=F._reduction(size_average, reduce, reduction),
                         label_smoothing=label_smoothing)


class NLLLoss(_nn.NLLLoss):
    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean") -> None:
        F._no("NLLLoss", weight=weight)
        super().__init__(ignore_index=ignore_index,
                         reduction=F._reduction(size_average, reduce, reduction))


class _Loss(_nn.Module):
    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = F._reduction(size_average, reduce, reduction)


class MSELoss(_Loss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_Loss):
    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.weight = weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class _Activation(_nn.Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()


class SiLU(_Activation):
    def forward(self, input: Tensor) -> Tensor:
        return F.silu(input)


class ReLU6(_Activation):
    def forward(self, input: Tensor) -> Tensor:
        return F.relu6(input)


class LeakyReLU(_nn.Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope)


class ELU(_nn.Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha)


class Softplus(_nn.Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)


class LogSoftmax(_nn.Module):
    def __init__(self, dim: Any = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, self.dim)


class AdaptiveAvgPool2d(_nn.Module):
    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)


class Unflatten(_nn.Module):
    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        d = self.dim % input.ndim
        return input.reshape(input.shape[:d] + self.unflattened_size + input.shape[d + 1:])


class Flatten(_nn.Module):
    """PyTorch's Flatten(start_dim=1, end_dim=-1)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)


class Dropout(_nn.Dropout):
    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__(p)
