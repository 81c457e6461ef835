"""Every registration path of this stage, against CPU results."""

import os
import subprocess
import sys

import pytest
import torch


# ANCHOR: tests
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((5,), ()), ((0, 2), (2,))])
def test_structured_add_and_mul_match_cpu(shapes):
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    x, y = a.openreg(), b.openreg()
    torch.testing.assert_close(torch.add(x, y, alpha=2).cpu(), torch.add(a, b, alpha=2))
    torch.testing.assert_close((x * y).cpu(), a * b)
    torch.testing.assert_close((x.t() * 3 if x.dim() == 2 else x * 3).cpu(), a.t() * 3 if a.dim() == 2 else a * 3)
    out = torch.empty(0, device="openreg")
    torch.add(x, y, out=out)
    torch.testing.assert_close(out.cpu(), a + b)


def test_scalars_stay_on_the_kernel_and_other_dtypes_fall_back():
    a = torch.randn(4)
    torch.openreg.reset_fallback_counts()
    torch.testing.assert_close((a.openreg() * 3 + torch.tensor(0.5)).cpu(), a * 3 + 0.5)
    assert torch.openreg.fallback_counts() == {}  # CPU scalars travel to the device as values
    i = torch.arange(4)
    assert torch.equal((i.openreg() * 3 + 1).cpu(), i * 3 + 1)
    assert torch.openreg.fallback_counts() == {"aten::mul.Tensor": 1, "aten::add.Tensor": 1}


def test_errors_match_cpu():
    with pytest.raises(RuntimeError) as cpu:
        torch.ones(2, 3) + torch.ones(4)
    with pytest.raises(RuntimeError) as dev:
        torch.ones(2, 3).openreg() + torch.ones(4).openreg()
    assert str(dev.value) == str(cpu.value)


def test_abs_through_its_stub():
    a = torch.tensor([[-1.0, 2.0], [3.0, -4.0]])
    torch.openreg.reset_fallback_counts()
    assert torch.equal(a.openreg().abs().cpu(), a.abs())
    assert torch.equal(a.openreg().t().abs().cpu(), a.t().abs())  # strided: the same kernel
    assert torch.openreg.fallback_counts() == {}
    assert torch.equal(torch.tensor([-3, 4]).openreg().abs().cpu(), torch.tensor([3, 4]))
    assert torch.openreg.fallback_counts() == {"aten::abs.out": 1}  # int64: on the CPU


def test_custom_op_forward_backward_and_meta():
    x = torch.tensor([-2.0, 0.5, 3.0]).openreg().requires_grad_()
    y = torch.ops.openreg.custom_abs(x)
    assert y.cpu().tolist() == [2.0, 0.5, 3.0]
    y.sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0, 1.0]
    meta = torch.ops.openreg.custom_abs(torch.empty(2, 3, device="meta"))
    assert meta.shape == (2, 3) and meta.device.type == "meta"


def test_per_operator_fallback_and_blocklist():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::addcmul", "PrivateUse1")
    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3)
    got = torch.addcmul(a.openreg(), b.openreg(), c.openreg(), value=2)
    torch.testing.assert_close(got.cpu(), torch.addcmul(a, b, c, value=2))
    code = "import torch; x = torch.ones(2, device='openreg'); x.lerp(x, 0.5)"
    env = {**os.environ, "OPENREG_FALLBACK_BLOCKLIST": "aten::lerp.Scalar_out"}
    # -P: the installed package, not the source directory next to the tests.
    run = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True)
    assert "NotImplementedError: Operator 'aten::lerp.Scalar_out' is not implemented" in run.stderr
# ANCHOR_END: tests
