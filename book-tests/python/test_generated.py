"""Terminal output shown in the book was produced by book-tests/generate.py from the inputs
as they are now."""

import json
import re

import pytest

from conftest import ROOT
import importlib.util

spec = importlib.util.spec_from_file_location("generate", ROOT / "book-tests" / "generate.py")
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)


@pytest.mark.parametrize("name", sorted(generate.OUTPUTS))
def test_output_is_fresh(name):
    prints = json.loads((ROOT / "src/generated/fingerprints.json").read_text())
    produce, inputs = generate.OUTPUTS[name]
    assert (ROOT / f"src/generated/{name}.txt").exists(), f"src/generated/{name}.txt is missing"
    assert prints.get(name) == generate.fingerprint(inputs, produce), (
        f"src/generated/{name}.txt:1: stale: its generator or one of {inputs} changed since it was produced; "
        f"run `make book-outputs`"
    )


def test_every_generated_file_is_shown_in_the_book():
    chapters = "".join(p.read_text() for p in (ROOT / "src").glob("*.md"))
    for name in generate.OUTPUTS:
        assert f"generated/{name}.txt" in chapters, f"src/generated/{name}.txt is not included anywhere"


def test_a_changed_input_makes_the_output_stale(tmp_path, monkeypatch):
    source = tmp_path / "input.txt"
    source.write_text("one")
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    before = generate.fingerprint(["input.txt"])
    source.write_text("two")
    assert generate.fingerprint(["input.txt"]) != before


def test_an_anchored_input_is_stale_only_when_its_section_changes(tmp_path, monkeypatch):
    source = tmp_path / "Makefile"
    source.write_text("setup:\n\ttrue\n# ANCHOR: reader\nreader:\n\tmake it\n# ANCHOR_END: reader\n")
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    before = generate.fingerprint(["Makefile:reader"])
    source.write_text(source.read_text().replace("\ttrue", "\tfalse"))
    assert generate.fingerprint(["Makefile:reader"]) == before
    source.write_text(source.read_text().replace("make it", "make it again"))
    assert generate.fingerprint(["Makefile:reader"]) != before


# The generated tables of measurements. A case measured in two of them, in two runs of a
# shared machine, shows two numbers for one thing; each case has one table, which the
# others cite.
MEASURED = ["bench", "operators", "models-bench", "zoo-bench", "graphs-bench", "compile-bench",
            "aoti-bench", "profiler-bench", "distributed-bench"]


def cases(text: str) -> set:
    """The row labels of a generated table: a Markdown table's first cell, or the text before
    the first run of two spaces; a label's `, CPU` or `, openreg` names a column, not a case."""
    labels = set()
    for line in text.splitlines()[1:]:
        cell = line.split("|")[1] if line.startswith("|") else re.split(r"\s{2,}", line.strip())[0]
        label = re.sub(r",\s*(cpu|openreg)$", "", cell.strip().lower())
        if label and not re.fullmatch(r"[-\s|]*|case|model", label):
            labels.add(label)
    return labels


def test_no_case_is_measured_in_two_tables():
    seen = {}
    shared = []
    for name in MEASURED:
        for label in cases((ROOT / f"src/generated/{name}.txt").read_text()):
            if label in seen:
                shared.append(f"{label!r}: {seen[label]}.txt and {name}.txt")
            seen.setdefault(label, name)
    assert not shared, "measured in two tables (keep one, cite it from the other chapter):\n" + "\n".join(shared)


def test_the_case_reader_sees_a_shared_case():
    a = "case  CPU  openreg\nx + x 3x3   1.3us   0.9us\n"
    b = "torch 2.15\nx + x 3x3, openreg   1.2 us   0.8x\n| all_reduce 4 B | 395 µs |\n"
    assert cases(a) & cases(b) == {"x + x 3x3"}
    assert "all_reduce 4 b" in cases(b)
