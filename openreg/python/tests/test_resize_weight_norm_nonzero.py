"""Operators real models reach beyond the zoo: 2-D resizing (interpolate's nearest,
nearest-exact and bilinear modes, forward and backward), weight normalization's fused operator
and its backward, and nonzero. Each against CPU over the correctness matrix (sizes up and down,
odd and wide, given scale factors, channels-last and strided inputs, out=, empty, dtypes, both
devices), with no fallback for the dtypes the kernels compute in."""

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}

# (input [N, C, H, W], interpolate's keyword arguments)
RESIZES = {
    "up2": ((2, 3, 5, 7), dict(scale_factor=2)),
    "down": ((1, 2, 9, 11), dict(size=(4, 5))),
    "odd": ((2, 2, 7, 5), dict(size=(10, 13))),
    "same": ((1, 3, 4, 6), dict(size=(4, 6))),
    "given_scale": ((2, 1, 6, 4), dict(scale_factor=(1.5, 2.5), recompute_scale_factor=False)),
    "wide": ((1, 1, 3, 3000), dict(size=(5, 4001))),
    "one_pixel": ((2, 2, 1, 1), dict(size=(3, 4))),
    "to_one": ((1, 2, 5, 6), dict(size=(1, 1))),
}
MODES = [("nearest", {}), ("nearest-exact", {}), ("bilinear", dict(align_corners=False)),
         ("bilinear", dict(align_corners=True))]


