"""`torch.utils.data`: Dataset, TensorDataset, DataLoader, random_split, Subset.

The loader batches on the host side and hands lazyarray tensors to the step (stacked with
`lazyarray.stack`, or indexed in one gather for a TensorDataset); shuffling draws from
NumPy's generator, seeded by `torch.manual_seed` unless a `generator=` seed is given."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

import lazyarray as _la
from lazyarray.tensor import Tensor
from .. import creation as _creation


class Dataset:
    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError("a Dataset subclass defines __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Samples are the rows of each tensor (all with the same first dim)."""

    def __init__(self, *tensors: Any) -> None:
        tensors = tuple(t if type(t) is Tensor else _la.asarray(t) for t in tensors)
        if not tensors or any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("TensorDataset: needs tensors with the same first dim, got "
                             f"{[tuple(t.shape) for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (list, np.ndarray)):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = list(datasets)
        self.ends = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += len(self)
        k = int(np.searchsorted(self.ends, index, side="right"))
        return self.datasets[k][index - (self.ends[k - 1] if k else 0)]


def _rng(generator: Any) -> np.random.Generator:
    if generator is None:
        return np.random.default_rng(_creation.initial_seed() + _DRAWS.next())
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(int(generator))


class _Draws:
    """Successive loaders / epochs draw different orders for one seed."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


_DRAWS = _Draws()


def random_split(dataset: Dataset, lengths: Sequence[Any], generator: Any = None) -> list:
    """Disjoint random subsets of the given lengths (or fractions that sum to 1)."""
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1.0):
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
    else:
        sizes = [int(x) for x in lengths]
    if sum(sizes) != n:
        raise ValueError(f"random_split: lengths {list(lengths)} do not add up to the "
                         f"dataset's {n}")
    order = _rng(generator).permutation(n).tolist()
    out, start = [], 0
    for s in sizes:
        out.append(Subset(dataset, order[start:start + s]))
        start += s
    return out


def default_collate(samples: list) -> Any:
    """Stack tensors (and numbers, NumPy arrays) along a new first dim; tuples, lists and
    dicts field by field."""
    first = samples[0]
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate([s[i] for s in samples]) for i in range(len(first))) \
            if isinstance(first, tuple) else [default_collate([s[i] for s in samples])
                                              for i in range(len(first))]
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if type(first) is Tensor:
        return _la.stack(samples)
    return _la.asarray(np.stack([np.asarray(s) for s in samples]))


class DataLoader:
    """Batches of a dataset: `batch_size`, `shuffle`, `drop_last`, `collate_fn`; a
    TensorDataset's batch is one gather per tensor. `num_workers` is accepted and ignored
    (batches are lazy views, built in this process)."""

    def __init__(self, dataset: Dataset, batch_size: Optional[int] = 1, shuffle: bool = False,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Optional[Callable] = None, pin_memory: bool = False,
                 drop_last: bool = False, generator: Any = None, **kwargs: Any) -> None:
        if sampler is not None or batch_sampler is not None:
            raise NotImplementedError("DataLoader: sampler= and batch_sampler= are not "
                                      "supported (shuffle= and batch_size= are)")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.drop_last, self.collate_fn, self.generator = drop_last, collate_fn, generator
        self.num_workers = num_workers

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        return _rng(self.generator).permutation(n) if self.shuffle else np.arange(n)

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        if self.batch_size is None:
            for i in order.tolist():
                yield self.dataset[i]
            return
        b = self.batch_size
        stop = len(order) - (len(order) % b if self.drop_last else 0)
        for start in range(0, stop, b):
            idx = order[start:start + b]
            if isinstance(self.dataset, TensorDataset) and self.collate_fn is None:
                if not self.shuffle:
                    yield tuple(t[int(idx[0]):int(idx[-1]) + 1] for t in self.dataset.tensors)
                else:
                    yield self.dataset[_la.asarray(idx.astype(np.int64))]
                continue
            samples = [self.dataset[int(i)] for i in idx]
            yield (self.collate_fn or default_collate)(samples)
