"""llama.cpp's source tree as the source distribution of `llama-cpp-python` vendors it: its
GGUF converter, its real chat templates (`models/templates/`) and its vocabularies with
expected tokenizations (`models/ggml-vocab-*.gguf` with `.inp`/`.out`). Fetched by pip
once per machine into the user's cache folder (a fresh clone finds it there too), then read
from there by every test that needs it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.3.36"
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spate" / "llama-cpp-python"
)


def llama_cpp_tree() -> Path:
    """The vendored llama.cpp folder, fetching the source distribution on first use.
    `SPATE_LLAMA_CPP_SRC` names an existing tree instead (no fetch)."""
    override = os.environ.get("SPATE_LLAMA_CPP_SRC")
    if override:
        return Path(override)
    tree = CACHE / VERSION / "vendor" / "llama.cpp"
    if (tree / "convert_hf_to_gguf.py").exists():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tree / "convert_hf_to_gguf.py").exists():
            _fetch(tree)
    return tree


def _fetch(tree: Path) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE) as download:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", download, f"llama-cpp-python=={VERSION}"],
            check=True, timeout=600,
        )
        (archive,) = Path(download).glob("*.tar.gz")
        staging = Path(download) / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        (root,) = staging.iterdir()
        target = CACHE / VERSION
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(root, target)
    if not (tree / "convert_hf_to_gguf.py").exists():
        raise RuntimeError(f"llama-cpp-python {VERSION}'s source has no {tree}")


def vocab_files(tree: Path) -> list[Path]:
    """The vocabularies that come with expected tokenizations (`.inp` and `.out` beside)."""
    models = tree / "models"
    return sorted(p for p in models.glob("ggml-vocab-*.gguf") if Path(f"{p}.inp").exists())


def template(tree: Path, name: str) -> str:
    """A real chat template by file stem, e.g. `deepseek-ai-DeepSeek-R1-Distill-Qwen-32B`."""
    return (tree / "models" / "templates" / f"{name}.jinja").read_text()
