"""Operators composed of device operators in CPU's formulas (Activation.cpp, Loss.cpp,
nll_loss2d in LossNLL.cpp): log_sigmoid, GLU, PReLU's kernels, smooth L1 and Huber losses and
the spatial NLL loss, forward and backward, against CPU over layouts, dtypes, reductions,
out=, empty and 0-dim inputs and both devices, with no fallback; bad input gives CPU's error."""

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.transpose(-1, -2),
    "strided": lambda x: x[..., ::2, :],
}


def pair(shape, dtype, device, seed=0, layout="contiguous"):
    g = torch.Generator().manual_seed(seed)
    cpu = LAYOUTS[layout]((torch.randn(shape, generator=g) * 3).to(dtype))
    dev = LAYOUTS[layout]((torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype).to(device))
    return cpu.requires_grad_(), dev.requires_grad_()


def compare(fn, cpu, dev, dtype):
    torch.openreg.reset_fallback_counts()
    got = fn(*dev)
    if got.requires_grad:
        got.backward(torch.ones_like(got))
    reached = torch.openreg.fallback_counts()
    want = fn(*cpu)
    if want.requires_grad:
        want.backward(torch.ones_like(want))
    assert reached == {}, reached
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **tol)
    for d, c in zip(dev, cpu):
        if c.grad is not None:
            torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_log_sigmoid_glu_prelu_match_cpu(layout, dtype, device):
    c, d = pair((4, 8, 6), dtype, device, layout=layout)
    compare(F.logsigmoid, [c], [d], dtype)
    for dim in (-1, 1):
        c.grad, d.grad = None, None
        compare(lambda x: F.glu(x, dim), [c], [d], dtype)
    wc, wd = pair((c.size(1),), dtype, device, seed=1)
    c.grad, d.grad = None, None
    compare(F.prelu, [c, wc], [d, wd], dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_0_dim_and_out(device):
    for shape in [(0, 4), ()]:
        c, d = pair(shape, torch.float32, device)
        compare(F.logsigmoid, [c], [d], torch.float32)
    c, d = pair((0, 4), torch.float32, device)
    compare(F.glu, [c], [d], torch.float32)
    c, d = pair((3, 4), torch.float32, device)
    out = torch.empty(0, device=device)
    assert torch.ops.aten.glu.out(d.detach(), 1, out=out) is out
    torch.testing.assert_close(out.cpu(), F.glu(c.detach(), 1))
    out, buffer = torch.empty(0, device=device), torch.empty(0, device=device)
    torch.ops.aten.log_sigmoid_forward.output(d.detach(), output=out, buffer=buffer)
    torch.testing.assert_close(out.cpu(), F.logsigmoid(c.detach()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("loss", ["smooth_l1", "huber"])
def test_smooth_l1_and_huber_match_cpu(loss, reduction, dtype, device):
    a_cpu, a = pair((5, 7), dtype, device, seed=2, layout="transposed")
    b_cpu, b = pair((5, 7), dtype, device, seed=3, layout="transposed")
    b_cpu.data[0, 0], b.data[0, 0] = a_cpu.data[0, 0], a.data[0, 0]  # a zero difference
    for bound in [0.0, 0.5, 2.0]:
        if loss == "smooth_l1":
            fn = lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=bound)
        elif bound == 0.0:
            continue
        else:
            fn = lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=bound)
        for x in (a_cpu, b_cpu, a, b):
            x.grad = None
        compare(fn, [a_cpu, b_cpu], [a, b], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_spatial_nll_and_cross_entropy_match_cpu(reduction, dtype, device):
    x_cpu, x = pair((2, 5, 3, 4), dtype, device, seed=4)
    target = torch.randint(0, 5, (2, 3, 4), generator=torch.Generator().manual_seed(5))
    target[0, 0, 0] = -100
    weight = torch.rand(5, generator=torch.Generator().manual_seed(6)).to(dtype)
    compare(lambda x, t: F.cross_entropy(x, t, reduction=reduction), [x_cpu, target], [x, target.to(device)], dtype)
    x_cpu.grad, x.grad = None, None
    target[target == -100] = 2
    compare(lambda x, t, w: F.nll_loss(x.log_softmax(1), t, weight=w, reduction=reduction, ignore_index=2),
            [x_cpu, target, weight], [x, target.to(device), weight.to(device)], dtype)


def errors_match(fn, device):
    with pytest.raises(Exception) as want:
        fn("cpu")
    with pytest.raises(type(want.value)) as got:
        fn(device)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_gives_cpu_errors(device):
    errors_match(lambda d: F.glu(torch.ones(3, 5, device=d)), device)
    errors_match(lambda d: F.glu(torch.ones((), device=d)), device)
    errors_match(lambda d: F.smooth_l1_loss(torch.ones(3, device=d), torch.ones(3, device=d), beta=-1.0), device)
    errors_match(lambda d: F.huber_loss(torch.ones(3, device=d), torch.ones(3, device=d), delta=0.0), device)
    errors_match(lambda d: torch.ops.aten.nll_loss2d_forward(torch.ones(2, 3, 4, 4, device=d),
                                                            torch.zeros(2, 4, 5, dtype=torch.long, device=d), None, 1, -100), device)
    errors_match(lambda d: torch.ops.aten.nll_loss2d_forward(torch.ones(2, 3, 4, device=d),
                                                            torch.zeros(2, 4, 4, dtype=torch.long, device=d), None, 1, -100), device)
    # A class index is data on the device: the stream reports CPU's error at its next synchronize.
    with pytest.raises(IndexError, match=r"Target 7 is out of bounds\.$"):
        F.cross_entropy(torch.ones(2, 3, 4, 4), torch.full((2, 4, 4), 7))
    with pytest.raises(IndexError, match=r"Target 7 is out of bounds\.$"):
        F.cross_entropy(torch.ones(2, 3, 4, 4, device=device), torch.full((2, 4, 4), 7, device=device))
        torch.openreg.synchronize(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm_and_dot_match_cpu(dtype, device):
    s_cpu, s = pair((1, 3, 5), dtype, device, seed=7)
    a_cpu, a = pair((4, 3, 6), dtype, device, seed=8)
    b_cpu, b = pair((4, 5, 6), dtype, device, seed=9, layout="transposed")  # (4, 6, 5), strided
    compare(lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=2.0), [s_cpu, a_cpu, b_cpu], [s, a, b], dtype)
    with torch.no_grad():
        nan = torch.full((4, 3, 5), float("nan"), dtype=dtype)
        got = torch.baddbmm(nan.to(device), a, b, beta=0.0)  # beta 0: self (its NaNs too) ignored
        torch.testing.assert_close(got.cpu(), torch.baddbmm(nan, a_cpu, b_cpu, beta=0.0), rtol=2e-2, atol=2e-2)
        out = torch.empty(0, dtype=dtype, device=device)
        assert torch.baddbmm(s, a, b, out=out) is out
        inplace = torch.zeros(4, 3, 5, dtype=dtype, device=device).baddbmm_(a, b)
        torch.testing.assert_close(inplace.cpu(), torch.baddbmm(torch.zeros(4, 3, 5, dtype=dtype), a_cpu, b_cpu),
                                   rtol=2e-2, atol=2e-2)
        assert torch.baddbmm(s, a[:0], b[:0]).shape == (0, 3, 5)
    x_cpu, x = pair((2, 9), dtype, device, seed=10)
    compare(lambda x: torch.dot(x[0], x[1, ::1]), [x_cpu], [x], dtype)
    compare(lambda x: torch.dot(x[:, 1], x[:, 2]), [x_cpu], [x], dtype)  # strided
    assert torch.dot(x[0, :0], x[1, :0]).item() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_matches_cpu(reduction, device):
    g = torch.Generator().manual_seed(11)
    p = torch.rand(4, 5, generator=g)
    p[0, 0], p[0, 1] = 0.0, 1.0  # the clamped logarithms
    target, weight = torch.rand(4, 5, generator=g), torch.rand(5, generator=g)
    p_cpu, p_dev = p.clone().requires_grad_(), p.to(device).requires_grad_()
    compare(lambda p, t, w: F.binary_cross_entropy(p, t, weight=w, reduction=reduction),
            [p_cpu, target, weight], [p_dev, target.to(device), weight.to(device)], torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_of_no_rows_matches_cpu(device):
    c, d = pair((0, 5), torch.float32, device)
    ln_cpu = torch.nn.LayerNorm(5)
    ln = torch.nn.LayerNorm(5).to(device)
    compare(lambda x: ln(x).sum() if x.device.type != "cpu" else ln_cpu(x).sum(), [c], [d], torch.float32)
    assert torch.equal(ln.weight.grad.cpu(), ln_cpu.weight.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_more_bad_input_gives_cpu_errors(device):
    errors_match(lambda d: F.binary_cross_entropy(torch.full((3,), 1.5, device=d), torch.ones(3, device=d)), device)
    errors_match(lambda d: torch.dot(torch.ones(3, device=d), torch.ones(4, device=d)), device)
    errors_match(lambda d: torch.dot(torch.ones(3, 1, device=d), torch.ones(3, device=d)), device)
    errors_match(lambda d: torch.dot(torch.ones(3, device=d), torch.ones(3, dtype=torch.float16, device=d)), device)
    errors_match(lambda d: torch.baddbmm(torch.ones(2, 3, 5, device=d), torch.ones(2, 3, 4, device=d),
                                         torch.ones(2, 5, 5, device=d)), device)
