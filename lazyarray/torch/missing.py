"""The error for a PyTorch name that `lazyarray.torch` does not offer."""
from __future__ import annotations


def missing(namespace: str, name: str) -> AttributeError:
    """Rather than a bare AttributeError (the user's script was written for PyTorch): what
    is missing and where the list of what is there lives."""
    return AttributeError(f"{namespace} has no {name!r}: lazyarray.torch offers PyTorch's "
                          f"names only where they can mean what they mean in PyTorch, and "
                          f"{namespace}.{name} is not among them yet (docs/coming_from_pytorch.md "
                          "lists what is there)")
