"""The table-driven elementwise operators (csrc/operators/PointwiseTable.cpp), any/all/min/max
and linalg.qr: each against CPU over the correctness matrix (dtypes, strides, transposed,
broadcasting, out=, in-place, empty, 0-dim, both devices), with no fallback for the dtypes
the formulas compute in."""

import re

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def inputs(shape, dtype, device, transposed=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    if x.numel():
        x.view(-1)[::7] = 0.0  # ties and zeros for comparisons and sign
    x = x.to(dtype)
    if transposed and x.dim() == 2:
        x = x.t().contiguous().t()
    return x, x.to(device)


SHAPES = [(5, 7), (0, 3), (), (33,)]

UNARY = {
    "sign": torch.sign, "sgn": torch.sgn, "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5),
    "erfinv": lambda x: torch.erfinv(torch.tanh(x) * 0.999),
    "pow2": lambda x: torch.pow(x, 2), "pow3": lambda x: torch.pow(x, 3.0), "pow_half": lambda x: torch.pow(x.abs(), 0.5),
    "clamp_min": lambda x: torch.clamp_min(x, 0.3), "clamp_max": lambda x: torch.clamp_max(x, -0.2),
    "hardswish": torch.nn.functional.hardswish, "hardsigmoid": torch.nn.functional.hardsigmoid,
    "softplus": lambda x: torch.nn.functional.softplus(x, beta=2.0, threshold=5.0),
    "logical_not": torch.logical_not, "isneginf": torch.isneginf, "isposinf": torch.isposinf,
    "sin": lambda x: torch.sin(x * 4), "cos": lambda x: torch.cos(x * 4),
    "log1p": lambda x: torch.log1p(x.abs()), "threshold": lambda x: torch.nn.functional.threshold(x, 0.5, -2.0),
    "hardshrink": lambda x: torch.nn.functional.hardshrink(x, 1.0),
    "softshrink": lambda x: torch.nn.functional.softshrink(x, 0.7), "mish": torch.nn.functional.mish,
    "clamp": lambda x: torch.clamp(x, -1.0, 2.0), "clamp_lower": lambda x: torch.clamp(x, min=0.5),
    "clamp_upper": lambda x: torch.clamp(x, max=-0.5), "clamp_crossed": lambda x: torch.clamp(x, 1.0, -1.0),
    "elu": lambda x: torch.nn.functional.elu(x, alpha=0.8), "selu": torch.nn.functional.selu,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "log2": lambda x: torch.log2(x.abs()),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu(name, shape, dtype, device, transposed):
    fn = UNARY[name]
    cpu, dev = inputs(shape, dtype, device, transposed)
    torch.openreg.reset_fallback_counts()
    got = fn(dev)
    assert torch.openreg.fallback_counts() == {}, name
    want = fn(cpu)
    assert got.dtype == want.dtype and got.shape == want.shape
    # 16-bit floats: one rounding here (computed in float32), possibly more on CPU: an ulp apart.
    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=rtol, atol=1e-6 if dtype == torch.float32 else 1e-3)


COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_match_cpu(name, dtype, device):
    op = getattr(torch, name)
    a_cpu, a = inputs((4, 6), dtype, device, seed=1)
    b_cpu, b = inputs((6,), dtype, device, seed=2)  # broadcast along rows
    torch.openreg.reset_fallback_counts()
    results = [
        (op(a, b), op(a_cpu, b_cpu)),
        (op(a, 0.0), op(a_cpu, 0.0)),
        (op(a.t(), 1.5), op(a_cpu.t(), 1.5)),
        (op(a[:0], 1.0), op(a_cpu[:0], 1.0)),
        (op(a[0, 0], a[1, 1]), op(a_cpu[0, 0], a_cpu[1, 1])),
    ]
    out = torch.empty(4, 6, dtype=torch.bool, device=device)
    results.append((op(a, b, out=out), op(a_cpu, b_cpu)))
    inplace = a.clone()
    getattr(inplace, name + "_")(b)
    want_inplace = a_cpu.clone()
    getattr(want_inplace, name + "_")(b_cpu)
    results.append((inplace, want_inplace))
    assert torch.openreg.fallback_counts() == {}
    for got, want in results:
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert out.data_ptr() == results[5][0].data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_logical_where_masked_fill_and_bitwise_on_bools(device):
    a_cpu, a = inputs((8, 5), torch.float32, device, seed=3)
    m_cpu, m = a_cpu > 0, a > 0
    n_cpu, n = a_cpu < 1, a < 1
    torch.openreg.reset_fallback_counts()
    pairs = [
        (torch.logical_and(m, n), torch.logical_and(m_cpu, n_cpu)),
        (torch.logical_or(m, a), torch.logical_or(m_cpu, a_cpu)),
        (m | n, m_cpu | n_cpu), (m & n, m_cpu & n_cpu), (~m, ~m_cpu), (~m.t(), ~m_cpu.t()),
        (torch.where(m, a, -a), torch.where(m_cpu, a_cpu, -a_cpu)),
        (torch.where(m, a, 0.0), torch.where(m_cpu, a_cpu, 0.0)),
        (torch.where(m[:, :1], a, a.t().contiguous().t()), torch.where(m_cpu[:, :1], a_cpu, a_cpu)),
        (a.masked_fill(m, -7.0), a_cpu.masked_fill(m_cpu, -7.0)),
        (a.masked_fill(m[0], 2.5), a_cpu.masked_fill(m_cpu[0], 2.5)),  # a broadcast mask
        (m.any(), m_cpu.any()), (m.all(), m_cpu.all()), (n.any(dim=1), n_cpu.any(dim=1)),
        (m.all(dim=0, keepdim=True), m_cpu.all(dim=0, keepdim=True)),
        (a.max(), a_cpu.max()), (a.min(), a_cpu.min()), (a.amin(1), a_cpu.amin(1)),
        (m[:0].any(), m_cpu[:0].any()), (m[:0].all(), m_cpu[:0].all()),
    ]
    assert torch.openreg.fallback_counts() == {}
    for i, (got, want) in enumerate(pairs):
        assert got.dtype == want.dtype and got.shape == want.shape, i
        assert torch.equal(got.cpu(), want), i
    x = a.clone()
    x.masked_fill_(m, 1.0)
    assert torch.equal(x.cpu(), a_cpu.masked_fill(m_cpu, 1.0))


@pytest.mark.parametrize("name, fn", [
    ("hardswish", torch.nn.functional.hardswish), ("hardsigmoid", torch.nn.functional.hardsigmoid),
    ("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("softplus", torch.nn.functional.softplus),
    ("hardshrink", torch.nn.functional.hardshrink), ("softshrink", torch.nn.functional.softshrink),
    ("elu", torch.nn.functional.elu), ("selu", torch.nn.functional.selu), ("mish", torch.nn.functional.mish),
    ("threshold", lambda x: torch.nn.functional.threshold(x, 0.1, 2.0)),
    ("clamp", lambda x: torch.clamp(x, -1.0, 1.0)), ("log1p", lambda x: torch.log1p(x.abs())),
])
@pytest.mark.parametrize("dtype", FLOATS)
def test_backwards_match_cpu(name, fn, dtype):
    cpu, dev = inputs((6, 9), dtype, "openreg", seed=4)
    cpu.requires_grad_(), dev.requires_grad_()
    grad = torch.randn(6, 9).to(dtype)
    torch.openreg.reset_fallback_counts()
    fn(dev).backward(grad.to("openreg"))
    assert torch.openreg.fallback_counts() == {}, name
    fn(cpu).backward(grad)
    torch.testing.assert_close(dev.grad.cpu(), cpu.grad, rtol=1e-2 if dtype != torch.float32 else 1e-5,
                               atol=1e-2 if dtype != torch.float32 else 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_xlogy_matches_cpu(dtype, device):
    a_cpu, a = inputs((5, 6), dtype, device, seed=5)
    b_cpu, b = inputs((6,), dtype, device, seed=6)
    b_cpu, b = b_cpu.abs(), b.abs()
    b_cpu[1], b[1] = float("nan"), float("nan")
    torch.openreg.reset_fallback_counts()
    got = [torch.xlogy(a, b), torch.xlogy(a.t().contiguous().t(), b), torch.xlogy(a[0, 0], b[2]),
           torch.xlogy(a, b, out=torch.empty(5, 6, dtype=dtype, device=device)), a.clone().xlogy_(b)]
    assert torch.openreg.fallback_counts() == {}
    want = torch.xlogy(a_cpu, b_cpu)
    for g, w in zip(got, [want, want, torch.xlogy(a_cpu[0, 0], b_cpu[2]), want, want]):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=1e-2 if dtype != torch.float32 else 1e-5, atol=1e-3)
    # Integers are promoted to the default float, as on CPU.
    i = torch.arange(4, device=device)
    assert torch.xlogy(i, i).dtype == torch.float32


def test_other_dtypes_and_bad_input_go_to_cpu_kernels():
    i = torch.arange(6, dtype=torch.float64).openreg()
    torch.openreg.reset_fallback_counts()
    assert torch.equal((i < 3).cpu(), torch.arange(6, dtype=torch.float64) < 3)  # float64: CPU's kernel, counted
    assert torch.openreg.fallback_counts() != {}
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(torch.ones(2).openreg())
    assert torch.isnan(torch.clamp(torch.ones(3).openreg(), min=float("nan")).cpu()).all()
    x = torch.ones(3).openreg()
    torch.openreg.reset_fallback_counts()
    # elu with both a scale and an input scale (neither ELU, SELU nor CELU): CPU's kernel, counted
    torch.testing.assert_close(torch.ops.aten.elu(x, 1.0, 2.0, 0.5).cpu(), torch.ops.aten.elu(torch.ones(3), 1.0, 2.0, 0.5))
    assert "aten::elu" in torch.openreg.fallback_counts()
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        torch.ones(2).openreg() | torch.ones(2).openreg()
    with pytest.raises(RuntimeError, match="boolean masks"):
        torch.ones(2).openreg().masked_fill_(torch.ones(2).openreg(), 1.0)
    with pytest.raises(RuntimeError, match="Expected reduction dim"):
        torch.ones(0).openreg().max()
    with pytest.raises(RuntimeError, match="size of tensor a"):
        torch.ones(3).openreg() < torch.ones(4).openreg()
    # A NaN bound is CPU's NaN result.
    assert torch.isnan(torch.clamp_min(torch.ones(3).openreg(), float("nan")).cpu()).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "log2"])
