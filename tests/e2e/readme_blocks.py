"""The fenced examples of README.md and of the pages its longer examples live on, each with
the page and section it sits in, and how to run one as a reader would: Python pasted into
one session per section, shell lines in bash."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Pages whose every example runs in test_readme_examples.py: the README and the pages it
# sends a reader on to for more (what it shows, how to deploy it, how to work on it).
EXAMPLE_PAGES = (README, ROOT / "docs" / "guide.md", ROOT / "docs" / "deployment.md",
                 ROOT / "docs" / "development.md")
# Where the README's examples expect the API: `make serve`'s address.
README_ADDRESS = "localhost:8000"


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/guide.md
    section: str  # the `## ` heading above it
    language: str  # the fence's info string; "" for a plain block
    text: str
    line: int  # of its opening fence, 1-based

    def at(self, base_url: str) -> str:
        """The example's text pointed at `base_url` (http://host:port) instead of :8000."""
        return self.text.replace(README_ADDRESS, base_url.removeprefix("http://"))


def example_blocks() -> list[Block]:
    """Every example page's blocks."""
    return [block for page in EXAMPLE_PAGES for block in readme_blocks(page)]


def readme_blocks(path: Path = README) -> list[Block]:
    """One page's blocks."""
    page = str(path.relative_to(ROOT))
    blocks: list[Block] = []
    section = ""
    opened: tuple[str, int] | None = None
    body: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if opened is None:
            if line.startswith("## "):
                section = line[3:].strip()
            elif line.startswith("```"):
                opened, body = (line[3:].strip(), number), []
        elif line.strip() == "```":
            blocks.append(Block(page, section, opened[0], "\n".join(body) + "\n", opened[1]))
            opened = None
        else:
            body.append(line)
    if opened is not None:
        raise ValueError(f"{page}: the block opened at line {opened[1]} never closes")
    return blocks


def block_with(snippet: str, blocks: list[Block] | None = None) -> Block:
    """The one block of the example pages holding `snippet`."""
    found = [block for block in blocks or example_blocks() if snippet in block.text]
    if len(found) != 1:
        raise LookupError(f"{len(found)} example blocks hold {snippet!r}, not one")
    return found[0]


def run_python(block: Block, base_url: str, namespace: dict[str, Any]) -> str:
    """Runs the block in `namespace` (a reader's session: names from earlier blocks of the
    section are there) and returns what it printed."""
    printed = io.StringIO()
    code = compile(block.at(base_url), f"{block.page}, block at line {block.line}", "exec")
    with contextlib.redirect_stdout(printed):
        exec(code, namespace)
    return printed.getvalue()


def reader_env(**extra: str) -> dict[str, str]:
    """The environment of a reader with the project's virtual environment active."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, **extra}


def start_script(source: str) -> subprocess.Popen[str]:
    """A Python program, as a reader would save and run it."""
    return subprocess.Popen([sys.executable, "-c", source], cwd=ROOT, env=reader_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str], timeout: float) -> str:
    """Its output once it exits; its error output in the failure if it does not exit 0."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"still running after {timeout}s:\n{stdout}\n{stderr}") from None
    if process.returncode != 0:
        raise AssertionError(f"exited {process.returncode}:\n{stdout}\n{stderr[-4000:]}")
    return stdout


def bash(command: str, timeout: float = 300, **env: str) -> str:
    """One shell line; its output, failing on a non-zero exit."""
    process = subprocess.Popen(["bash", "-o", "pipefail", "-c", command], cwd=ROOT,
                               env=reader_env(**env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return finish(process, timeout)
