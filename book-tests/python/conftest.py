import contextlib
import fcntl
import fnmatch
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))


@contextlib.contextmanager
def one_crate_build_at_a_time(crate: Path):
    """Chapter crates share one cargo target directory (their dependencies are built once), and
    cargo gives every copy of a crate named `torch-openreg` the same artifacts, judged fresh by
    modification time. A copy made while another crate was building is older than that build's
    output, and cargo would hand it the other crate's library. So builds take turns, and a
    crate's files are touched once its turn has come: newer than anything built before."""
    lock_path = ROOT / "target" / "listings" / ".build-lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for path in crate.rglob("*"):
                if path.is_file():
                    os.utime(path)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# What a crate's copy leaves behind: build output, caches, and the lock file.
NOT_COPIED = ("target", "__pycache__", "*.so", "Cargo.lock")


def build_key(crate: Path) -> str:
    """Everything a crate's wheel is built from: its files, the toolchain, torch, maturin.
    A wheel built from the same key is the same wheel; CI, from a fresh clone, builds."""
    venv = ROOT / ".venv"
    digest = hashlib.sha256()
    for path in sorted(crate.rglob("*")):
        relative = path.relative_to(crate)
        if path.is_file() and not any(fnmatch.fnmatch(part, p) for part in relative.parts for p in NOT_COPIED):
            digest.update(str(relative).encode() + b"\0" + path.read_bytes())
    for command in (["rustc", "-V"], [str(venv / "bin" / "maturin"), "-V"],
                    [str(venv / "bin" / "python"), "-c", "import torch, sys; print(torch.__version__, sys.version)"]):
        digest.update(subprocess.run(command, capture_output=True, text=True, check=True).stdout.encode())
    return digest.hexdigest()[:16]


def built_from(log: str, package: str, crate: Path) -> bool:
    """Cargo's own line saying it compiled this copy (not a stale library of another)."""
    return f"Compiling {package} v0.1.0 ({crate})" in log


# The longest tests first (measured from a fresh clone: each builds a crate, then runs its
# suite), handed out one at a time (--maxschedchunk=1 in the Makefile): the last minutes of
# the run are short tests on both workers, not one long test on one.
LONGEST_FIRST = ("copied_out[compile]", "test_rename_then_first_op_then_build_and_test", "copied_out[amp]",
                 "copied_out[autoload]", "test_block[export.md", "copied_out[")


def pytest_collection_modifyitems(items):
    def rank(item):
        return next((i for i, name in enumerate(LONGEST_FIRST) if name in item.nodeid), len(LONGEST_FIRST))
    items.sort(key=rank)  # stable: the rest keep their order