def test_rounding_and_log2_out_in_place_integers_and_errors(name, device):
    fn = getattr(torch, name)
    cpu, dev = inputs((4, 6), torch.float32, device, seed=7)
    cpu[0, :3], dev[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0]), torch.tensor([float("nan"), float("inf"), -0.0])
    torch.openreg.reset_fallback_counts()
    out = torch.empty(0, device=device)
    assert fn(dev, out=out) is out
    in_place = dev.clone()
    getattr(in_place, name + "_")()
    # Integers: rounding keeps the dtype (a copy), log2 promotes to float, as on CPU.
    ints_cpu = torch.arange(-5, 7).reshape(3, 4)
    ints = fn(ints_cpu.to(device))
    assert torch.openreg.fallback_counts() == {}, name
    torch.testing.assert_close(out.cpu(), fn(cpu), equal_nan=True)
    torch.testing.assert_close(in_place.cpu(), fn(cpu), equal_nan=True)
    torch.testing.assert_close(ints.cpu(), fn(ints_cpu), equal_nan=True)
    assert ints.dtype == fn(ints_cpu).dtype
    if name != "log2":
        # A bool is CPU's error, from CPU's kernel.
        with pytest.raises(RuntimeError) as expected:
            fn(torch.ones(2, dtype=torch.bool))
        with pytest.raises(type(expected.value), match=re.escape(str(expected.value).split("'")[0])):
            fn(torch.ones(2, dtype=torch.bool, device=device))
    with pytest.raises(RuntimeError, match="Found dtype Long but expected Float|result type Float can't be cast"):
        fn(dev, out=torch.empty(4, 6, dtype=torch.long, device=device))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 4), (0, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_qr_matches_cpu(shape, mode, dtype):
    a = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(5))
    torch.openreg.reset_fallback_counts()
    q, r = torch.linalg.qr(a.openreg(), mode=mode)
    assert torch.openreg.fallback_counts() == {}
    q_cpu, r_cpu = torch.linalg.qr(a, mode=mode)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(r.cpu(), r_cpu, **tol)
    torch.testing.assert_close(q.cpu(), q_cpu, **tol)


