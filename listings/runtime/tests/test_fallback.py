"""The fallback reports what reaches it: counts, a warning per operator, a blocklist."""

import os
import subprocess
import sys

import pytest
import torch
import torch_openreg  # noqa: F401  (before the Autoload stage, the backend is imported)


def test_fallback_counts_name_what_ran_on_the_cpu():
    x = torch.ones(3, device="openreg")
    torch.openreg.reset_fallback_counts()
    torch.atan2(x, x)
    torch.atan2(x, x, out=torch.empty(3, device="openreg"))
    x.exp()
    # A structured operator's functional form reaches the fallback as its out= overload.
    assert torch.openreg.fallback_counts() == {"aten::atan2.out": 2, "aten::exp.out": 1}
    torch.openreg.reset_fallback_counts()
    assert torch.openreg.fallback_counts() == {}


def run(code, **env):
    # -P: the installed package, not the source directory next to the tests.
    return subprocess.run([sys.executable, "-P", "-c", "import torch, torch_openreg\n" + code],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("entry", ["aten::atan2", "aten::atan2.out"])
def test_the_blocklist_takes_a_name_or_one_overload(entry):
    code = "x = torch.ones(2, device='openreg'); torch.atan2(x, x, out=torch.empty(2, device='openreg'))"
    result = run(code, OPENREG_FALLBACK_BLOCKLIST=entry)
    assert "NotImplementedError: Operator 'aten::atan2.out' is not implemented for device openreg" in result.stderr
    assert run(code, OPENREG_FALLBACK_BLOCKLIST="aten::atan2.Tensor").returncode == 0


def test_the_warning_names_each_operator_once():
    code = ("import warnings\nx = torch.ones(2, device='openreg')\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    torch.atan2(x, x); torch.atan2(x, x)\n"
            "print([str(w.message) for w in caught])")
    result = run(code, OPENREG_WARN_FALLBACK="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("aten::atan2.out has no openreg kernel") == 1, result.stdout
    assert "aten::atan2" not in run(code).stdout
