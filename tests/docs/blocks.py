"""The fenced code blocks of the README and the tutorials, each with the marker above it that says whether a test
runs it: `<!-- docs-test: run ... -->` or `<!-- docs-test: skip (why) -->`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTED_PAGES = (REPO / "README.md", *sorted((REPO / "docs" / "tutorials").glob("*.md")))

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- docs-test: (run|skip)\b(.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "run", "skip" or None
    reason: str

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Top-level fenced blocks of a page (fences inside a block's heredoc are the block's text)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marked = MARKER.match(previous.strip())
        found.append(
            Block(
                page=page,
                line=i + 1,
                language=opening.group(1),
                code="\n".join(lines[i + 1 : end]) + "\n",
                marker=marked.group(1) if marked else None,
                reason=marked.group(2).strip(" ()") if marked else "",
            )
        )
        i = end + 1
    return found


def page_blocks(name: str) -> list[Block]:
    return blocks(next(p for p in TESTED_PAGES if p.name == name or str(p).endswith(name)))
