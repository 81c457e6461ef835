"""Build-time benchmark: a clean build of the backend, and a rebuild after editing one C++
file. Run with `make bench-build` (it takes a few minutes: the clean build is really clean,
in a scratch target directory with ccache disabled)."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"


def build(env):
    start = time.perf_counter()
    subprocess.run(
        [VENV / "bin" / "maturin", "develop", "--release", "--skip-install",
         "-m", "openreg/python/Cargo.toml"],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )
    return time.perf_counter() - start


def main():
    env = {**os.environ, "VIRTUAL_ENV": str(VENV)}
    ccache = subprocess.run(["sh", "-c", "command -v ccache"], capture_output=True).returncode == 0
    env["CXX"] = "ccache c++" if ccache else "c++"
    build(env)  # make sure the normal target dir is up to date

    # One C++ file edited (a new comment, so ccache cannot reuse the old object).
    source = ROOT / "openreg/torch/csrc/runtime/Guard.cpp"
    original = source.read_text()
    try:
        source.write_text(original + f"\n// edited {time.time()}\n")
        edit = build(env)
    finally:
        source.write_text(original)
    build(env)

    with tempfile.TemporaryDirectory() as target:
        clean_env = {**env, "CARGO_TARGET_DIR": target, "CCACHE_DISABLE": "1"}
        clean = build(clean_env)

    print(f"rebuild after editing one C++ file: {edit:6.1f} s   (target < 20 s)")
    print(f"clean build, ccache disabled:       {clean:6.1f} s   (target < 120 s)")


if __name__ == "__main__":
    sys.exit(main())
