"""Finding the runnable Python blocks of a chapter and running them.

A ```python block runs as a program, in the environment its first line names; a ```text
block right after it is the output it must print. ```python,ignore blocks (excerpts of the package, included from the real code) are
not run.
"""

import difflib
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path


# A runnable block's first line says where the reader runs it: on the full backend, or on a
# chapter crate as that chapter builds it ("# Runs on: listings/device, built in step 1").
ENVIRONMENT = re.compile(r"# Runs on: (?:(?P<full>the full backend)|listings/(?P<stage>[a-z]+)\b)")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    expected: str | None

    @property
    def environment(self) -> str | None:
        """"full", a chapter crate's name, or None when the block does not say."""
        m = ENVIRONMENT.match(self.code)
        return None if m is None else "full" if m.group("full") else m.group("stage")


# ANCHOR: parse
def python_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            i += 1
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            expected = None
            if j < len(lines) and lines[j].strip() == "```text":
                out, j = [], j + 1
                while j < len(lines) and lines[j].strip() != "```":
                    out.append(lines[j])
                    j += 1
                expected, i = "\n".join(out), j + 1
            blocks.append(Block(path, start, "\n".join(map(partial(included, path), body)) + "\n", expected))
        else:
            i += 1
    return blocks
# ANCHOR_END: parse


def included(chapter: Path, line: str) -> str:
    """A line as mdBook renders it: `{{#include FILE}}` becomes the file (runnable blocks
    include whole programs only)."""
    m = re.fullmatch(r"\{\{#include ([^:}]+)\}\}", line.strip())
    return (chapter.parent / m.group(1)).read_text().rstrip("\n") if m else line


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(block: Block, root: Path, python: str = sys.executable, cwd: Path | None = None,
        env: dict | None = None) -> str | None:
    """Runs the block (with `python`, in `cwd`, default the repository); returns a failure
    message naming file and line, or None."""
    where = f"{block.path.relative_to(root)}:{block.line}"
    result = subprocess.run([python, "-c", block.code], capture_output=True,
                            text=True, timeout=300, cwd=cwd or root, env=env)
    if result.returncode != 0:
        return f"{where}: the Python block failed:\n{result.stderr}"
    if block.expected is not None and normalise(result.stdout) != normalise(block.expected):
        diff = "\n".join(difflib.unified_diff(
            normalise(block.expected).splitlines(), normalise(result.stdout).splitlines(),
            "shown in the book", "printed now", lineterm=""))
        return f"{where}: the output shown under this Python block is stale:\n{diff}"
    return None
