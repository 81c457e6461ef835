"""The appendix "Starting your own backend", done as it says in a scratch directory: copy
listings/operators, uninstall torch_openreg, rename to `mydev`, add `sub` with the patch the
appendix shows, build with `maturin develop`, and run the crate's tests."""

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, build_key, built_from, one_crate_build_at_a_time

VENV = ROOT / ".venv"
CHAPTER = ROOT / "src" / "own-backend.md"


def environment_without_openreg(scratch: Path) -> Path:
    """A virtual environment with everything of ours except torch_openreg: step 1's
    `pip uninstall torch_openreg`, without touching the repository's environment."""
    subprocess.run([sys._base_executable, "-m", "venv", str(scratch)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(scratch), "platbase": str(scratch)}))
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        name = entry.name.lower().lstrip("_")
        if name.startswith("torch_openreg") or name.startswith(("pip", "setuptools")):
            continue
        if not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    return scratch


def names_left(crate: Path) -> list:
    """Lines that still say openreg, other than the README and paths into this repository."""
    sys.path.insert(0, str(ROOT / "listings"))
    from rename import REPOSITORY_PATH

    left = []
    for path in sorted(crate.rglob("*")):
        if path.is_file() and path.name != "README.md" and "target" not in path.parts:
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if "openreg" in REPOSITORY_PATH.sub("", line).lower():
                    left.append(f"{path.relative_to(crate)}:{n}: {line}")
    return left


STAGES = sorted(p.name for p in (ROOT / "listings").iterdir() if (p / "Cargo.toml").exists())


@pytest.mark.parametrize("stage", STAGES)
def test_rename_changes_names_and_nothing_else(stage, tmp_path):
    source = ROOT / "listings" / stage
    crate = tmp_path / stage
    shutil.copytree(source, crate, ignore=shutil.ignore_patterns("target", "__pycache__", "*.so", "Cargo.lock"))
    renamed = subprocess.run([sys.executable, str(ROOT / "listings" / "rename.py"), str(crate), "mydev"],
                             capture_output=True, text=True)
    assert renamed.returncode == 0, renamed.stderr
    assert names_left(crate) == []
    # Prose stays the book's: the README, and every path into this repository a comment cites.
    assert (crate / "README.md").read_text() == (source / "README.md").read_text()
    cited = subprocess.run(["grep", "-rhoE", r"openreg/(torch|runtime|python)[[:alnum:]_./-]*", "."],
                           cwd=source, capture_output=True, text=True).stdout.split()
    kept = subprocess.run(["grep", "-rhoE", r"openreg/(torch|runtime|python)[[:alnum:]_./-]*", "."],
                          cwd=crate, capture_output=True, text=True).stdout.split()
    assert sorted(cited) == sorted(kept) and cited, "paths into the repository are kept"
    # The renamed package is still valid Python, and its pairs agree.
    assert subprocess.run([sys.executable, "-m", "compileall", "-q", str(crate / "torch_mydev")]).returncode == 0
    pyproject = (crate / "pyproject.toml").read_text()
    assert 'module-name = "torch_mydev._C"' in pyproject and 'name = "torch_mydev"' in pyproject
    assert '#include "torch-mydev/src/ffi.rs.h"' in (crate / "csrc" / "Mydev.h").read_text()
    assert 'rename_privateuse1_backend("mydev")' in (crate / "torch_mydev" / "__init__.py").read_text()


def test_the_appendix_names_the_commands_this_test_runs():
    text = CHAPTER.read_text()
    for command in ["cp -r listings/operators ~/mybackend", "pip uninstall -y torch_openreg",
                    "python3 listings/rename.py ~/mybackend mydev", "maturin develop --release",
                    "pytest -q tests", "git apply"]:
        assert command in text, f"src/own-backend.md no longer says `{command}`"


