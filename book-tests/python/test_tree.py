"""The appendix's map of the source tree names every file of the glue, in the
folder it lives in."""

import re

from conftest import ROOT

GLUE = ROOT / "openreg" / "torch"


def tree_block() -> str:
    chapter = (ROOT / "src" / "how-built.md").read_text()
    section = chapter.split("## The source tree", 1)[1]
    return section.split("```text", 1)[1].split("```", 1)[0]


def test_every_glue_file_is_in_the_map():
    tree = tree_block()
    names = set(re.findall(r"[\w.]+\.(?:rs|cpp|h|yaml)\b", tree))
    missing = []
    for path in sorted(GLUE.rglob("*")):
        if path.is_file() and path.suffix in {".rs", ".cpp", ".h", ".yaml"} and path.name != "tests.rs":
            if path.name not in names:
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"src/how-built.md: the source tree does not show {missing}"


def test_the_maps_folders_exist():
    tree = tree_block()
    for folder in ["csrc/runtime", "csrc/operators", "csrc/high_level", "src/runtime",
                   "src/operators", "src/operators/kernels"]:
        assert (GLUE / folder).is_dir(), folder
        assert folder.split("/")[-1] + "/" in tree, folder


def test_no_script_directory_shadows_a_standard_module():
    # A script's directory comes first on sys.path: bench/random.py or book-tests/numbers.py
    # would be imported by torch in place of the standard library's module.
    import sys

    for folder in ["bench", "book-tests", "book-tests/python", "listings"]:
        for path in (ROOT / folder).glob("*.py"):
            assert path.stem not in sys.stdlib_module_names, f"{path.relative_to(ROOT)} shadows a standard module"

