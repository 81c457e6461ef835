"""Every runnable Python block in the book runs against the built backend and prints
exactly the output shown under it."""

import pytest

from blocks import Block, python_blocks, run
from conftest import ROOT

CHAPTERS = sorted((ROOT / "src").glob("*.md"))
BLOCKS = [b for chapter in CHAPTERS for b in python_blocks(chapter)]


def test_the_book_has_runnable_python_blocks():
    assert len(BLOCKS) >= 5
    assert sum(b.expected is not None for b in BLOCKS) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.path.name}:{b.line}")
def test_block(block):
    failure = run(block, ROOT)
    assert failure is None, failure


def test_changed_output_is_reported_with_file_and_line(tmp_path):
    chapter = tmp_path / "src" / "chapter.md"
    chapter.parent.mkdir()
    chapter.write_text("# C\n\nSome text.\n\n```python\nprint(1 + 1)\n```\n\n```text\n3\n```\n")
    [block] = python_blocks(chapter)
    failure = run(block, tmp_path)
    assert failure.startswith("src/chapter.md:5: the output shown under this Python block is stale")
    assert "-3" in failure and "+2" in failure


def test_failing_block_is_reported(tmp_path):
    block = Block(tmp_path / "c.md", 4, "raise SystemExit('boom')\n", None)
    assert run(block, tmp_path).startswith("c.md:4: the Python block failed")
