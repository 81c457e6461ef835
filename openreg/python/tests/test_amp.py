"""Automatic mixed precision: the policy lists of the AutocastPrivateUse1 key, both autocast
dtypes, and a GradScaler training loop that converges like its CPU twin."""

import pytest
import torch

LOWER = [torch.float16, torch.bfloat16]


def test_supported_dtypes_and_default():
    assert torch.openreg.amp.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.openreg.get_amp_supported_dtype is torch.openreg.amp.get_amp_supported_dtype
    assert torch.get_autocast_dtype("openreg") == torch.float16
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", "AutocastPrivateUse1")


@pytest.mark.parametrize("dtype", LOWER)
def test_lower_precision_ops_cast_down(dtype):
    a, w, b = (torch.randn(s).openreg() for s in [(4, 8), (3, 8), (3,)])
    with torch.autocast("openreg", dtype=dtype):
        assert torch.is_autocast_enabled("openreg")
        assert torch.get_autocast_dtype("openreg") == dtype
        for result in [a @ a.t(), torch.mm(a, a.t()), torch.addmm(b, a, w.t()),
                       torch.bmm(a[None], a.t()[None]), torch.nn.functional.linear(a, w, b),
                       torch.matmul(a, a.t())]:
            assert result.dtype == dtype
        expected = torch.nn.functional.linear(a.cpu().to(dtype), w.cpu().to(dtype), b.cpu().to(dtype))
        got = torch.nn.functional.linear(a, w, b)
        torch.testing.assert_close(got.cpu(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", LOWER)
def test_fp32_ops_cast_up_and_others_pass_through(dtype):
    h = torch.rand(5).to(dtype).openreg()
    with torch.autocast("openreg", dtype=dtype):
        assert torch.asin(h).dtype == torch.float32
        assert torch.exp(h).dtype == torch.float32
        assert torch.nn.functional.mse_loss(h, h).dtype == torch.float32
        assert (h + h).dtype == dtype  # no policy: unchanged
        assert torch.relu(h).dtype == dtype
        assert torch.cat([h, h.float()]).dtype == torch.float32  # promote
    assert torch.asin(h).dtype == dtype  # outside autocast: nothing changes


def test_banned_ops_name_the_safe_alternative():
    p = torch.rand(4).openreg()
    with torch.autocast("openreg"):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.functional.binary_cross_entropy(p, p)
        torch.nn.functional.binary_cross_entropy_with_logits(p, p)  # allowed, in float32


def test_autocast_is_per_device_type():
    a = torch.randn(3, 3)
    with torch.autocast("openreg"):
        assert (a @ a).dtype == torch.float32  # CPU tensors are not openreg's business
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a.openreg() @ a.openreg()).dtype == torch.float32


def test_autocast_gradients_flow_back_in_float32():
    w = torch.randn(4, 4).openreg().requires_grad_()
    x = torch.randn(2, 4).openreg()
    with torch.autocast("openreg", dtype=torch.bfloat16):
        y = x @ w
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32
    torch.testing.assert_close(w.grad.cpu(), x.cpu().t() @ torch.ones(2, 4), rtol=2e-2, atol=2e-2)


# ANCHOR: train
def train(device, dtype, steps=60):
    """A small classifier trained with autocast and a GradScaler; returns the losses."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model.to(device)
    x = torch.randn(256, 20)
    y = (x[:, :4].argmax(1)).to(device)  # a learnable rule
    x = x.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, scaler.get_scale()
# ANCHOR_END: train


@pytest.mark.parametrize("dtype", LOWER)
def test_grad_scaler_training_converges_like_cpu(dtype):
    dev_losses, dev_scale = train("openreg", dtype)
    cpu_losses, cpu_scale = train("cpu", dtype)
    assert dev_losses[-1] < 0.5 * dev_losses[0]
    assert dev_losses[-1] == pytest.approx(cpu_losses[-1], rel=0.1, abs=0.02)
    assert dev_scale == cpu_scale


def test_grad_scaler_skips_steps_with_inf_gradients():
    w = torch.ones(2).openreg().requires_grad_()
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = torch.amp.GradScaler("openreg", init_scale=4.0)
    scaler.scale((w * torch.tensor([float("inf"), 1.0]).openreg()).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert w.cpu().tolist() == [1.0, 1.0]  # the step was skipped
    assert scaler.get_scale() == 2.0  # and the scale backed off
