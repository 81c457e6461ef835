"""Autocast policies and a GradScaler training loop, against the CPU."""

import pytest
import torch


# ANCHOR: tests
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_policies(dtype):
    assert torch.openreg.amp.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    a = torch.randn(4, 4).openreg()
    with torch.autocast("openreg", dtype=dtype):
        assert (a @ a).dtype == dtype
        assert torch.nn.functional.linear(a, a).dtype == dtype
        assert torch.asin(a.to(dtype)).dtype == torch.float32
        assert (a + a).dtype == torch.float32  # no policy: unchanged
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.functional.binary_cross_entropy(a.sigmoid(), a.sigmoid())


def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)).to(device)
    x = torch.randn(128, 10)
    y = x[:, :3].argmax(1).to(device)
    x = x.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    scaler = torch.amp.GradScaler(device)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_grad_scaler_training_converges_like_cpu():
    dev, cpu = train("openreg"), train("cpu")
    assert dev[-1] < 0.6 * dev[0]
    assert dev[-1] == pytest.approx(cpu[-1], rel=0.1, abs=0.02)
# ANCHOR_END: tests
