"""Inductor's Triton path (OPENREG_INDUCTOR=triton): triton_suite.py, run in processes of its
own. Triton chooses its interpreter when it is imported, so the path cannot be switched on in
this process; and in its own process no C++-path replacement of Inductor's functions is ever
installed, which the suite checks."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).with_name("triton_suite.py")
# Halves of about equal cost, so that the two workers share them.
GROUPS = {"matrix": "matches_eager_cpu", "rest": "not matches_eager_cpu"}


@pytest.mark.parametrize("group", GROUPS)
def test_triton_path(group):
    env = {**os.environ, "OPENREG_INDUCTOR": "triton"}
    env.pop("TRITON_INTERPRET", None)  # the package sets it
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "-k", GROUPS[group]],
        env=env, capture_output=True, text=True, timeout=900)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and not re.search(r"skipped|failed|error", summary), summary
    print(summary)