def test_rename_then_first_op_then_build_and_test(tmp_path):
    crate = tmp_path / "mydev"
    shutil.copytree(ROOT / "listings" / "operators", crate, copy_function=shutil.copy,
                    ignore=shutil.ignore_patterns("target", "__pycache__"))
    env = environment_without_openreg(tmp_path / "venv")

    renamed = subprocess.run([sys.executable, str(ROOT / "listings" / "rename.py"), str(crate), "mydev"],
                             capture_output=True, text=True)
    assert renamed.returncode == 0, renamed.stderr
    assert names_left(crate) == []
    assert (crate / "torch_mydev" / "mydev.py").exists() and (crate / "csrc" / "Mydev.h").exists()

    patched = subprocess.run(["git", "apply", str(ROOT / "listings" / "first-op.patch")], cwd=crate,
                             capture_output=True, text=True)
    assert patched.returncode == 0, f"listings/first-op.patch no longer applies:\n{patched.stderr}"

    key = build_key(crate)
    build_env = {
        **os.environ,
        "VIRTUAL_ENV": str(env),
        "PATH": f"{env / 'bin'}:{os.environ['PATH']}",
        "CARGO_TARGET_DIR": str(ROOT / "target" / "listings"),
        "CCACHE_BASEDIR": str(tmp_path),
    }
    build_env.pop("CXX", None)  # the crate's build.rs picks ccache by itself
    # The reader's `maturin develop`, once per build key: its wheel is kept (`maturin build`
    # after it only packs what cargo just built), and a later run with the same files,
    # toolchain and torch installs that instead, as test_listings.py does for the crates.
    kept = ROOT / "target" / "listings" / "wheels" / f"renamed-{key}"
    if not list(kept.glob("*.whl")):
        with one_crate_build_at_a_time(crate):
            build = subprocess.run([str(VENV / "bin" / "maturin"), "develop", "--release"], cwd=crate,
                                   env=build_env, capture_output=True, text=True, timeout=1200)
            assert build.returncode == 0, build.stdout + build.stderr
            assert built_from(build.stderr, "torch-mydev", crate), build.stderr
            packed = subprocess.run([str(VENV / "bin" / "maturin"), "build", "--release", "-o", str(tmp_path / "wheel")],
                                    cwd=crate, env=build_env, capture_output=True, text=True, timeout=300)
            assert packed.returncode == 0, packed.stdout + packed.stderr
        [wheel] = (tmp_path / "wheel").glob("*.whl")
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, kept / f"{wheel.name}.tmp")
        os.replace(kept / f"{wheel.name}.tmp", kept / wheel.name)
    else:
        [wheel] = kept.glob("*.whl")
        install = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                  str(wheel)], capture_output=True, text=True, timeout=300)
        assert install.returncode == 0, install.stdout + install.stderr

    # Its tests, once per build key, as the chapter crates' (test_listings.py): a renamed crate
    # with the same files, toolchain, torch and requirements passed them. A fresh clone (CI)
    # runs them; OPENREG_RERUN_CRATE_TESTS=1 forces.
    requirements = hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()[:12]
    record = kept / f"tests-passed-{requirements}"
    if not record.exists() or os.environ.get("OPENREG_RERUN_CRATE_TESTS") == "1":
        tests = subprocess.run([str(env / "bin" / "python"), "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "tests"], cwd=crate, env=build_env, capture_output=True, text=True, timeout=900)
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert " passed" in tests.stdout and " failed" not in tests.stdout
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(tests.stdout.strip().splitlines()[-1] + "\n")
    assert " passed" in record.read_text() and " failed" not in record.read_text()
    # The new operator has its own kernel, and nothing of OpenReg was loaded.
    check = subprocess.run(
        [str(env / "bin" / "python"), "-P", "-c",
         "import sys, torch; x = torch.ones(3, device='mydev');"
         "print(torch._C._dispatch_has_kernel_for_dispatch_key('aten::sub.Tensor', 'PrivateUse1'),"
         " (x - x).device, 'torch_openreg' in sys.modules)"],
        env=build_env, capture_output=True, text=True, timeout=300)
    assert check.stdout.split() == ["True", "mydev:0", "False"], check.stdout + check.stderr


def test_rename_refuses_a_taken_or_malformed_name(tmp_path):
    crate = tmp_path / "c"
    shutil.copytree(ROOT / "listings" / "device", crate)
    for bad in ["cuda", "My-Dev", "openreg"]:
        run = subprocess.run([sys.executable, str(ROOT / "listings" / "rename.py"), str(crate), bad],
                             capture_output=True, text=True)
        assert run.returncode == 2 and f"invalid device name {bad!r}" in run.stderr
    run = subprocess.run([sys.executable, str(ROOT / "listings" / "rename.py"), str(tmp_path), "mydev"],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "not an unrenamed chapter crate" in run.stderr
