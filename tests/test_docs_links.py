"""Every link between the README and the pages of docs/ leads somewhere: the file exists
and, where the link names a heading (`page.md#heading`), the page has that heading. A page
that moves or a section that is renamed fails here instead of on a reader's click."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A markdown link's target, outside code: [text](target)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(markdown: str) -> str:
    """The page without its fenced blocks and inline code, where a link is only text."""
    markdown = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", markdown)


def anchors(page: Path) -> set[str]:
    """The page's headings as the forge anchors them: lower case, punctuation dropped,
    spaces as hyphens, a repeated heading numbered."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        numbered, count = anchor, 0
        while numbered in found:
            count += 1
            numbered = f"{anchor}-{count}"
        found.add(numbered)
    return found


def local_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text()))
            if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in local_links(page):
        path, _, heading = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif heading and linked.suffix == ".md" and heading not in anchors(linked):
            broken.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    assert broken == []


def test_the_anchors_are_the_forges() -> None:
    page = ROOT / "docs" / "performance-log.md"
    assert "the-fused-c-ops-and-float32-between-bf16-matmuls" in anchors(page)
    assert "zen-4-counted-right-attention-by-kv-head-the-apis-dependencies-2026-12-06" in (
        anchors(page))