def layout(x, how):
    if how == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if how == "strided":
        wide = torch.empty(*x.shape[:-1], x.shape[-1] * 2, dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("how", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("mode,extra", MODES, ids=["nearest", "nearest-exact", "bilinear", "bilinear-aligned"])
@pytest.mark.parametrize("case", RESIZES)
def test_resize_matches_cpu_forward_and_backward(case, mode, extra, how, dtype, device):
    shape, size = RESIZES[case]
    g = torch.Generator().manual_seed(0)
    x_cpu = torch.randn(shape, generator=g).to(dtype)
    x = layout(x_cpu.to(device), how).requires_grad_()
    x_cpu = layout(x_cpu, how).requires_grad_()
    torch.openreg.reset_fallback_counts()
    y = F.interpolate(x, mode=mode, **size, **extra)
    grad = torch.randn(y.shape, generator=g).to(dtype)
    y.backward(grad.to(device))
    assert torch.openreg.fallback_counts() == {}
    y_cpu = F.interpolate(x_cpu, mode=mode, **size, **extra)
    y_cpu.backward(grad)
    assert y.shape == y_cpu.shape and y.is_contiguous(memory_format=torch.channels_last) == \
        y_cpu.is_contiguous(memory_format=torch.channels_last), "the output's layout is CPU's"
    torch.testing.assert_close(y.detach().cpu(), y_cpu.detach(), **TOL[dtype])
    # Gradients sum several outputs' contributions: a few roundings more in 16-bit types.
    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_resize_out_empty_batch_special_values_and_other_dtypes(device):
    x_cpu = torch.randn(2, 3, 4, 5)
    x_cpu[0, 0, 1, 2] = float("nan")
    x_cpu[1, 2, 0, 0] = float("inf")
    x = x_cpu.to(device)
    torch.openreg.reset_fallback_counts()
    out = torch.empty(0, device=device)
    torch.ops.aten.upsample_nearest2d.out(x, [8, 10], None, None, out=out)
    bilinear_out = torch.empty(0, device=device)
    torch.ops.aten.upsample_bilinear2d.out(x, [7, 9], False, None, None, out=bilinear_out)
    grad_out = torch.empty(0, device=device)
    torch.ops.aten.upsample_bilinear2d_backward.grad_input(
        torch.ones(2, 3, 7, 9, device=device), [7, 9], [2, 3, 4, 5], True, None, None, grad_input=grad_out)
    empty = F.interpolate(torch.empty(0, 3, 4, 5, device=device), scale_factor=2, mode="bilinear")
    assert torch.openreg.fallback_counts() == {}
    torch.testing.assert_close(out.cpu(), torch.ops.aten.upsample_nearest2d(x_cpu, [8, 10], None, None), equal_nan=True)
    torch.testing.assert_close(bilinear_out.cpu(), torch.ops.aten.upsample_bilinear2d(x_cpu, [7, 9], False, None, None),
                               equal_nan=True)
    torch.testing.assert_close(grad_out.cpu(), torch.ops.aten.upsample_bilinear2d_backward(
        torch.ones(2, 3, 7, 9), [7, 9], [2, 3, 4, 5], True, None, None))
    assert empty.shape == (0, 3, 8, 10) and empty.device == torch.device(device)
    # float64 runs CPU's kernel on the device's memory, counted.
    d = torch.randn(1, 1, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(F.interpolate(d.to(device), scale_factor=2, mode="bilinear").cpu(),
                               F.interpolate(d, scale_factor=2, mode="bilinear"))
    assert "aten::upsample_bilinear2d.out" in torch.openreg.fallback_counts() or \
        "aten::upsample_bilinear2d" in str(torch.openreg.fallback_counts())


def test_resize_errors_are_cpus():
    for bad in [dict(size=(0, 4)), dict(size=(-1, 4))]:
        with pytest.raises(RuntimeError) as cpu:
            F.interpolate(torch.randn(1, 1, 3, 3), mode="bilinear", **bad)
        with pytest.raises(type(cpu.value), match=str(cpu.value).split("(")[0][:40]):
            F.interpolate(torch.randn(1, 1, 3, 3, device="openreg"), mode="bilinear", **bad)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device|same device"):
        torch.ops.aten.upsample_nearest2d.out(torch.randn(1, 1, 2, 2, device="openreg"), [4, 4], None, None,
                                              out=torch.empty(0, device="openreg:1"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("module", ["linear", "conv"])
def test_weight_norm_matches_cpu(module, dim, dtype, device):
    def run(on, dtype=dtype):
        torch.manual_seed(0)
        layer = torch.nn.Linear(6, 4) if module == "linear" else torch.nn.Conv2d(3, 5, 3)
        layer = torch.nn.utils.parametrizations.weight_norm(layer, dim=dim).to(on, dtype)
        x = torch.randn(2, 6) if module == "linear" else torch.randn(2, 3, 6, 6)
        layer(x.to(on, dtype)).square().sum().backward()
        original = layer.parametrizations.weight
        return [t.detach().cpu() for t in (layer.weight, original.original0.grad, original.original1.grad)]

    torch.openreg.reset_fallback_counts()
    got = run(device)
    assert not any("weight_norm" in k for k in torch.openreg.fallback_counts()), torch.openreg.fallback_counts()
    if dtype == torch.float32:
        for g, w in zip(got, run("cpu")):
            torch.testing.assert_close(g, w, **TOL[torch.float32])
        return
    # bfloat16: gradients that cancel differ by whole bfloat16 steps between any two orders of
    # rounding (CPU's own differs by machine), so each side is measured against float32's answer:
    # the device's error within twice CPU's, or within 1% of the largest gradient.
    for g, w, exact in zip(got, run("cpu"), run("cpu", torch.float32)):
        ours, cpus = (g.float() - exact).abs().max(), (w.float() - exact).abs().max()
        assert ours <= max(2 * cpus, 1e-2 * exact.abs().max()), (ours, cpus)


def test_weight_norm_interface_directly_and_errors():
    v, g = torch.randn(4, 3, 2), torch.rand(4, 1, 1) + 0.5
    torch.openreg.reset_fallback_counts()
    w, norms = torch._weight_norm_interface(v.openreg(), g.openreg(), 0)
    gv, gg = torch.ops.aten._weight_norm_interface_backward(torch.ones(4, 3, 2).openreg(), v.openreg(), g.openreg(),
                                                             norms, 0)
    assert torch.openreg.fallback_counts() == {}
    w_cpu, norms_cpu = torch._weight_norm_interface(v, g, 0)
    gv_cpu, gg_cpu = torch.ops.aten._weight_norm_interface_backward(torch.ones(4, 3, 2), v, g, norms_cpu, 0)
    for got, want in [(w, w_cpu), (norms, norms_cpu), (gv, gv_cpu), (gg, gg_cpu)]:
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="fused kernels can only be applied for first or last dim"):
        torch.ops.aten._weight_norm_interface_backward(torch.ones(4, 3, 2).openreg(), v.openreg(), g.openreg(),
                                                       norms, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 2), (0, 3), (), (40,), (2, 3000)])
def test_nonzero_matches_cpu(shape, dtype, device):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=g) > 0.3).to(dtype) * (torch.randn(shape, generator=g) * 5).to(dtype)
    if dtype.is_floating_point and x.numel():
        x.view(-1)[0] = float("nan")  # NaN is nonzero
        x.view(-1)[-1] = -0.0  # negative zero is zero
    torch.openreg.reset_fallback_counts()
    got = torch.nonzero(x.to(device))
    transposed = torch.nonzero(x.to(device).t()) if x.dim() == 2 else None
    as_tuple = torch.nonzero(x.to(device), as_tuple=True)
    assert torch.openreg.fallback_counts() == {}
    assert got.device == torch.device(device) and got.dtype == torch.int64
    torch.testing.assert_close(got.cpu(), torch.nonzero(x))
    if transposed is not None:
        torch.testing.assert_close(transposed.cpu(), torch.nonzero(x.t()))
    for a, b in zip(as_tuple, torch.nonzero(x, as_tuple=True)):
        torch.testing.assert_close(a.cpu(), b)


def test_nonzero_out_and_errors():
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    out = torch.empty(0, dtype=torch.int64, device="openreg")
    assert torch.nonzero(x.openreg(), out=out) is out
    torch.testing.assert_close(out.cpu(), torch.nonzero(x))
    with pytest.raises(RuntimeError, match="Expected out tensor to have scalar type Long"):
        torch.nonzero(x.openreg(), out=torch.empty(0, device="openreg"))
    with pytest.raises(RuntimeError, match="same device|Expected all tensors"):
        torch.nonzero(x.openreg(), out=torch.empty(0, dtype=torch.int64, device="openreg:1"))
    # A mask computed by queued kernels: the count waits for them.
    big = torch.randn(1000, 1000, device="openreg")
    mask = big.mul(2).add(1) > 1
    assert torch.nonzero(mask).shape[0] == int(mask.sum().item())
