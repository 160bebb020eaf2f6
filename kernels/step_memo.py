"""What the CPU reference ops derive from a step's metadata once, reused by every layer.

A decoder calls the same op in each of its layers with the same block tables, context
lengths, slot mapping and positions; what an op derives from those alone (gather
indices, masks, the step's rotary rows) is the same in every layer. `per_step` keeps the
last value derived under each name and hands it back while it is asked about the very
same tensor objects (held weakly, so a finished step's tensors are not kept alive), so a
30-layer step derives each once instead of 30 times.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

_LAST: dict[str, tuple[tuple[weakref.ref[torch.Tensor], ...], Hashable, Any]] = {}


def per_step(
    name: str, sources: tuple[torch.Tensor, ...], key: Hashable, derive: Callable[[], T]
) -> T:
    """derive() once per distinct (sources by identity, key); sources must not be changed
    in place while they are in use (step metadata never is)."""
    entry = _LAST.get(name)
    if entry is not None:
        refs, seen_key, value = entry
        if seen_key == key and len(refs) == len(sources):
            if all(ref() is source for ref, source in zip(refs, sources, strict=True)):
                return value  # type: ignore[no-any-return]
    value = derive()
    _LAST[name] = (tuple(weakref.ref(source) for source in sources), key, value)
    return value
