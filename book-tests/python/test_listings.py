"""Each chapter crate in listings/ is copied into an empty directory, built there on its own,
installed into a scratch environment, and passes its own tests: "copy it and start your own
backend" is proven, not promised."""

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from blocks import python_blocks, run
from conftest import NOT_COPIED, ROOT, build_key, built_from, one_crate_build_at_a_time

STAGES = sorted(p.name for p in (ROOT / "listings").iterdir() if (p / "Cargo.toml").exists())
VENV = ROOT / ".venv"
BOOK_BLOCKS = [b for chapter in sorted((ROOT / "src").glob("*.md")) for b in python_blocks(chapter)]


def test_the_book_has_its_chapter_crates():
    assert STAGES == ["amp", "autoload", "compile", "device", "hooks", "operators", "runtime"]


COPIED = shutil.ignore_patterns(*NOT_COPIED)
# The crates build one at a time (conftest.one_crate_build_at_a_time). The compile crate's tests
# take longest (they run Inductor's C++ compiles): built first, they run beside the other
# crates' builds instead of after them.
BUILD_ORDER = sorted(STAGES, key=lambda stage: stage != "compile")


# ANCHOR: copy_out
@pytest.mark.parametrize("stage", BUILD_ORDER)
def test_chapter_crate_builds_and_passes_its_tests_when_copied_out(stage, tmp_path):
    crate = tmp_path / stage
    # copy, not copy2: fresh modification times, so cargo rebuilds the crate from the copy.
    shutil.copytree(ROOT / "listings" / stage, crate, copy_function=shutil.copy, ignore=COPIED)
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(VENV),
        "PYO3_PYTHON": str(VENV / "bin" / "python"),
        # Compiled dependencies (pyo3, cxx) are built once for all crates and kept between
        # runs; the crate itself is built from the copy.
        "CARGO_TARGET_DIR": str(ROOT / "target" / "listings"),
        "CCACHE_BASEDIR": str(tmp_path),
        "CXX": "ccache c++" if shutil.which("ccache") else "c++",
    }
    # A wheel is kept under its build key: a later run with the same crate, toolchain and
    # torch installs it instead of building it again (one build per change, not per run).
    key = build_key(ROOT / "listings" / stage)
    built = ROOT / "target" / "listings" / "wheels" / f"{stage}-{key}"
    if not built.is_dir():
        with one_crate_build_at_a_time(crate):
            build = subprocess.run([str(VENV / "bin" / "maturin"), "build", "--release", "-o", str(tmp_path / "wheels")],
                                   cwd=crate, env=env, capture_output=True, text=True)
        assert build.returncode == 0, build.stdout + build.stderr
        assert built_from(build.stderr, "torch-openreg", crate), build.stderr
        shutil.copytree(tmp_path / "wheels", str(built) + ".tmp", dirs_exist_ok=True)
        os.replace(str(built) + ".tmp", built)

    # A scratch environment that sees torch and pytest (through a .pth to our venv) but
    # this crate's torch_openreg instead of the repository's.
    scratch = tmp_path / "env"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(scratch)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(scratch), "platbase": str(scratch)}))
    (site / "_parent_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    [wheel] = built.glob("*.whl")
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)

    # The stages before "autoload" declare no entry point: they are imported explicitly.
    test_env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0" if stage in ("device", "hooks", "runtime") else "1",
                # Inductor's cache, per build key: what a crate compiled is reused until it changes.
                "TORCHINDUCTOR_CACHE_DIR": str(ROOT / "target" / "listings" / "inductor-cache" / f"{stage}-{key}")}
    # Its tests, once per build key: a crate whose tests passed with the same files (tests
    # included), toolchain, torch, Python and requirements passed them; the record is kept
    # beside the wheel. A fresh clone (CI) runs them all; OPENREG_RERUN_CRATE_TESTS=1 forces.
    record = built / f"tests-passed-{hashlib.sha256((ROOT / 'requirements.txt').read_bytes()).hexdigest()[:12]}"
    if not record.exists() or os.environ.get("OPENREG_RERUN_CRATE_TESTS") == "1":
        tests = subprocess.run([str(scratch / "bin" / "python"), "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "tests"], cwd=crate, env=test_env, capture_output=True, text=True, timeout=1200)
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert " passed" in tests.stdout
        record.write_text(tests.stdout.strip().splitlines()[-1] + "\n")
    assert " passed" in record.read_text() and " failed" not in record.read_text()

    # The book's blocks that say they run on this crate run here, as printed (the Quick
    # start's, on listings/device). Not from the crate's directory: its sources would shadow
    # the installed wheel (`maturin develop` makes them one for the reader).
    for block in BOOK_BLOCKS:
        if block.environment == stage:
            failure = run(block, ROOT, python=str(scratch / "bin" / "python"), cwd=tmp_path, env=test_env)
            assert failure is None, failure
# ANCHOR_END: copy_out


def test_the_quick_start_runs_on_the_crate_it_builds():
    quick_start = [b for b in BOOK_BLOCKS if b.path.name == "quick-start.md"]
    assert len(quick_start) >= 3 and {b.environment for b in quick_start} == {"device"}


def test_the_compile_chapters_error_table_is_what_the_crates_tests_produce():
    """Each error in the torch.compile chapter's table comes from a test of listings/compile
    that removes the piece the table names (MISSING), and each such test has its row."""
    import ast

    source = (ROOT / "listings/compile/tests/test_compile.py").read_text()
    [missing] = [node.value for node in ast.parse(source).body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MISSING"]
    errors = [ast.literal_eval(value.elts[1]) for value in missing.values]
    chapter = (ROOT / "src/compile.md").read_text()
    table = chapter.split("### When a piece is missing", 1)[1].split("```", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(errors), (rows, errors)
    for error in errors:
        assert sum(error in row for row in rows) == 1, f"no row of the table shows {error!r}"
