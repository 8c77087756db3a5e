"""Every relative link in README.md and docs/*.md points at a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```", re.S)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors of a document."""
    found = set()
    for line in CODE.sub("", markdown).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def relative_links(doc: Path) -> list[str]:
    text = CODE.sub("", doc.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in relative_links(doc):
        path_part, _, fragment = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        missing_anchor = (path.exists() and bool(fragment) and path.suffix == ".md"
                          and fragment not in anchors(path.read_text(encoding="utf-8")))
        if not path.exists() or missing_anchor:
            broken.append(target)
    assert broken == [], f"{doc.name}: broken links {broken}"
