"""Every relative link of the README and docs/ leads to a file of the checkout, and to a heading of it when the
link names one (`page.md#heading`, as GitHub makes heading anchors). No network: web links are not followed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced blocks and inline code, where a link is a link."""
    return re.sub(r"`[^`\n]*`", "", _strip_fences(text))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    text = _strip_fences(page.read_text(encoding="utf-8"))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", "")).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _strip_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _links() -> list[tuple[Path, str]]:
    return [(page, a or b) for page in PAGES for a, b in LINK.findall(_prose(page.read_text(encoding="utf-8")))]


def test_every_relative_link_resolves():
    links = _links()
    assert len(links) >= 50  # the parser sees the links
    broken = []
    for page, target in links:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or ROOT not in (file, *file.parents):
            broken.append((page.name, target, "no such file"))
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append((page.name, target, "no such heading"))
    assert broken == []


def test_every_docs_page_is_reachable_from_the_index():
    """A page nobody links to is a page nobody reads: the index lists every page of docs/."""
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for page, target in _links() if page == index}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")} - {index.resolve()}
    assert sorted(str(p.relative_to(ROOT)) for p in pages - linked) == []
