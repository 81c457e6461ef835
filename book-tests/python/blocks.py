"""Finding the runnable Python blocks of a chapter and running them.

A ```python block runs as a program; a ```text block right after it is the output it must
print. ```python,ignore blocks (excerpts of the package, included from the real code) are
not run.
"""

import difflib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    expected: str | None


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
            blocks.append(Block(path, start, "\n".join(body) + "\n", expected))
        else:
            i += 1
    return blocks
# ANCHOR_END: parse


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(block: Block, root: Path) -> str | None:
    """Runs the block; returns a failure message naming file and line, or None."""
    where = f"{block.path.relative_to(root)}:{block.line}"
    result = subprocess.run([sys.executable, "-c", block.code], capture_output=True,
                            text=True, timeout=300, cwd=root)
    if result.returncode != 0:
        return f"{where}: the Python block failed:\n{result.stderr}"
    if block.expected is not None and normalise(result.stdout) != normalise(block.expected):
        diff = "\n".join(difflib.unified_diff(
            normalise(block.expected).splitlines(), normalise(result.stdout).splitlines(),
            "shown in the book", "printed now", lineterm=""))
        return f"{where}: the output shown under this Python block is stale:\n{diff}"
    return None