def test_orthogonal_and_trunc_normal_init_run_on_the_device():
    torch.openreg.reset_fallback_counts()
    w = torch.empty(6, 4, device="openreg")
    torch.nn.init.orthogonal_(w)
    torch.nn.init.trunc_normal_(torch.empty(100, device="openreg"), std=0.02)
    torch.openreg.synchronize()
    assert torch.openreg.fallback_counts() == {}
    torch.testing.assert_close((w.t() @ w).cpu(), torch.eye(4), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_index_put_matches_cpu(device, dtype):
    base = torch.randn(5, 6, 4).to(dtype)
    rows = torch.tensor([0, 3, 4])
    cols = torch.tensor([[1], [5]])
    cases = [
        lambda t, d: t.index_put_((rows.to(d),), torch.tensor(2.0, dtype=dtype).to(d)),
        lambda t, d: t.index_put_((rows.to(d), cols.to(d)), torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1)).to(dtype).to(d)),
        lambda t, d: t.__setitem__((slice(None), torch.tensor([2, -1]).to(d)), torch.ones(4, dtype=dtype).to(d)) or t,  # a later dim
        lambda t, d: t.__setitem__((torch.tensor([1, 0]).to(d), slice(None), torch.tensor([3, 2]).to(d)), torch.full((6,), 4.0, dtype=dtype).to(d)) or t,  # non-adjacent
        lambda t, d: t.index_put_((torch.tensor([1, 1, 1]).to(d),), torch.ones(6, 4, dtype=dtype).to(d), accumulate=True),
        lambda t, d: t.transpose(0, 1).index_put_((torch.tensor([0, 2]).to(d),), torch.zeros(1, dtype=dtype).to(d)),  # strided self
    ]
    torch.openreg.reset_fallback_counts()
    for i, case in enumerate(cases):
        want = case(base.clone(), "cpu")
        got = case(base.clone().to(device), device)
        torch.testing.assert_close(got.cpu(), want, msg=f"case {i}")
    assert torch.openreg.fallback_counts() == {}
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 5"):
        base.clone().to(device).index_put_((torch.tensor([7]).to(device),), torch.tensor(1.0, dtype=dtype).to(device))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        base.clone().to(device).index_put_((rows.to(device),), torch.ones(2, dtype=dtype).to(device))
    # bool masks take CPU's kernel, counted
    masked = base.clone().to(device)
    masked[masked > 0] = 0.0
    assert torch.equal(masked.cpu(), base.clone().masked_fill(base > 0, 0.0))
