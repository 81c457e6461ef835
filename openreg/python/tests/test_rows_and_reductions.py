"""Reductions over integers and bools (exact), argmax/argmin and cumsum (kernels/rows.rs) and
isin (TensorCompare.cpp), against CPU over the correctness matrix (dtypes, dims, keepdim,
transposed, out=, in-place, empty, 0-dim, both devices), with no fallback."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g).to(dtype)
        if x.numel() > 3:
            x.view(-1)[::4] = x.view(-1)[1]  # ties
        return x
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def check(fn, *args, exact=True):
    torch.openreg.reset_fallback_counts()
    got = fn(*args)
    reached = torch.openreg.fallback_counts()
    want = fn(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    assert reached == {}, reached
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        assert torch.equal(got.cpu(), want)
    else:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-2, atol=1e-2)


INPUTS = {
    "matrix": lambda x: x,
    "transposed": lambda x: x.t(),
    "0-dim": lambda x: x[1, 2],
    "empty rows": lambda x: x[:0],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*INTS, torch.bool])
@pytest.mark.parametrize("layout", sorted(INPUTS))
def test_integer_reductions_match_cpu(layout, dtype, device):
    x = INPUTS[layout](sample((5, 7), dtype).to(device))
    check(torch.sum, x)
    if x.dim():
        check(lambda x: x.sum(0), x)
        check(lambda x: x.sum(-1, keepdim=True), x)
        check(lambda x: torch.sum(x, 1, out=torch.empty(0, dtype=torch.int64, device=x.device)), x)
    if x.numel() and dtype != torch.bool:
        check(torch.max, x)
        check(torch.min, x)
        if x.dim():
            check(lambda x: torch.amax(x, 0), x)
            check(lambda x: torch.amin(x, -1, keepdim=True), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*FLOATS, *INTS])
@pytest.mark.parametrize("layout", sorted(INPUTS))
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_match_cpu(name, layout, dtype, device):
    x = INPUTS[layout](sample((5, 7), dtype, seed=1).to(device))
    op = getattr(torch, name)
    if x.numel():
        check(op, x)
    if x.dim():
        check(lambda x: op(x, 1), x)
        if x.size(0):
            check(lambda x: op(x, 0, keepdim=True), x)
        check(lambda x: op(x, -1, out=torch.empty(3, dtype=torch.int64, device=x.device)), x)
    else:
        check(lambda x: op(x, 0), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_picks_nan_and_the_first_tie_as_cpu(name, device):
    x = torch.tensor([[1.0, 3.0, 3.0, float("nan"), float("nan")], [2.0, 2.0, -1.0, -1.0, 0.0]])
    check(lambda x: getattr(torch, name)(x, 1), x.to(device))
    with pytest.raises(IndexError, match="Dimension out of range"):
        getattr(torch, name)(x.to(device), 2)
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        getattr(torch, name)(torch.ones(0, 3, device=device), 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool])
@pytest.mark.parametrize("layout", sorted(INPUTS))
def test_cumsum_matches_cpu(layout, dtype, device):
    x = INPUTS[layout](sample((5, 7), dtype, seed=2).to(device))
    exact = not dtype.is_floating_point
    check(lambda x: torch.cumsum(x, 0), x, exact=exact)
    if x.dim():
        check(lambda x: torch.cumsum(x, -1), x, exact=exact)
        check(lambda x: torch.cumsum(x, 1, dtype=torch.float32), x, exact=False)
        out_dtype = torch.int64 if not dtype.is_floating_point else dtype
        check(lambda x: torch.cumsum(x, 0, out=torch.empty(0, dtype=out_dtype, device=x.device)), x, exact=exact)
    if dtype != torch.bool:
        check(lambda x: x.clone().cumsum_(0), x, exact=exact)


def test_cumsum_accumulates_float32_in_float64_as_cpu():
    x = torch.full((1 << 16,), 0.1)
    check(lambda x: torch.cumsum(x, 0), x.to("openreg"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_isin_matches_cpu(dtype, device):
    elements = sample((4, 6), dtype, seed=3).to(device)
    test = sample((9,), dtype, seed=4).to(device)
    check(torch.isin, elements, test)
    check(lambda e, t: torch.isin(e, t, invert=True), elements, test)
    check(torch.isin, elements.t(), test[::2])
    check(torch.isin, elements[1, 1], test)
    check(torch.isin, elements[:0], test)
    check(torch.isin, elements, test[:0])
    check(lambda e, t: torch.isin(e, t, out=torch.empty(4, 6, dtype=torch.bool, device=e.device)), elements, test)
    check(torch.isin, elements, test.to(torch.int32 if dtype == torch.int64 else torch.int64))  # promoted


def test_isin_of_a_large_test_set_is_cpu_counted():
    elements, test = torch.arange(5000, device="openreg"), torch.arange(0, 20000, 3, device="openreg")
    torch.openreg.reset_fallback_counts()
    got = torch.isin(elements, test)
    assert "aten::isin" in str(torch.openreg.fallback_counts())
    assert torch.equal(got.cpu(), torch.isin(elements.cpu(), test.cpu()))
