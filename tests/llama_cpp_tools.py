"""llama.cpp's own tools on tiny checkpoints: `convert_hf_to_gguf.py` from the vendored tree,
and `llama-quantize` built from it once per machine (cmake, that one target only) into the
user's cache folder beside the tree, reused by every later run."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .llama_cpp_source import CACHE, llama_cpp_tree

# The converter picks a tokenizer's pre-tokenizer by the hash of its token ids on a fixed
# text, which only the published vocabularies have: a tiny trained one needs its name
# given. Ours splits as GPT-2 does (tokenizers' ByteLevel with its default regex), so it is
# "gpt-2". Everything else (tensors, metadata, quantization) is the converter's own code.
# Without a tokenizer.model the Llama converter's SentencePiece attempt is a
# FileNotFoundError (where the sentencepiece package is installed; the import fails first
# where it is not), after which it reads tokenizer.json.
_CONVERT = """
import runpy, sys
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
read_sentencepiece = base.TextModel._set_vocab_sentencepiece
def set_vocab_sentencepiece(self, *args, **kwargs):
    if not (self.dir_model / "tokenizer.model").is_file():
        raise FileNotFoundError(self.dir_model / "tokenizer.model")
    return read_sentencepiece(self, *args, **kwargs)
base.TextModel._set_vocab_sentencepiece = set_vocab_sentencepiece
script, *jobs = sys.argv[1:]
# One process for every file: importing torch and transformers is most of a conversion.
for job in jobs:
    directory, outfile, outtype = job.split("|")
    sys.argv = [script, directory, "--outfile", outfile, "--outtype", outtype]
    runpy.run_path(script, run_name="__main__")
"""


def convert_to_gguf(jobs: list[tuple[Path, Path, str]]) -> None:
    """Convert Hugging Face folders with llama.cpp's converter: (folder, outfile,
    `--outtype` f32/f16/q8_0) each, in one process."""
    tree = llama_cpp_tree()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "gguf-py"), str(tree)])}
    subprocess.run(
        [sys.executable, "-c", _CONVERT, str(tree / "convert_hf_to_gguf.py"),
         *("|".join(str(part) for part in job) for job in jobs)],
        check=True, env=environment, capture_output=True, timeout=1200,
    )


def build_tools_available() -> str | None:
    """Why llama-quantize cannot be built here, or None when it can."""
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    return f"building llama-quantize needs {' and '.join(missing)}" if missing else None


def llama_quantize() -> Path:
    """The llama-quantize binary, built on first use (a few minutes on two cores)."""
    tree = llama_cpp_tree()
    build = CACHE / "llama-quantize-build"
    binary = build / "bin" / "llama-quantize"
    if binary.exists():
        return binary
    with open(CACHE / ".quantize-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            flags = ["-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                     "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                     "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release"]
            subprocess.run(["cmake", "-S", str(tree), "-B", str(build), *flags],
                           check=True, capture_output=True, timeout=600)
            subprocess.run(["cmake", "--build", str(build), "--target", "llama-quantize",
                            "-j", str(os.cpu_count() or 2)],
                           check=True, capture_output=True, timeout=3600)
    return binary


def quantize(source: Path, outfile: Path, kind: str) -> Path:
    """`llama-quantize source outfile kind` (e.g. Q4_K_M)."""
    subprocess.run([str(llama_quantize()), str(source), str(outfile), kind],
                   check=True, capture_output=True, timeout=600)
    return outfile
