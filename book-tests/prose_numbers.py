"""Numbers in the book's prose come from generated files, never from a sentence someone typed.

A chapter writes a measured number as a placeholder that names where it is measured:

    {{#number bench ".cpu() 64 MiB" 2}}

is the 2nd number (with its unit) on the first line of src/generated/bench.txt that contains
`.cpu() 64 MiB`, counted after that text. `make book-outputs` regenerates the file, and the
sentence follows. This file is the mdBook preprocessor that fills placeholders at build time
(book.toml: [preprocessor.numbers]) and the library test_numbers.py uses to find a measured
number typed into prose.
"""

import json
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "src" / "generated"

PLACEHOLDER = re.compile(r"\{\{#number\s+(.*?)\}\}")

# A measured quantity: a number followed by a unit of time, throughput, a ratio or a share.
# "3×3" and "4x32" are shapes and names, not ratios (a digit follows the x).
UNIT = r"(?:ns|µs|us|ms|s|sec|seconds?|minutes?|min|hours?|GB/s|GiB/s|MB/s|tokens/s|GFLOP/s|x|×|%)"
VALUE = re.compile(r"-?\d+(?:\.\d+)?(?:\s?" + UNIT + r"(?![\w/]))?")
MEASURED = re.compile(r"(?<![\w.#/-])\d+(?:[.,]\d+)?(?:\s?[–-]\s?\d+(?:\.\d+)?)?\s?" + UNIT + r"(?![\w/])")


class NumberError(Exception):
    pass


def lookup(args: str) -> str:
    """The value a placeholder's arguments name: FILE "TEXT" K."""
    try:
        name, text, k = shlex.split(args)
        k = int(k)
    except ValueError:
        raise NumberError(f'{{{{#number {args}}}}}: expected FILE "TEXT" K') from None
    path = GENERATED / f"{name}.txt"
    if not path.exists():
        raise NumberError(f"{{{{#number {args}}}}}: no generated file {path.relative_to(ROOT)}")
    for line in path.read_text().splitlines():
        at = line.find(text)
        if at < 0:
            continue
        values = [m.group(0) for m in VALUE.finditer(line[at + len(text):])]
        if not 1 <= k <= len(values):
            raise NumberError(f"{{{{#number {args}}}}}: the line has {len(values)} numbers after "
                              f"{text!r}: {line.strip()!r}")
        return values[k - 1]
    raise NumberError(f"{{{{#number {args}}}}}: no line of {path.name} contains {text!r}")


def fill(content: str) -> str:
    return PLACEHOLDER.sub(lambda m: lookup(m.group(1)), content)


def prose_lines(markdown: str):
    """(line number, text) of the prose: fenced blocks, include lines and inline code left out."""
    fence = None
    for number, line in enumerate(markdown.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith("{{#"):
            continue
        yield number, re.sub(r"`[^`]*`", "``", PLACEHOLDER.sub("", line))


def typed_numbers(markdown: str):
    """(line number, number) of every measured number typed into prose rather than generated."""
    for number, line in prose_lines(markdown):
        for m in MEASURED.finditer(line):
            yield number, m.group(0)


def walk(item):
    """Fills the placeholders of every chapter in mdBook's JSON book, whatever its nesting."""
    if isinstance(item, dict):
        if isinstance(item.get("content"), str):
            item["content"] = fill(item["content"])
        for value in item.values():
            walk(value)
    elif isinstance(item, list):
        for value in item:
            walk(value)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        return 0  # every renderer
    _context, book = json.load(sys.stdin)
    try:
        walk(book)
    except NumberError as e:
        print(f"numbers preprocessor: {e}", file=sys.stderr)
        return 1
    json.dump(book, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
