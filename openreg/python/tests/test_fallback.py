"""Operators without an openreg kernel run through the global CPU fallback."""

import pytest
import torch


def check(fn, *cpu_args):
    expected = fn(*cpu_args)
    got = fn(*[a.to("openreg") if isinstance(a, torch.Tensor) else a for a in cpu_args])
    if isinstance(expected, torch.Tensor):
        assert got.device.type == "openreg"
        torch.testing.assert_close(got.cpu(), expected)
    else:
        for g, e in zip(got, expected):
            assert g.device.type == "openreg"
            torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a + b,
        lambda a, b: a - 2 * b,
        lambda a, b: torch.where(a > b, a, b),
        lambda a, b: torch.cat([a, b], dim=1),
        lambda a, b: a @ b.t(),
        lambda a, b: torch.nn.functional.softmax(a, dim=-1),
        lambda a, b: a.sum(dim=0),
        lambda a, b: a.max(dim=1),
        lambda a, b: torch.sort(a, dim=1),
        lambda a, b: a.exp().log1p(),
        lambda a, b: a.t()[1:3] * b.t()[:2],
    ],
)
def test_ops_match_cpu(fn):
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    check(fn, a, b)


def test_inplace_ops_and_out_variants():
    cpu = torch.randn(6)
    dev = cpu.to("openreg:1")
    dev.mul_(3).add_(1)
    cpu.mul_(3).add_(1)
    torch.testing.assert_close(dev.cpu(), cpu)
    dev.zero_()
    assert dev.cpu().eq(0).all()
    dev.fill_(2.5)
    assert dev.cpu().eq(2.5).all()
    assert dev.device == torch.device("openreg:1")


def test_results_stay_on_the_inputs_device():
    x = torch.ones(3, device="openreg:1")
    assert (x * 2).device == torch.device("openreg:1")
    assert x.sum().device == torch.device("openreg:1")


def test_cpu_scalar_tensors_mix_with_device_tensors():
    x = torch.ones(3, device="openreg")
    assert (x * torch.tensor(2.0)).cpu().tolist() == [2, 2, 2]


def test_mixing_devices_is_an_error():
    a = torch.ones(3, device="openreg:0")
    b = torch.ones(3, device="openreg:1")
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least two devices, openreg:0 and openreg:1!"):
        a + b
    with pytest.raises(RuntimeError, match="openreg:1 and openreg:0"):
        torch.cat([b, a])


def test_mlp_training_step_matches_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    dev_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to("openreg")
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    losses = {}
    for name, model, dev in [("cpu", cpu_model, "cpu"), ("openreg", dev_model, "openreg")]:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
        losses[name] = loss.item()
        assert all(p.grad.device.type == dev for p in model.parameters())
    assert losses["openreg"] == pytest.approx(losses["cpu"], rel=1e-5)
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()):
        torch.testing.assert_close(p_dev.cpu(), p_cpu)


def test_operands_on_the_cpu_are_refused_as_cuda_refuses_them():
    x = torch.randn(4)
    mask = x > 0
    d = x.to("openreg")
    # where()'s condition on the CPU, an operand on each side (once a segmentation fault).
    for args in [(mask, x, d), (mask.to("openreg"), x, d), (mask, d, x)]:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.where(*args)
    # A native kernel and the fallback (vdot has no kernel of ours) say the same.
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.vdot(d, x)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(d, x, out=torch.empty(4))
    # 0-dim CPU tensors are scalars, and indexing takes CPU indices, as on CUDA.
    torch.testing.assert_close(torch.atan2(d, torch.tensor(2.0)).cpu(), torch.atan2(x, torch.tensor(2.0)))
    assert torch.equal(d[torch.tensor([0, 2])].cpu(), x[torch.tensor([0, 2])])


def test_the_fallback_keeps_aliasing_as_on_the_device():
    """Operands over one device storage share one host buffer: CPU's overlap errors hold, and
    a write through one view shows through another."""
    a = torch.arange(6.0, device="openreg")
    i = torch.tensor([0, 1, 2], device="openreg")
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
        torch.take(a, i, out=a[:3])  # take has no kernel of ours: the fallback refuses like CPU
    base = torch.zeros(8, device="openreg")
    torch.atan2(base[:4] + 1, base[4:] + 1, out=base[4:])  # a disjoint view of one storage: written in place
    assert base.cpu().tolist() == [0, 0, 0, 0] + [0.7853981852531433] * 4
    # The blocklist takes a bare name for every overload.
    code = ("import torch; x = torch.ones(3, device='openreg')\n"
            "try:\n    torch.special.bessel_j0(x)\nexcept NotImplementedError as e:\n    print('blocked', 'bessel_j0' in str(e))")
    import os, subprocess, sys
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENREG_FALLBACK_BLOCKLIST": "aten::special_bessel_j0"})
    assert run.stdout.strip() == "blocked True", run.stderr
