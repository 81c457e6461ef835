"""Links and #fragments in the built book resolve."""

import shutil
import subprocess

from conftest import ROOT
from links import dead_links

HTML = ROOT / "book" / "html"


def test_no_dead_links_or_fragments():
    assert HTML.exists(), "build the book first (mdbook build)"
    problems = dead_links(HTML, ROOT / "src")
    assert problems == [], "\n".join(problems)


def build_copy(tmp_path, edit, linkcheck=False):
    """Builds a copy of the book with `edit` applied to its device chapter; returns the
    copy's directory, or the failed build's CompletedProcess."""
    book = tmp_path / "book"
    shutil.copytree(ROOT / "src", book / "src")
    shutil.copy(ROOT / "book.toml", book / "book.toml")
    (book / "theme").mkdir()
    shutil.copy(ROOT / "theme" / "openreg.css", book / "theme" / "openreg.css")
    for name in ["openreg", ".cargo", "Makefile"]:
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, book / name)
    chapter = book / "src" / "device.md"
    chapter.write_text(edit(chapter.read_text()))
    if not linkcheck:  # test our checker alone
        config = (book / "book.toml").read_text().split("[output.linkcheck2]")[0]
        (book / "book.toml").write_text(config)
    result = subprocess.run([str(ROOT / ".venv/bin/mdbook"), "build"], cwd=book,
                            capture_output=True, text=True)
    return book if result.returncode == 0 else result


def test_dead_fragment_is_reported_with_chapter_line(tmp_path):
    book = build_copy(tmp_path, lambda t: t.replace("architecture.md#the-bridge", "architecture.md#no-such-section"))
    problems = dead_links(book / "book" / "html", book / "src")
    assert len(problems) == 1, problems
    assert problems[0].startswith("src/device.md:")
    assert "no element with id 'no-such-section'" in problems[0]


def test_dead_link_is_reported(tmp_path):
    book = build_copy(tmp_path, lambda t: t + "\nSee [the missing page](missing.md).\n")
    problems = dead_links(book / "book" / "html", book / "src")
    assert any("src/device.md:" in p and "'missing.html': no such file" in p for p in problems), problems


def test_linkcheck2_fails_the_build_on_a_dead_link(tmp_path):
    result = build_copy(tmp_path, lambda t: t + "\nSee [the missing page](missing.md).\n", linkcheck=True)
    assert not isinstance(result, type(tmp_path)), "the build should have failed"
    assert "File not found: missing.md" in result.stdout + result.stderr
