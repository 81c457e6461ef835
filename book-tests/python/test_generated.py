"""Terminal output shown in the book was produced by book-tests/generate.py from the inputs
as they are now."""

import json

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
