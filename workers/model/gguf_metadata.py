"""Reads the key-value metadata at the head of a GGUF file, fast enough for whole vocabularies.

`gguf.GGUFReader` builds a numpy view per array element while it opens a file: for a
262,144-token vocabulary with half a million merges that is about a minute of work before
the first tensor is looked at. Walking the same bytes with `struct` takes well under a
second, so the tokenizer's metadata is read here.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

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


def read_gguf_metadata(path: Path, prefixes: Iterable[str] = ("",)) -> dict[str, Any]:
    """The file's key-values whose key starts with one of `prefixes` (all of them by default):
    numbers as Python numbers, strings as `str`, arrays as lists."""
    wanted = tuple(prefixes)
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        try:
            return _read(_Cursor(view), wanted, path)
        except struct.error as error:
            raise ValueError(f"{path} is not a readable GGUF file: {error}") from None
        finally:
            view.release()


def _read(cursor: _Cursor, wanted: tuple[str, ...], path: Path) -> dict[str, Any]:
    if bytes(cursor.data[:4]) != _MAGIC:
        raise ValueError(f"{path} is not a GGUF file")
    cursor.offset = 4
    version = cursor.unpack("<I")
    if version not in (2, 3):
        # A big-endian file reads its version byte-swapped, so it lands here as well.
        raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3, little-endian)")
    cursor.unpack("<Q")  # tensor count
    count = cursor.unpack("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(count):
        key = cursor.string()
        kind = cursor.unpack("<I")
        keep = key.startswith(wanted)
        value = cursor.value(kind, keep)
        if keep:
            metadata[key] = value
    return metadata
