"""Weights on disk: NumPy .npz, and safetensors through the optional `safetensors`
package's NumPy API. Both store a module's `state_dict` (dotted names -> arrays)."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .module import Module


def _state(obj: Any) -> dict:
    if isinstance(obj, Module):
        return obj.state_dict()
    return {k: np.asarray(v) for k, v in obj.items()}


def save_npz(obj: Any, path: str) -> None:
    """Save a module's state_dict (or a dict of arrays) as an uncompressed .npz."""
    with open(path, "wb") as f:          # a file object: NumPy would otherwise append .npz
        np.savez(f, **_state(obj))


def load_npz(path: str) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _safetensors_numpy() -> Any:
    try:
        from safetensors import numpy as st
    except ImportError:
        raise ImportError("safetensors is not installed: pip install 'lazyarray[safetensors]' "
                          "(or save as .npz)") from None
    return st


def save_safetensors(obj: Any, path: str) -> None:
    st = _safetensors_numpy()
    # np.ascontiguousarray would make a 0-d value (num_batches_tracked) 1-d
    st.save_file({k: np.array(v, order="C") for k, v in _state(obj).items()}, path)


def load_safetensors(path: str) -> dict:
    return dict(_safetensors_numpy().load_file(path))


def save(obj: Any, path: str) -> None:
    """By extension: .safetensors, else .npz."""
    if os.fspath(path).endswith(".safetensors"):
        save_safetensors(obj, path)
    else:
        save_npz(obj, path)


def load(path: str, into: Any = None) -> dict:
    """Read a weight file; with `into` (a module), also load it there (strictly)."""
    state = load_safetensors(path) if os.fspath(path).endswith(".safetensors") else load_npz(path)
    if into is not None:
        into.load_state_dict(state)
    return state
