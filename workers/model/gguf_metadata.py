"""Reads the head of a GGUF file (its key-value metadata and its table of tensors), fast
enough for whole vocabularies.

`gguf.GGUFReader` builds a numpy view per array element while it opens a file: for a
262,144-token vocabulary with half a million merges that is about a minute of work before
the first tensor is looked at. Walking the same bytes with `struct` takes well under a
second, so the tokenizer's metadata, the config and `spate models check` read it here.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from gguf import GGMLQuantizationType

_MAGIC = b"GGUF"
_STRING = 8
_ARRAY = 9
# GGUF value type -> (struct format, numpy dtype) for the fixed-size scalars.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<?", "<?"),
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}


class _Cursor:
    __slots__ = ("data", "offset")

    def __init__(self, data: memoryview | bytes) -> None:
        self.data = data
        self.offset = 0

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        start = self.offset
        self.offset += length
        # Some converters wrote tokens that are not valid UTF-8 (bytes of a multi-byte
        # character); they are kept, unreadable, rather than refusing the whole file.
        return bytes(self.data[start : self.offset]).decode("utf-8", "surrogateescape")

    def skip_string(self) -> None:
        length = self.unpack("<Q")
        self.offset += length

    def value(self, kind: int, keep: bool) -> Any:
        if kind == _STRING:
            if keep:
                return self.string()
            self.skip_string()
            return None
        if kind == _ARRAY:
            return self.array(keep)
        if kind not in _SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self.unpack(_SCALARS[kind][0])

    def array(self, keep: bool) -> Any:
        kind = self.unpack("<I")
        count = self.unpack("<Q")
        if kind in _SCALARS:
            fmt, dtype = _SCALARS[kind]
            size = struct.calcsize(fmt)
            start = self.offset
            self.offset += size * count
            if not keep:
                return None
            return np.frombuffer(self.data, dtype=dtype, count=count, offset=start).tolist()
        if kind == _STRING and keep:
            return [self.string() for _ in range(count)]
        values = [self.value(kind, keep) for _ in range(count)]
        return values if keep else None


# The vocabulary's arrays: by far the largest values, read only where the tokenizer is built.
_VOCABULARY_KEYS = (
    "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
)
_DEFAULT_ALIGNMENT = 32
_Read = TypeVar("_Read")


@dataclass(frozen=True, slots=True)
class GgufTensorInfo:
    name: str
    # As GGUF lists it: the fastest-varying axis first ([columns, rows] for a matrix).
    shape: tuple[int, ...]
    # The ggml type's name ("Q4_K", "F32"), or "type N" for one gguf-py does not know.
    type_name: str
    # From the start of the file's data section.
    offset: int


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """What a GGUF file says before its tensor data: its metadata (the vocabulary's arrays
    left out) and its tensors' names, shapes and types."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, GgufTensorInfo]
    data_offset: int

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def floats(self, name: str) -> list[float] | None:
        """A small F32 or F16 tensor's values (rope factors), None where the file has none."""
        info = self.tensors.get(name)
        if info is None:
            return None
        dtypes = {"F32": "<f4", "F16": "<f2"}
        if info.type_name not in dtypes:
            raise ValueError(f"{self.path}: tensor {name} is {info.type_name}, not F32 or F16")
        count = int(np.prod(info.shape))
        with open(self.path, "rb") as file:
            file.seek(self.data_offset + info.offset)
            data = file.read(count * np.dtype(dtypes[info.type_name]).itemsize)
        return [float(x) for x in np.frombuffer(data, dtype=dtypes[info.type_name])]


def read_gguf_metadata(path: Path, prefixes: Iterable[str] = ("",)) -> dict[str, Any]:
    """The file's key-values whose key starts with one of `prefixes` (all of them by default):
    numbers as Python numbers, strings as `str`, arrays as lists."""
    wanted = tuple(prefixes)
    return _open(path, lambda cursor: _read(cursor, lambda key: key.startswith(wanted), path)[1])


def read_gguf_header(path: Path) -> GgufHeader:
    """The file's metadata without the vocabulary's arrays, and its table of tensors."""
    return _open(path, lambda cursor: _read_header(cursor, path))


def _open(path: Path, read: Callable[[_Cursor], _Read]) -> _Read:
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        try:
            return read(_Cursor(view))
        except struct.error as error:
            raise ValueError(f"{path} is not a readable GGUF file: {error}") from None
        finally:
            view.release()


def _read(
    cursor: _Cursor, keep: Callable[[str], bool], path: Path
) -> tuple[int, dict[str, Any], int]:
    """(version, the kept key-values, the tensor count), the cursor left at the tensor table."""
    if bytes(cursor.data[:4]) != _MAGIC:
        raise ValueError(f"{path} is not a GGUF file")
    cursor.offset = 4
    version = cursor.unpack("<I")
    if version not in (2, 3):
        # A big-endian file reads its version byte-swapped, so it lands here as well.
        raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3, little-endian)")
    tensor_count = cursor.unpack("<Q")
    count = cursor.unpack("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(count):
        key = cursor.string()
        kind = cursor.unpack("<I")
        kept = keep(key)
        value = cursor.value(kind, kept)
        if kept:
            metadata[key] = value
    return version, metadata, tensor_count


def _type_name(type_id: int) -> str:
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"type {type_id}"


def _read_header(cursor: _Cursor, path: Path) -> GgufHeader:
    version, metadata, tensor_count = _read(cursor, lambda key: key not in _VOCABULARY_KEYS, path)
    tensors: dict[str, GgufTensorInfo] = {}
    for _ in range(tensor_count):
        name = cursor.string()
        dimensions = cursor.unpack("<I")
        shape = tuple(cursor.unpack("<Q") for _ in range(dimensions))
        type_name = _type_name(cursor.unpack("<I"))
        tensors[name] = GgufTensorInfo(name, shape, type_name, cursor.unpack("<Q"))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    data_offset = -(-cursor.offset // alignment) * alignment
    return GgufHeader(path, version, metadata, tensors, data_offset)
