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
        print(a, b, any("runs on the host" in str(w.message) for w in caught))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[3, 4] [[1.0, 3.0], [2.0, 4.0]] True", out.stderr


def test_abs_backward():
    x = torch.tensor([-2.0, 3.0], device="openreg", requires_grad=True)
    x.abs().sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0]


def test_per_operator_fallback_is_the_kernel_of_sub():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::sub.Tensor", "PrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::mul.Tensor", "PrivateUse1")
    x, y = torch.randn(4), torch.randn(4)
    assert torch.equal(torch.sub(x.openreg(), y.openreg(), alpha=3).cpu(), torch.sub(x, y, alpha=3))
    with pytest.raises(RuntimeError, match="found at least two devices, openreg:0 and openreg:1"):
        torch.sub(x.openreg(0), y.openreg(1))


def test_blocklisted_operators_raise_instead_of_falling_back():
    code = "import torch; x = torch.ones(2, device='openreg'); print((x + x).cpu().tolist()); x * x"
    env = {**os.environ, "OPENREG_FALLBACK_BLOCKLIST": "aten::mul.out"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[2.0, 2.0]"
    assert ("NotImplementedError: Operator 'aten::mul.out' is not implemented for device openreg "
            "and may not fall back to the CPU") in out.stderr
