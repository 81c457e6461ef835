"""Every runnable Python block in the book names the environment it runs in, and the ones
on the full backend run against the built backend and print exactly the output shown under
them (test_listings.py runs the ones on a chapter crate, in that crate's environment)."""

import os
import shutil

import pytest

from blocks import Block, python_blocks, run
from conftest import ROOT

CHAPTERS = sorted((ROOT / "src").glob("*.md"))
BLOCKS = [b for chapter in CHAPTERS for b in python_blocks(chapter)]


def test_the_book_has_runnable_python_blocks():
    assert len(BLOCKS) >= 5
    assert sum(b.expected is not None for b in BLOCKS) >= 5


def test_every_block_names_its_environment():
    unnamed = [f"{b.path.relative_to(ROOT)}:{b.line}" for b in BLOCKS if b.environment is None]
    assert not unnamed, ("runnable blocks whose first line does not say where they run "
                         "(# Runs on: the full backend, or # Runs on: listings/STAGE ...):\n" + "\n".join(unnamed))


def test_every_shell_block_names_where_it_runs():
    # Shell blocks make environments (a clone, a venv, a crate's copy); test_listings.py and
    # test_own_backend.py run their steps.
    unnamed = []
    for chapter in CHAPTERS:
        lines = chapter.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            if line.strip() in ("```sh", "```bash", "```console") and not lines[i + 1].startswith("# Runs in: "):
                unnamed.append(f"{chapter.relative_to(ROOT)}:{i + 1}")
    assert not unnamed, "shell blocks whose first line is not `# Runs in: ...`:\n" + "\n".join(unnamed)


def test_blocks_on_a_crate_name_one_that_exists():
    stages = {p.name for p in (ROOT / "listings").iterdir() if (p / "Cargo.toml").exists()}
    for b in BLOCKS:
        assert b.environment in stages | {"full", None}, f"{b.path.name}:{b.line}: no crate listings/{b.environment}"


# Inductor's graph cache does not cover AOTInductor packages: their C++ is compiled on every
# run. Through ccache a set-up machine reuses the objects; ccache refuses a file that includes a
# precompiled header (Inductor's wrapper does) unless its sloppiness allows it.
COMPILER_CACHE = {
    "CXX": "ccache c++",
    "CCACHE_SLOPPINESS": ",".join(filter(None, [os.environ.get("CCACHE_SLOPPINESS"),
                                                 "pch_defines,time_macros,include_file_mtime,include_file_ctime"])),
} if shutil.which("ccache") else {}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.environment == "full"],
                         ids=lambda b: f"{b.path.name}:{b.line}")
def test_block(block):
    failure = run(block, ROOT, env={**os.environ, **COMPILER_CACHE})
    assert failure is None, failure


def test_changed_output_is_reported_with_file_and_line(tmp_path):
    chapter = tmp_path / "src" / "chapter.md"
    chapter.parent.mkdir()
    chapter.write_text("# C\n\nSome text.\n\n```python\n# Runs on: the full backend\nprint(1 + 1)\n```\n\n```text\n3\n```\n")
    [block] = python_blocks(chapter)
    failure = run(block, tmp_path)
    assert failure.startswith("src/chapter.md:5: the output shown under this Python block is stale")
    assert "-3" in failure and "+2" in failure


def test_failing_block_is_reported(tmp_path):
    block = Block(tmp_path / "c.md", 4, "raise SystemExit('boom')\n", None)
    assert run(block, tmp_path).startswith("c.md:4: the Python block failed")
