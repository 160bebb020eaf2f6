"""The tensor types of a GGUF file: which ones spate loads, and what the file's mix is called.

Every type gguf-py dequantizes loads (to dense weights, or kept as the file's blocks where
the fused CPU op computes that type: workers/model/group_quantized.py); the others (Q8_1
and Q8_K, which llama.cpp uses only for activations, the integer types, F64) are refused
before anything is built, in one line that names them and the supported list."""

from __future__ import annotations

from collections import Counter

from gguf import LlamaFileType
from gguf.quants import _type_traits

from workers.model.gguf_metadata import GgufHeader

# F32 and F16 are read as they are; the rest through gguf-py's dequantizers.
LOADABLE_TYPES = ("F32", "F16", *sorted(kind.name for kind in _type_traits))


def tensor_types(header: GgufHeader) -> Counter[str]:
    """How many tensors the file stores in each type."""
    return Counter(info.type_name for info in header.tensors.values())


def refuse_unloadable_types(header: GgufHeader) -> None:
    """A ValueError naming the types (and a tensor of each) spate cannot read."""
    unloadable = sorted(set(tensor_types(header)) - set(LOADABLE_TYPES))
    if unloadable:
        examples = ", ".join(
            f"{kind} ({next(i.name for i in header.tensors.values() if i.type_name == kind)})"
            for kind in unloadable
        )
        raise ValueError(
            f"unsupported GGUF quantization {examples}; supported: {', '.join(LOADABLE_TYPES)}"
        )


def file_type_name(header: GgufHeader) -> str | None:
    """The name llama-quantize gives the file's mix ("Q4_K_M"), from `general.file_type`."""
    value = header.get("general.file_type")
    if value is None:
        return None
    try:
        name = LlamaFileType(int(value)).name
    except ValueError:
        return f"file type {value}"
    return name.removeprefix("MOSTLY_").replace("ALL_F32", "F32")


def describe_quantization(header: GgufHeader) -> str:
    """The mix and its per-type counts: "Q4_K_M (Q4_K x12, Q6_K x3, F32 x9)"."""
    counts = ", ".join(f"{kind} x{count}" for kind, count in tensor_types(header).most_common())
    name = file_type_name(header)
    return f"{name} ({counts})" if name else counts

