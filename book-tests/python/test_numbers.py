"""A measured number in a chapter's prose comes from a generated file (a `{{#number ...}}`
placeholder, book-tests/prose_numbers.py), or it is not there: a typed number goes stale the day the
benchmark is run again."""

import importlib.util
import re

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("prose_numbers", ROOT / "book-tests" / "prose_numbers.py")
numbers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(numbers)

CHAPTERS = sorted((ROOT / "src").glob("*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_no_measured_number_is_typed_into_prose(chapter):
    typed = [f"src/{chapter.name}:{line}: {value!r}"
             for line, value in numbers.typed_numbers(chapter.read_text())]
    assert not typed, ("measured numbers typed into prose (use {{#number FILE \"TEXT\" K}} from "
                       "src/generated, or drop them):\n" + "\n".join(typed))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_every_placeholder_names_a_generated_number(chapter):
    for m in numbers.PLACEHOLDER.finditer(chapter.read_text()):
        numbers.lookup(m.group(1))  # raises, naming the placeholder, if it does not resolve


def test_the_scanner_tells_measurements_from_shapes():
    text = "took 1.5 µs, 0.8–0.9× the CPU's, 4.9 GB/s, ±20%; a 3×3 add, Philox4x32, 64 MiB, 2 devices"
    assert [v for _, v in numbers.typed_numbers(text)] == ["1.5 µs", "0.8–0.9×", "4.9 GB/s", "20%"]
    code = "```text\n1.5 µs\n```\nand `1.5 µs` in code, {{#number bench \"x\" 1}} filled"
    assert list(numbers.typed_numbers(code)) == []


def test_a_placeholder_is_filled_from_the_generated_file():
    line = next(l for l in (ROOT / "src/generated/bench.txt").read_text().splitlines() if ".cpu() 64 MiB" in l)
    value = numbers.fill('{{#number bench ".cpu() 64 MiB" 1}}')
    assert value in line and value.endswith("GB/s")
    with pytest.raises(numbers.NumberError, match="no line"):
        numbers.fill('{{#number bench "no such case" 1}}')
    with pytest.raises(numbers.NumberError, match="numbers after"):
        numbers.fill('{{#number bench ".cpu() 64 MiB" 9}}')


def test_generated_outputs_show_no_internal_targets():
    # The crate diffs are code (a variable may be called TARGET); the rest are measurements.
    for path in sorted(p for p in (ROOT / "src/generated").glob("*.txt") if not p.name.startswith("diff-")):
        # "target" alone: a speed target; "targets" are a loss's (ctc_loss's, in conformance.txt).
        assert not re.search(r"\btarget\b", path.read_text(), re.I), (
            f"{path.relative_to(ROOT)} shows an internal speed target: run `make book-outputs`")


def test_the_readme_gives_the_measured_reader_install_time():
    minutes = numbers.lookup('reader-install "make reader" 1')
    readme = (ROOT / "README.md").read_text()
    assert f"{minutes} in a fresh" in readme, f"README.md should say `make reader` takes {minutes} (generated)"


# A comparison about something measured ("faster", "slower", "tracks", "a few milliseconds")
# is a claim about a table: its paragraph cites the row with a {{#number ...}} placeholder, or
# it is one of these, which compare nothing measured (with the reason).
COMPARATIVE = re.compile(r"\b(faster|slower|shines?|far below|tracks|beats?|outperforms?|"
                         r"a few (?:milli|micro)seconds|at CPU speed)\b", re.I)
NOT_MEASURED = {
    "below 1.0 is a kernel faster than the CPU's": "defines which way a ratio reads",
    "so below 1 is faster": "defines which way a ratio reads",
    "Faster R-CNN": "a model's name",
    "A step can be slower than all of its operators": "a possibility the bullet explains",
    "A different PyTorch path is not a slower kernel": "about which path runs, not a speed",
    "many times slower along a middle dimension": "a pitfall's general lesson",
}


def paragraphs(markdown: str):
    """(first line number, text) of each prose paragraph, blockquotes included, code left out."""
    fence, start, lines = None, 0, []
    for number, line in enumerate(markdown.splitlines(), 1):
        stripped = line.lstrip("> ").strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None:
            fence = None if stripped.startswith(fence) else fence
            continue
        if fence is not None or not stripped:
            if lines:
                yield start, " ".join(lines)
            lines = []
            continue
        if not lines:
            start = number
        lines.append(stripped)
    if lines:
        yield start, " ".join(lines)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_comparisons_of_measurements_cite_a_generated_row(chapter):
    uncited = [f"{chapter.name}:{line}: {text[:120]}" for line, text in paragraphs(chapter.read_text())
               if COMPARATIVE.search(text) and "{{#number" not in text
               and not any(phrase in text for phrase in NOT_MEASURED)]
    assert not uncited, uncited


def test_an_uncited_comparison_is_found_and_a_cited_one_passes():
    text = ("Compiled, the chain runs faster than eager.\n\n```text\nslower\n```\n\n"
            "> It takes {{#number bench \".cpu() 64 MiB\" 1}},\n> faster than CPU.\n")
    found = [t for _, t in paragraphs(text) if COMPARATIVE.search(t) and "{{#number" not in t]
    assert found == ["Compiled, the chain runs faster than eager."]
