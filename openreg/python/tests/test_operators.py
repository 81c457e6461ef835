"""The registration paths for operators: global fallback, per-operator fallback, blocklist,
and a DispatchStub kernel (abs) whose body is Rust."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch


@pytest.mark.parametrize("shape", [(0,), (), (5,), (3, 4), (1 << 18,)])
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_abs_through_the_stub_matches_cpu(shape, device):
    x = torch.randn(shape)
    d = x.to(device)
    assert torch.equal(torch.abs(d).cpu(), x.abs())
    out = torch.empty_like(d)
    torch.abs(d, out=out)
    assert torch.equal(out.cpu(), x.abs())
    d.abs_()
    assert torch.equal(d.cpu(), x.abs())


def test_abs_kernel_is_queued_on_the_current_stream():
    x = torch.randn(1 << 20, device="openreg")
    s = torch.Stream(device="openreg")
    with s:
        torch.openreg._sleep(100)
        y = x.abs()
        assert not s.query()
        assert torch.equal(y.cpu(), x.cpu().abs())


def test_abs_of_other_dtypes_and_layouts_is_correct_and_says_so():
    code = textwrap.dedent("""
        import warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = torch.tensor([-3, 4], device="openreg").abs().cpu().tolist()
            b = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], device="openreg").t().abs().cpu().tolist()
        counts = torch.openreg.fallback_counts()
        print(a, b, counts.get("aten::abs (Long)"), "aten::abs (Float)" in counts,
              any("aten::abs (Long) has no openreg kernel" in str(w.message) for w in caught))
    """)
    env = {**os.environ, "OPENREG_WARN_FALLBACK": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[3, 4] [[1.0, 3.0], [2.0, 4.0]] 1 False True", out.stderr


def test_abs_backward():
    x = torch.tensor([-2.0, 3.0], device="openreg", requires_grad=True)
    x.abs().sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0]


def test_per_operator_fallback_is_the_kernel_of_addcmul():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::addcmul", "PrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::addcdiv", "PrivateUse1")
    x, y, z = torch.randn(4), torch.randn(4), torch.randn(4)
    torch.openreg.reset_fallback_counts()
    got = torch.addcmul(x.openreg(), y.openreg(), z.openreg(), value=3).cpu()
    assert torch.equal(got, torch.addcmul(x, y, z, value=3))
    assert torch.openreg.fallback_counts() == {"aten::addcmul": 1}
    with pytest.raises(RuntimeError, match="found at least two devices, openreg:0 and openreg:1"):
        torch.addcmul(x.openreg(0), y.openreg(1), z.openreg(0))


def test_blocklisted_operators_raise_instead_of_falling_back():
    code = "import torch; x = torch.ones(2, device='openreg'); print((x + x).cpu().tolist()); x.lerp(x, 0.5)"
    env = {**os.environ, "OPENREG_FALLBACK_BLOCKLIST": "aten::lerp.Scalar_out"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[2.0, 2.0]"
    assert ("NotImplementedError: Operator 'aten::lerp.Scalar_out' is not implemented for device openreg "
            "and may not fall back to the CPU") in out.stderr
