"""Checks links and #fragments in the built HTML (mdbook-linkcheck2 checks neither
fragments nor the pages of draft chapters)."""

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append(attrs[key])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


# ANCHOR: dead_links
def dead_links(html_dir: Path, src_dir: Path) -> list[str]:
    """Every internal link must reach an existing file, and its #fragment an existing id.
    Problems name the chapter source and line where the link is written, when found."""
    pages = {p: _parse(p) for p in html_dir.rglob("*.html")}
    problems = []
    for page_path, page in pages.items():
        if page_path.name in ("print.html", "404.html", "toc.html"):
            continue  # generated copies of the chapters' links
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("mailto:"):
                continue
            target = (page_path.parent / unquote(parts.path)).resolve() if parts.path else page_path
            if target.is_dir():
                target = target / "index.html"
            problem = None
            if not target.exists():
                problem = f"link to '{link}': no such file"
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problem = f"link to '{link}': no element with id '{parts.fragment}'"
            if problem:
                problems.append(f"{_where(page_path, html_dir, src_dir, link)}: {problem}")
    return problems
# ANCHOR_END: dead_links


def _where(page: Path, html_dir: Path, src_dir: Path, link: str) -> str:
    """The chapter line that writes `link` (as .md or .html), else the HTML file."""
    chapter = src_dir / page.relative_to(html_dir).with_suffix(".md")
    if chapter.exists():
        needles = {link, link.replace(".html", ".md")}
        for number, line in enumerate(chapter.read_text().splitlines(), 1):
            if any(n in line for n in needles):
                return f"{chapter.relative_to(src_dir.parent)}:{number}"
        return f"{chapter.relative_to(src_dir.parent)}"
    return str(page)
