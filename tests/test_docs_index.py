"""The docs index (docs/README.md) links every page, and no link in the docs points nowhere."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "README.md"
# [text](target): a Markdown link; images too (![alt](target)).
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _local_links(page: pathlib.Path) -> list[str]:
    """The links of ``page`` to files of this repository (no URLs, no same-page anchors)."""
    links = _LINK.findall(page.read_text(encoding="utf-8"))
    return [link for link in links if not re.match(r"[a-z]+:|#", link)]


def test_the_index_links_every_page_of_docs():
    linked = {(INDEX.parent / link.split("#")[0]).resolve() for link in _local_links(INDEX)}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")} - {INDEX.resolve()}
    missing = sorted(p.name for p in pages - linked)
    assert not missing, f"docs/README.md does not link {missing}: add a row for each"


def test_the_readme_links_the_index():
    assert "docs/README.md" in _local_links(ROOT / "README.md")


def test_every_local_link_in_the_docs_points_at_a_file():
    broken = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in _pages()
        for link in _local_links(page)
        if not (page.parent / link.split("#")[0]).exists()
    ]
    assert not broken, f"links to files that do not exist: {broken}"


def test_the_link_reader_sees_what_it_checks():
    """A negative control: the reader finds a relative link and skips URLs and anchors."""
    text = "[a](docs/x.md) [b](https://example.com) [c](#top) ![d](img/y.svg#z)"
    links = [link for link in _LINK.findall(text) if not re.match(r"[a-z]+:|#", link)]
    assert links == ["docs/x.md", "img/y.svg#z"]
