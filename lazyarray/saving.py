"""`la.save` / `la.load`: any picklable object holding tensors (a tensor, a state_dict, a
module, an optimizer's state) in a file, as `torch.save` / `torch.load`.

A tensor pickles as its value (a pending tensor is computed first), its device name and
whether it requires grad. `load` reads only plain data by default (`weights_only=True`:
tensors, NumPy arrays, numbers, strings, and lists, tuples and dicts of them), because
unpickling an arbitrary object runs code the file names; pass `weights_only=False` for a
file you trust that holds other objects (a whole module).

`load` also reads what `torch.save` writes (its zip archive; see torch_checkpoint.py),
under the same rules, without importing torch: a PyTorch state_dict comes back with
lazyarray tensors in it, ready for `Module.load_state_dict`.
"""
from __future__ import annotations

import io
import os
import pickle
from typing import Any, Union

from . import torch_checkpoint
from .tensor import _rebuild

PathOrFile = Union[str, os.PathLike, io.IOBase]

# (module, name) a weights-only file may name: the tensor rebuilder and what NumPy
# arrays and dtypes pickle as
_PLAIN = {
    ("lazyarray.tensor", "_rebuild"), ("collections", "OrderedDict"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"), ("builtins", "int"), ("builtins", "float"),
    ("builtins", "complex"), ("builtins", "slice"), ("builtins", "set"),
    ("builtins", "frozenset"), ("ml_dtypes", "bfloat16"),
}
assert _rebuild.__module__ == "lazyarray.tensor"


def _plain_only(module: str, name: str) -> Any:
    """The class a weights-only file may name, or an error saying why not."""
    if (module, name) not in _PLAIN:
        raise pickle.UnpicklingError(
            f"la.load: the file names {module}.{name}, which a weights-only load does "
            "not run; if you trust the file, pass weights_only=False")
    return pickle.Unpickler.find_class(_ANY, module, name)


class _WeightsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _plain_only(module, name)


_ANY = pickle.Unpickler(io.BytesIO(b""))        # find_class's plain lookup, for any name


def save(obj: Any, f: PathOrFile) -> None:
    """Write `obj` (tensors, modules, dicts of them...) to a path or a binary file."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as out:
            pickle.dump(obj, out, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)


def load(f: PathOrFile, weights_only: bool = True) -> Any:
    """Read what `save` wrote, or what `torch.save` wrote (see the module's note on
    `weights_only`)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as src:
            return load(src, weights_only)
    head = f.read(len(torch_checkpoint.LEGACY_MAGIC))
    if head.startswith(torch_checkpoint.ZIP_MAGIC):
        return torch_checkpoint.load(head + f.read(),
                                     _plain_only if weights_only else _ANY.find_class)
    if head == torch_checkpoint.LEGACY_MAGIC:
        raise pickle.UnpicklingError(
            "la.load: this is PyTorch's legacy checkpoint format (torch < 1.6, or "
            "_use_new_zipfile_serialization=False), which la.load does not read; save it "
            "again with torch.save's default (zip) format")
    if f.seekable():
        f.seek(-len(head), io.SEEK_CUR)
        rest = f
    else:
        rest = io.BytesIO(head + f.read())
    return _WeightsOnly(rest).load() if weights_only else pickle.load(rest)
