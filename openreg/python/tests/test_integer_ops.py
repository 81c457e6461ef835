"""Elementwise operators on integer tensors (kernels/integer.rs): exact 64-bit arithmetic that
wraps as CPU's does, against CPU over the correctness matrix (every integer width, strides,
transposed, broadcasting, out=, in-place, empty, 0-dim, both devices), with no fallback; and the
scalars float64 cannot hold exactly going to CPU's kernel, counted, with CPU's result."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def ints(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -1000), min(info.max, 1000)
    x = torch.randint(low, high + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    if x.numel():
        x.view(-1)[::5] = 0  # ties and zeros
    return x


LAYOUTS = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.t() if x.dim() == 2 else x,
    "strided": lambda x: x[::2] if x.dim() else x,
    "0-dim": lambda x: x.reshape(-1)[0] if x.numel() else x.sum(),
    "empty": lambda x: x[:0],
}

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign,
    "clamp_min": lambda x: torch.clamp_min(x, 3), "clamp_max": lambda x: torch.clamp_max(x, 2),
    "clamp": lambda x: torch.clamp(x, 1, 40), "clamp_lower": lambda x: torch.clamp(x, min=4), "logical_not": torch.logical_not,
    "eq_scalar": lambda x: x == 0, "gt_scalar": lambda x: x > 7,
    "le_scalar": lambda x: x <= -3,  # on uint8, CPU compares with -3 converted: 253
}
BINARY = {
    "add": torch.add, "add_alpha": lambda a, b: torch.add(a, b, alpha=3), "sub": torch.sub,
    "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
}


def run_both(fn, *args):
    torch.openreg.reset_fallback_counts()
    got = fn(*args)
    reached = torch.openreg.fallback_counts()
    want = fn(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    assert reached == {}, reached
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu(name, layout, dtype, device):
    x = LAYOUTS[layout](ints((6, 4), dtype).to(device))
    run_both(UNARY[name], x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_cpu(name, layout, dtype, device):
    a = LAYOUTS[layout](ints((6, 4), dtype, seed=1).to(device))
    b = LAYOUTS[layout](ints((6, 4), dtype, seed=2).to(device))
    run_both(BINARY[name], a, b)
    run_both(BINARY[name], a, b[..., :1] if b.dim() else b)  # broadcast


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INTS)
def test_out_in_place_mixed_widths_and_where(dtype, device):
    a, b = ints((5, 3), dtype, seed=3).to(device), ints((5, 3), dtype, seed=4).to(device)
    long = ints((5, 3), torch.int64, seed=5).to(device)
    mask = a > b
    run_both(lambda a, b: torch.mul(a, b, out=torch.empty(5, 3, dtype=dtype, device=a.device)), a, b)
    run_both(lambda a, b: torch.eq(a, b, out=torch.empty(5, 3, dtype=torch.bool, device=a.device)), a, b)
    run_both(lambda a, b: a.clone().add_(b), a, b)
    run_both(lambda a, b: a.t().clone().mul_(b.t()), a, b)
    run_both(lambda a, m: a.clone().masked_fill_(m, 9), a, mask)
    run_both(lambda a, m: a.clone().masked_fill_(m[0], 9), a, mask)  # a broadcast mask
    run_both(lambda m, a, b: torch.where(m, a, b), mask, a, b)
    run_both(lambda m, a: torch.where(m, a, 4), mask, a)
    run_both(lambda a, b: a + b, a, long)  # promoted to int64
    run_both(lambda a, b: torch.maximum(a, b), a, long)
    run_both(lambda a: a.t().clone().fill_(7), a)
    run_both(lambda a: a.t().fill_(-1) if dtype != torch.uint8 else a.t().fill_(200), a.clone())


@pytest.mark.parametrize("device", DEVICES)
def test_arithmetic_wraps_as_on_cpu(device):
    big = torch.tensor([2**62, -(2**63), 2**63 - 1, 5], device=device)
    run_both(lambda x: x * 4, big)
    run_both(lambda x: x + x, big)
    run_both(torch.abs, big)
    run_both(torch.neg, big)
    small = torch.tensor([127, -128, 100], dtype=torch.int8, device=device)
    run_both(lambda x: x + x, small)
    run_both(torch.abs, small)
    run_both(lambda x: x * x, torch.tensor([200, 16], dtype=torch.uint8, device=device))
    run_both(lambda x, y: x == y, torch.tensor([2**53, 2**53 + 1], device=device), torch.tensor(2**53 + 1, device=device))


def test_scalars_float64_cannot_hold_go_to_cpu_kernel():
    x = torch.tensor([1, 2**60], device="openreg")
    torch.openreg.reset_fallback_counts()
    got = (x + 2**60 + 1).cpu()
    assert torch.openreg.fallback_counts() != {}  # counted
    assert torch.equal(got, torch.tensor([1, 2**60]) + 2**60 + 1)
    torch.openreg.reset_fallback_counts()
    assert (x == 2**60 + 1).cpu().tolist() == [False, False]  # 2^60 + 1 has no float64
    assert torch.openreg.fallback_counts() != {}
    torch.openreg.reset_fallback_counts()
    filled = torch.empty(3, 2, dtype=torch.int64, device="openreg").t().fill_(2**62 + 1)
    assert torch.openreg.fallback_counts() != {}
    assert (filled.cpu() == 2**62 + 1).all()


def test_bad_input_is_cpu_error():
    x = torch.tensor([1, 2], dtype=torch.uint8, device="openreg")
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        -torch.tensor([True], device="openreg")
    with pytest.raises(RuntimeError, match="value cannot be converted"):
        x.fill_(300)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        torch.ones(3, dtype=torch.int64, device="openreg") + torch.ones(4, dtype=torch.int64, device="openreg")
    with pytest.raises(RuntimeError, match="result type"):
        torch.ones(3, dtype=torch.int64, device="openreg").add_(torch.ones(3, device="openreg"))


BITWISE = {"and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*INTS, torch.bool])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(BITWISE))
def test_bitwise_matches_cpu(name, layout, dtype, device):
    make = (lambda s: ints((6, 4), torch.int64, seed=s) > 0) if dtype == torch.bool else (lambda s: ints((6, 4), dtype, seed=s))
    a, b = LAYOUTS[layout](make(6).to(device)), LAYOUTS[layout](make(7).to(device))
    run_both(BITWISE[name], a, b)
    run_both(torch.bitwise_not, a)
    run_both(lambda a, b: BITWISE[name](a, b, out=torch.empty_like(a)), a, b)
    run_both(lambda a, b: getattr(a.clone(), f"bitwise_{name}_")(b), a, b)


def test_bitwise_of_floats_is_cpu_error():
    x = torch.ones(2, device="openreg")
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        x & x
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        torch.bitwise_not(x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [*INTS, torch.bool])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_integer_inputs_of_float_operations_match_cpu(layout, dtype, device):
    a = LAYOUTS[layout](ints((6, 4), torch.int64, seed=8).to(dtype).to(device))
    f = LAYOUTS[layout]((torch.randn(6, 4, generator=torch.Generator().manual_seed(9)) * 50).to(device))
    run_both(lambda f, a: f / a, f, a)
    run_both(lambda f, a: f * a, f, a)
    run_both(lambda f, a: f - a if a.dtype != torch.bool else f - a.float(), f, a)
    run_both(lambda a: a.float(), a)
    run_both(lambda a: a.to(torch.bfloat16), a)
    run_both(lambda a: a / 3, a)  # true division promotes to the default float
    run_both(lambda f, a: f.half() + a, f, a)


@pytest.mark.parametrize("device", DEVICES)
def test_large_integers_round_as_cpu_converts_them(device):
    a = torch.tensor([2**24 + 1, 2**53 + 1, -(2**62) - 1, 2**63 - 1], device=device)
    run_both(lambda a: a.float(), a)
    run_both(lambda a: a * 0.5, a)
