"""The Rust kernels against CPU: shapes (empty, 0-dim, broadcast, non-contiguous, transposed),
both devices, float32/float16/bfloat16, out=/in-place variants, and the errors CPU gives."""

import functools

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=1e-2),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def check(fn, *inputs, device, dtype=torch.float32, tol=None):
    """Runs `fn` on CPU and on `device` and compares results (values, dtype, shape)."""
    expected = fn(*inputs)
    got = fn(*[t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs])
    assert got.device == torch.device(device)
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **(tol or TOL[dtype]))
    return got


def shapes_binary():
    # (a, b): same, broadcast both ways, scalar-ish, empty.
    return [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((5,), ()), ((), ()), ((0, 3), (3,)),
            ((2, 3, 4), (4,)), ((1 << 17,), (1 << 17,))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", shapes_binary(), ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary(op, shapes, dtype, device):
    a, b = (torch.randn(s).to(dtype) for s in shapes)
    fn = getattr(torch, op)
    check(fn, a, b, device=device, dtype=dtype)
    if op in ("add", "sub"):
        check(lambda x, y: fn(x, y, alpha=-2.5), a, b, device=device, dtype=dtype)
    if op not in ("maximum", "minimum"):
        check(lambda x: fn(x, 2), a, device=device, dtype=dtype)  # a CPU scalar operand
    else:
        check(lambda x, y: fn(x, y, out=torch.empty(0, dtype=dtype, device=x.device)), a, b,
              device=device, dtype=dtype)


def test_maximum_minimum_are_registered_by_torchgen_and_propagate_nan():
    for name in ["aten::maximum", "aten::maximum.out", "aten::minimum", "aten::minimum.out"]:
        line = next(line for line in torch._C._dispatch_dump_table(name).splitlines()
                    if line.startswith("PrivateUse1:"))
        assert "torchgen/RegisterPrivateUse1.cpp" in line, line
    a = torch.tensor([1.0, float("nan"), 3.0, -0.0])
    b = torch.tensor([2.0, 1.0, float("nan"), 0.0])
    for fn in [torch.maximum, torch.minimum]:
        torch.testing.assert_close(fn(a.openreg(), b.openreg()).cpu(), fn(a, b), equal_nan=True)
    assert torch.equal(torch.maximum(torch.arange(3).openreg(), torch.ones(3, dtype=torch.long).openreg()).cpu(),
                       torch.tensor([1, 1, 2]))


@pytest.mark.parametrize("device", DEVICES)
def test_binary_non_contiguous_transposed_and_in_place(device):
    a = torch.randn(6, 8)
    b = torch.randn(8, 6)
    check(lambda x, y: x.t() * y, a, b, device=device)
    check(lambda x, y: x[:, ::2] + y[::2].t(), a, b, device=device)
    x = a.to(device)
    x[:, 1::2].add_(b.t()[:, 1::2].to(device), alpha=3)
    expected = a.clone()
    expected[:, 1::2].add_(b.t()[:, 1::2], alpha=3)
    torch.testing.assert_close(x.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("inner", [2, 16, 33, 512, 513])
def test_short_rows_broadcast_and_copied(inner, device):
    """The rows path of the elementwise kernel (rows of up to 512, inputs contiguous or constant
    along them) and the general walk beyond it: broadcasts along and across rows, in place,
    a transposed block copied, a 0-dim scalar tensor, against CPU."""
    torch.manual_seed(0)
    x, col, row = torch.randn(3, 5, inner), torch.randn(3, 5, 1), torch.randn(inner)
    cases = {
        "minus column": lambda x, c, r: x - c,
        "plus row": lambda x, c, r: x + r,
        "addcmul": lambda x, c, r: torch.addcmul(x, c, r, value=0.5),
        "scalar tensor": lambda x, c, r: x * torch.tensor(3.0, device=x.device),
        "transposed copy": lambda x, c, r: x.transpose(0, 1).contiguous(),
        "in place": lambda x, c, r: x.clone().mul_(c),
    }
    for name, fn in cases.items():
        expected = fn(x, col, row)
        got = fn(x.to(device), col.to(device), row.to(device))
        torch.testing.assert_close(got.cpu(), expected, msg=name)


def test_same_shape_short_way_gives_what_tensor_iterator_gives():
    # Contiguous float32 tensors of one shape skip TensorIterator (Structured.h, same_shape);
    # the result must not tell: values, shape, strides, and the general path's errors.
    a, b = torch.randn(3, 1, 4), torch.randn(3, 1, 4)
    odd = torch.randn(12).as_strided((3, 1, 4), (4, 99, 1))  # contiguous; any stride on size 1
    for x, y in [(a, b), (odd, b), (a[0, 0, 0], b[0, 0, 0]), (a[:0], b[:0])]:
        for fn in [torch.add, torch.sub, torch.mul, torch.div, lambda p, q: torch.add(p, q, alpha=3),
                   lambda p, q: torch.sub(p, q, alpha=0.5), lambda p, _: -p, lambda p, _: p.exp(),
                   lambda p, _: p.sigmoid(), lambda p, _: p.tanh(), lambda p, _: p.relu()]:
            got = check(fn, x, y, device="openreg:1")
            assert got.stride() == fn(x, y).stride() and got.is_contiguous()
    x = torch.randn(5)
    for fn in [lambda p: p.add_(p), lambda p: p.mul_(p), lambda p: p.sub_(p.clone(), alpha=2),
               lambda p: p.neg_(), lambda p: p.relu_(), lambda p: p.div_(torch.full_like(p, 4.0))]:
        check(lambda p, fn=fn: fn(p.clone()), x, device="openreg:0")
    assert torch._neg_view(x.openreg()).add(x.openreg()).cpu().eq(0).all()
    # What the short way leaves to the general path raises there, as on the CPU.
    same_error(lambda p: p[:4].add_(p[1:]), torch.arange(5.0))  # partial overlap
    same_error(lambda p, q: torch.add(p, q, alpha=True), a, b)
    same_error(lambda p, q: torch.add(p, q, alpha=1j), a, b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="openreg:0") + torch.ones(3, device="openreg:1")
    loss = (a.openreg().requires_grad_() * b.openreg()).sum()
    loss.backward()



# (full, part): a bias, a row scale, rotary tables, a channel scale, a 0-dim and a one-element
# tensor, rows longer than a kernel block (4097: not a multiple of it), a part with as many
# dimensions as the full one, and a size-1 dimension of the full shape inside the span.
BROADCAST_IN_ONE_BLOCK = [((2, 12, 64), (64,)), ((2, 12, 64), (2, 12, 1)), ((2, 4, 12, 16), (1, 1, 12, 16)),
                          ((4, 8, 5, 5), (1, 8, 1, 1)), ((5, 17), ()), ((5, 17), (1,)), ((3, 4097), (4097,)),
                          ((3, 4097), (3, 1)), ((3, 40), (1, 40)), ((2, 1, 64), (1, 64)), ((600, 100), (100,))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("full,part", BROADCAST_IN_ONE_BLOCK, ids=str)
def test_broadcast_short_way_gives_what_tensor_iterator_gives(full, part, device):
    # One input broadcast in one block also skips TensorIterator (Structured.h,
    # broadcast_inner): values, shape and strides as CPU's, in either argument order.
    a, b = torch.randn(full), torch.randn(part).abs() + 0.5
    for fn in [torch.add, torch.sub, torch.mul, torch.div, lambda p, q: torch.sub(p, q, alpha=2.5)]:
        for x, y in [(a, b), (b, a)]:
            got = check(fn, x, y, device=device)
            assert got.stride() == fn(x, y).stride() and got.is_contiguous()
    for name in ["add_", "sub_", "mul_", "div_"]:
        check(lambda p, q, name=name: getattr(p.clone(), name)(q), a, b, device=device)
    odd = torch.randn(b.numel()).as_strided(b.shape, [99 if n == 1 else s for n, s in zip(b.shape, b.stride())])
    check(torch.mul, a, odd, device=device)  # contiguous, whatever a size-1 dimension's stride


def test_broadcast_short_way_leaves_the_rest_to_the_general_path():
    # Shapes that are not one block, rows too short to be worth it, and what only the
    # general path raises, as on the CPU.
    for full, part in [((3, 4), (3, 1)), ((40, 1, 20), (1, 7, 1)), ((6, 5, 4), (6, 1, 4)), ((2, 3, 4), (3, 1))]:
        a, b = torch.randn(full), torch.randn(part)
        for x, y in [(a, b), (b, a)]:
            check(torch.mul, x, y, device="openreg:0")
    same_error(lambda p, q: p.mul_(q), torch.ones(64), torch.ones(2, 64))  # self is the broadcast one
    same_error(lambda p, q: p.add_(q), torch.ones(2, 3), torch.ones(4))
    same_error(lambda p: p.mul_(p[0]), torch.randn(4, 64))  # the part overlaps self
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, 64, device="openreg:0") * torch.ones(64, device="openreg:1")
    x, w = torch.randn(2, 64, requires_grad=True), torch.randn(64, requires_grad=True)
    (x * w).sum().backward()
    xo, wo = x.detach().openreg().requires_grad_(), w.detach().openreg().requires_grad_()
    (xo * wo).sum().backward()
    torch.testing.assert_close(wo.grad.cpu(), w.grad)
    torch.testing.assert_close(xo.grad.cpu(), x.grad)

@pytest.mark.parametrize("dtype", DTYPES)
def test_type_promotion(dtype):
    a, b = torch.randn(4, 3), torch.randn(3).to(dtype)
    got = check(torch.add, a, b, device="openreg:0")
    assert got.dtype == torch.float32
    h = torch.randn(3).to(dtype)
    assert (h.openreg() * 2.5).dtype == dtype
    assert (torch.arange(3).openreg() / 2).dtype == torch.float32  # integer true division


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (), (7,), (3, 5), (1 << 17,)], ids=str)
@pytest.mark.parametrize("op", ["neg", "abs", "exp", "relu", "sigmoid", "tanh"])
def test_unary(op, shape, dtype, device):
    a = torch.randn(shape).to(dtype)
    check(getattr(torch, op), a, device=device, dtype=dtype)
    if a.dim() == 2:
        check(lambda x: getattr(torch, op)(x.t()), a, device=device, dtype=dtype)
    x = a.to(device)
    getattr(x, op + "_")()
    torch.testing.assert_close(x.cpu(), getattr(torch, op)(a), **TOL[dtype])


def test_unary_nan_and_out():
    a = torch.tensor([float("nan"), -1.0, 0.0, 2.0])
    for op in ["neg", "abs", "exp", "relu", "sigmoid", "tanh"]:
        out = torch.empty(4, device="openreg:0")
        getattr(torch, op)(a.openreg(), out=out) if op != "relu" else out.copy_(a.openreg().relu())
        torch.testing.assert_close(out.cpu(), getattr(torch, op)(a), equal_nan=True)


def test_relu_backward_is_threshold_backward():
    x = torch.randn(5, 4)
    g = torch.randn(5, 4)
    check(lambda a, b: torch.ops.aten.threshold_backward(a, b, 0.25), g, x, device="openreg:0")
    xd = x.openreg().requires_grad_()
    xd.relu().backward(g.openreg())
    torch.testing.assert_close(xd.grad.cpu(), g * (x > 0))


ACTIVATIONS = {
    "silu": (torch.nn.functional.silu, "silu_backward"),
    "gelu": (torch.nn.functional.gelu, "gelu_backward"),
    "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "gelu_backward"),
    "leaky_relu": (lambda x: torch.nn.functional.leaky_relu(x, 0.2), "leaky_relu_backward"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (), (7,), (3, 5), (1 << 17,)], ids=str)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_and_their_backwards(name, shape, dtype, device):
    fn, backward = ACTIVATIONS[name]
    a = (torch.randn(shape) * 3).to(dtype)
    check(fn, a, device=device, dtype=dtype)
    if a.dim() == 2:
        check(lambda x: fn(x.t()), a, device=device, dtype=dtype)
    # the backward against CPU's, through autograd
    cpu, dev = a.clone().requires_grad_(), a.to(device).requires_grad_()
    grad = torch.randn(shape).to(dtype)
    fn(cpu).backward(grad)
    fn(dev).backward(grad.to(device))
    torch.testing.assert_close(dev.grad.cpu(), cpu.grad, **TOL[dtype])
    counts = dict(torch.openreg.fallback_counts())
    assert not any(name.split("_")[0] in op for op in counts), counts  # no CPU fallback


def test_activation_variants_out_in_place_nan_and_errors():
    F = torch.nn.functional
    a = torch.tensor([float("nan"), -3.0, -0.5, 0.0, 0.5, 3.0])
    for approximate in ["none", "tanh"]:
        out = torch.empty(6, device="openreg:1")
        torch._C._nn.gelu(a.openreg(1), approximate=approximate, out=out)
        torch.testing.assert_close(out.cpu(), F.gelu(a, approximate=approximate), equal_nan=True)
        x = a.openreg()
        torch._C._nn.gelu_(x, approximate=approximate)
        torch.testing.assert_close(x.cpu(), F.gelu(a, approximate=approximate), equal_nan=True)
    for fn in [F.silu, lambda t: F.leaky_relu(t, 0.1)]:
        check(fn, a, device="openreg:0")
        x, y = a.openreg(), a.clone()
        fn(x, inplace=True) if fn is F.silu else F.leaky_relu_(x, 0.1)
        fn(y, inplace=True) if fn is F.silu else F.leaky_relu_(y, 0.1)
        torch.testing.assert_close(x.cpu(), y, equal_nan=True)
    g = torch.randn(6)
    for approximate in ["none", "tanh"]:
        check(lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate=approximate), g, a, device="openreg:0")
    check(torch.ops.aten.silu_backward, g, a, device="openreg:0")
    check(lambda g, x: torch.ops.aten.leaky_relu_backward(g, x, 0.3, False), g, a, device="openreg:0")
    same_error(lambda x: F.gelu(x, approximate="bad"), torch.ones(2))
    same_error(lambda x: torch.ops.aten.leaky_relu_backward(x, x, -0.1, True), torch.ones(2))
    # No kernel anywhere for integer silu: the fallback reports it as openreg's, quoting CPU's message.
    with pytest.raises(NotImplementedError, match=r"openreg has no kernel for aten::silu in Long.*silu_cpu"):
        F.silu(torch.ones(2, dtype=torch.int64, device="openreg"))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64, torch.bool, torch.float64])
def test_fill_and_zero(dtype):
    x = torch.empty(4, 3, dtype=dtype, device="openreg:0")
    x.fill_(1)
    assert torch.equal(x.cpu(), torch.ones(4, 3, dtype=dtype))
    x[:, 1].zero_()
    expected = torch.ones(4, 3, dtype=dtype)
    expected[:, 1] = 0
    assert torch.equal(x.cpu(), expected)
    x.fill_(torch.tensor(0, dtype=dtype, device="openreg:0"))
    assert torch.equal(x.cpu(), torch.zeros(4, 3, dtype=dtype))


def test_fill_errors_match_cpu():
    for make in [lambda: torch.empty(2, dtype=torch.float16), lambda: torch.empty(2)]:
        value = 1e6 if make().dtype == torch.float16 else 1e40
        with pytest.raises(RuntimeError) as cpu:
            make().fill_(value)
        with pytest.raises(RuntimeError) as dev:
            make().openreg().fill_(value)
        assert str(dev.value) == str(cpu.value)
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        torch.empty(2, device="openreg:0").fill_(torch.ones(2, device="openreg:0"))


@pytest.mark.parametrize("src,dst", [(a, b) for a in DTYPES for b in DTYPES])
def test_copy_between_dtypes_and_strides(src, dst):
    a = torch.randn(5, 6).to(src)
    x = a.openreg()
    y = torch.empty(6, 5, dtype=dst, device="openreg:0")
    y.copy_(x.t())
    assert torch.equal(y.cpu(), a.t().to(dst))
    z = torch.empty(4, 5, 6, dtype=dst, device="openreg:0")
    z.copy_(x)  # broadcast
    assert torch.equal(z.cpu(), a.to(dst).expand(4, 5, 6))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,order", [((17, 33), (1, 0)), ((32, 17, 192), (0, 2, 1)), ((2, 3, 17, 40), (0, 2, 1, 3)),
                                         ((5, 1, 70, 3), (3, 2, 1, 0)), ((4, 16, 16), (2, 0, 1)), ((3, 0, 5), (2, 1, 0))])
def test_permuted_copies_match_cpu(shape, order, device):
    """Copies that transpose (the output runs along a dimension the input crosses at a
    stride): tiles with partial edges, flipped inputs, outputs at strides of their own, empty."""
    a = torch.randn(shape)
    x = a.to(device)
    assert torch.equal(x.permute(order).contiguous().cpu(), a.permute(order).contiguous())
    assert torch.equal(x.flip(-1).permute(order).contiguous().cpu(), a.flip(-1).permute(order).contiguous())
    out = torch.empty(shape, device=device).permute(order)
    out.copy_(x.permute(order).contiguous().permute(*[order.index(d) for d in range(len(order))]).permute(order))
    assert torch.equal(out.cpu(), a.permute(order))
    back = torch.empty(shape, device=device)
    back.copy_(x.permute(order).contiguous().permute(*[order.index(d) for d in range(len(order))]))
    assert torch.equal(back.cpu(), a)


def test_copy_of_other_dtypes_within_the_device():
    a = torch.arange(12).reshape(3, 4)
    x = a.openreg()
    assert torch.equal(x.t().contiguous().cpu(), a.t().contiguous())
    assert torch.equal(x.double().cpu(), a.double())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims,keepdim", [(None, False), ((0,), False), ((1,), True),
                                          ((0, 2), False), ((-1,), True)], ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "amax"])
def test_reductions(op, dims, keepdim, dtype, device):
    a = torch.randn(4, 5, 6).to(dtype)
    if dims is None:
        fn = (lambda x: getattr(torch, op)(x)) if op != "amax" else (lambda x: torch.amax(x))
    else:
        fn = lambda x: getattr(torch, op)(x, dims, keepdim=keepdim)  # noqa: E731
    got = check(fn, a, device=device, dtype=dtype)
    assert got.dtype == fn(a).dtype
    check(lambda x: fn(x.transpose(0, 2)), a, device=device, dtype=dtype)


def test_reductions_large_empty_and_nan():
    a = torch.randn(1 << 22)
    torch.testing.assert_close(a.openreg().sum().cpu(), a.sum(), rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(a.openreg().mean().cpu(), a.mean(), rtol=1e-4, atol=1e-5)
    assert a.openreg().amax().item() == a.amax().item()
    e = torch.empty(0, 3)
    check(lambda x: x.sum(0), e, device="openreg:0")
    check(lambda x: x.sum(1), e, device="openreg:0")
    assert torch.isnan(e.openreg().mean()).item()
    n = torch.tensor([1.0, float("nan"), 3.0])
    assert torch.isnan(n.openreg().amax()).item()
    assert n.openreg().sum(dtype=torch.float16).dtype == torch.float16
    assert torch.arange(5).openreg().sum().item() == 10  # integers: the host path
    for shape in [(), (1,), (1, 1)]:  # only size-1 dimensions: nothing left to walk
        check(lambda x: torch.stack([x.sum(), x.mean(), x.amax()]), torch.randn(shape), device="openreg:0")


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64, torch.bool])
def test_empty_tensors_of_host_path_dtypes(dtype):
    # An empty tensor may have no allocation: the host path must not ask for one.
    x = torch.zeros(0, 3, dtype=dtype, device="openreg")
    assert x.shape == (0, 3) and x.cpu().shape == (0, 3)
    if dtype != torch.bool:  # abs of bool is an error on CPU too
        assert x.abs().shape == (0, 3)
    assert torch.equal(x.sum(0).cpu(), torch.zeros(0, 3, dtype=dtype).sum(0))


def test_reduction_errors_match_cpu():
    for fn in [lambda x: torch.amax(torch.empty(0, 3, device=x.device), 0),
               lambda x: torch.arange(3, device=x.device).mean(),
               lambda x: x.sum(3)]:
        with pytest.raises((RuntimeError, IndexError)) as cpu:
            fn(torch.ones(2, 2))
        with pytest.raises(type(cpu.value)) as dev:
            fn(torch.ones(2, 2, device="openreg:0"))
        assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(5, 7, 3), (64, 128, 32), (301, 70, 45), (1, 1, 1), (4, 0, 3), (0, 3, 2)], ids=str)
def test_matmul(m, k, n, dtype, device):
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    check(torch.mm, a, b, device=device, dtype=dtype)
    check(lambda x, y: torch.mm(y.t(), x.t()), a, b, device=device, dtype=dtype)  # transposed
    bias = torch.randn(n).to(dtype)
    check(lambda c, x, y: torch.addmm(c, x, y), bias, a, b, device=device, dtype=dtype)
    check(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2), bias, a, b, device=device, dtype=dtype)
    batch = torch.randn(3, m, k).to(dtype), torch.randn(3, k, n).to(dtype)
    check(torch.bmm, *batch, device=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,k,n", [(2, 64, 300), (8, 2048, 70), (33, 700, 5), (40, 2048, 1100), (300, 1024, 3)], ids=str)
def test_matmul_of_rows_by_rows(m, k, n, device):
    """A linear layer's product, `x @ wᵀ` with both along k and few rows on one side, which the
    kernel sums row by row instead of through gemm: bias, scales, a zero beta over NaN, a
    strided out=, a batch, and the longer side split either way."""
    x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    # Sums of k products in another order than CPU's: the difference grows with k.
    close = functools.partial(check, device=device, tol=dict(rtol=1e-5, atol=3e-7 * k))
    close(torch.nn.functional.linear, x, w, bias)
    close(lambda x, w: x @ w.t(), x, w)
    close(lambda x, w: w @ x.t(), x, w)  # the short side is the other operand
    close(lambda c, x, w: torch.addmm(c, x, w.t(), beta=0.5, alpha=-2), bias, x, w)
    close(lambda c, x, w: torch.addmm(c, x, w.t(), beta=0), torch.full((m, n), float("nan")), x, w)
    close(lambda x, w: torch.mm(x, w.t(), out=torch.zeros(n, m, device=x.device).t()), x, w)
    batch = torch.randn(3, m, k), torch.randn(3, n, k)
    close(lambda a, b: torch.bmm(a, b.transpose(1, 2)), *batch)
    close(lambda a, b: torch.bmm(a[:, :, 1:], b[:, :, 1:].transpose(1, 2)), *batch)  # rows not k apart



def grouped_operands(grouping, offsets, dtype, transposed):
    """`_grouped_mm`'s operands for `grouping` (which one the offsets cut), 8 x 16 by 16 x 24
    in full, each stored row- or column-major."""
    groups, g = len(offsets), torch.Generator().manual_seed(len(offsets))
    shapes = {"rows": [(24, 16), (groups, 16, 32)], "columns": [(groups, 8, 16), (16, 40)],
              "depth": [(8, 40), (40, 24)], "batch": [(groups, 8, 16), (groups, 16, 24)]}[grouping]

    def make(shape):
        t = torch.randn(shape, generator=g).to(dtype)
        # Column-major: the last two dimensions' strides swapped, as a transposed weight is.
        return t.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed else t

    a, b = (make(s) for s in shapes)
    offs = None if grouping == "batch" else torch.tensor(offsets, dtype=torch.int32)
    return a, b, offs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transposed", [False, True], ids=["row_major", "column_major"])
@pytest.mark.parametrize("grouping,offsets", [
    ("rows", [5, 5, 17, 24]),      # an empty group
    ("rows", [3, 20]),             # rows past the last offset
    ("columns", [8, 8, 40]),
    ("columns", [16]),             # columns past the last offset
    ("depth", [10, 10, 33, 40]),   # an empty group: k = 0, zeros
    ("batch", [0, 0, 0]),          # both 3-D: no offsets, a batch
], ids=str)
def test_grouped_mm_matches_cpu(grouping, offsets, transposed, dtype, device):
    """torch._grouped_mm, forward and backward, against CPU's composite. What no group covers
    (rows or columns past the last offset, of the output and of a gradient) CPU leaves as
    `empty` left it; here it is zero, and only the groups are compared."""
    a, b, offs = grouped_operands(grouping, offsets, dtype, transposed)
    end = offsets[-1]
    rows, cols = (lambda t: t[..., :end, :]), (lambda t: t[..., :end])
    every = lambda t: t  # noqa: E731
    # Which part of (out, a's gradient, b's gradient) the groups cover.
    parts = {"rows": (rows, rows, every), "columns": (cols, every, cols), "depth": (every, cols, rows),
             "batch": (every, every, every)}[grouping]
    grad = torch.randn(torch._grouped_mm(a, b, offs=offs).shape, generator=torch.Generator().manual_seed(3)).to(dtype)

    def run(device):
        x, y = (t.detach().to(device).requires_grad_() for t in (a, b))
        out = torch._grouped_mm(x, y, offs=None if offs is None else offs.to(device))
        out.backward(grad.to(device))
        return out, x.grad, y.grad

    want, got = run("cpu"), run(device)
    assert got[0].device == torch.device(device) and got[0].stride() == want[0].stride()
    for part, w, g in zip(parts, want, got):
        torch.testing.assert_close(part(g.detach()).cpu(), part(w.detach()), **TOL[dtype])
    rest = {"rows": lambda t: t[end:], "columns": lambda t: t[:, end:]}.get(grouping)
    if rest is not None:
        assert not rest(got[0].detach().cpu()).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes,offsets", [
    ([(0, 16), (2, 16, 8)], [0, 0]),        # no tokens
    ([(8, 0), (2, 0, 8)], [4, 8]),          # nothing to sum: zeros
    ([(8, 0), (0, 8)], [0, 0]),             # 2-D x 2-D over an empty depth
    ([(8, 4), (4, 8)], [0, 0]),             # every group empty: zeros
    ([(8, 16), (16, 0)], [0, 0]),           # no columns
    ([(4, 0), (0, 8)], [0]),                # a stride ATen refuses
], ids=str)
def test_grouped_mm_of_empty_operands(shapes, offsets, device):
    a, b = (torch.randn(s) for s in shapes)
    offs = torch.tensor(offsets, dtype=torch.int32)
    try:
        want = torch._grouped_mm(a, b, offs=offs)
    except RuntimeError as cpu:
        with pytest.raises(RuntimeError) as dev:
            torch._grouped_mm(a.to(device), b.to(device), offs=offs.to(device))
        assert str(dev.value) == str(cpu)
        return
    got = torch._grouped_mm(a.to(device), b.to(device), offs=offs.to(device))
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("grouping", ["rows", "columns", "depth", "batch"])
def test_grouped_mm_fake_tensors_agree_with_eager(grouping):
    """The output's shape and (padded) strides under fake tensors, what torch.compile traces
    with, are eager's: both come from ATen's own functions."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, b, offs = (None if t is None else t.to("openreg") for t in grouped_operands(grouping, [8, 16, 24], torch.float16, False))
    eager = torch._grouped_mm(a, b, offs=offs)
    with FakeTensorMode() as mode:
        fake = torch._grouped_mm(*(mode.from_tensor(t) for t in (a, b)), offs=None if offs is None else mode.from_tensor(offs))
    assert (fake.shape, fake.stride(), fake.device) == (eager.shape, eager.stride(), eager.device)


def test_grouped_mm_output_rows_are_padded_as_atens():
    """Five float16 columns: ATen pads each output row to 16 bytes (8 elements), on CPU, on the
    device and under fake tensors alike."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, b = torch.randn(24, 16).half(), torch.randn(3, 5, 16).half().transpose(1, 2)
    offs = torch.tensor([8, 16, 24], dtype=torch.int32)
    want = torch._grouped_mm(a, b, offs=offs)
    got = torch._grouped_mm(a.openreg(), b.openreg(), offs=offs.openreg())
    on_device = [t.openreg() for t in (a, b, offs)]
    with FakeTensorMode() as mode:
        fake = torch._grouped_mm(*(mode.from_tensor(t) for t in on_device))
    assert want.stride() == got.stride() == fake.stride() == (8, 1)
    torch.testing.assert_close(got.cpu(), want, **TOL[torch.float16])


def test_grouped_mm_offsets_out_of_order_stay_inside_the_operands():
    """The offsets are device values the kernel does not check (as CUDA's does not): ones out
    of order or range give empty or clipped groups, never a read or write outside."""
    a, b = torch.randn(6, 4, device="openreg"), torch.randn(3, 4, 8, device="openreg")
    out = torch._grouped_mm(a, b, offs=torch.tensor([4, 2, 99], dtype=torch.int32, device="openreg"))
    want = torch.cat([a[:4].cpu() @ b[0].cpu(), a[4:].cpu() @ b[2].cpu()])
    torch.testing.assert_close(out.cpu(), want)
    out = torch._grouped_mm(a, b, offs=torch.tensor([-3, 3, 3], dtype=torch.int32, device="openreg"))
    torch.testing.assert_close(out.cpu(), torch.cat([a[:3].cpu() @ b[1].cpu(), torch.zeros(3, 8)]))


def test_grouped_mm_does_not_wait_for_the_device():
    """The offsets are read on the stream: with a long kernel queued, the call returns before
    the stream is done (PyTorch's composite copies them to the host, which waits)."""
    a, b = torch.randn(24, 16, device="openreg"), torch.randn(3, 16, 8, device="openreg")
    offs = torch.tensor([8, 16, 24], dtype=torch.int32, device="openreg")
    big = torch.randn(1536, 1536, device="openreg")
    torch.openreg.synchronize()
    busy = big @ big @ big
    out = torch._grouped_mm(a, b, offs=offs)
    assert not torch.openreg.current_stream().query(), "the call waited for the stream"
    torch.openreg.synchronize()
    torch.testing.assert_close(out.cpu(), torch._grouped_mm(a.cpu(), b.cpu(), offs=offs.cpu()))
    del busy


def test_grouped_mm_errors_match_cpu():
    f32, i32 = torch.float32, torch.int32

    def errors_match(fn):
        with pytest.raises(Exception) as cpu:
            fn("cpu")
        with pytest.raises(type(cpu.value)) as dev:
            fn("openreg")
        assert str(dev.value) == str(cpu.value)

    offs = lambda d, *v: torch.tensor(v or [4, 8], dtype=i32, device=d)
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 5, 3, device=d), offs=offs(d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(3, 4, 3, device=d), offs=offs(d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 4, 4, device=d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 4, 4, device=d),
                                             offs=offs(d).long()))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 4, 4, device=d, dtype=torch.half),
                                             offs=offs(d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d, dtype=torch.long),
                                             torch.ones(2, 4, 4, device=d, dtype=torch.long), offs=offs(d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(2, 3, 4, device=d), torch.ones(2, 4, 4, device=d),
                                             offs=offs(d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 4, 4, device=d), offs=offs(d),
                                             bias=torch.ones(2, 4, device=d)))
    errors_match(lambda d: torch._grouped_mm(torch.ones(8, 4, device=d), torch.ones(2, 4, 4, device=d), offs=offs(d),
                                             out_dtype=torch.half))
    # Two 2-D operands whose contraction sizes differ: ATen's loop slices each by the offsets
    # (on the host) and fails only where a slice comes out short; one kernel needs them equal.
    with pytest.raises(RuntimeError, match="contraction dimension of mat_a and mat_b must match"):
        torch._grouped_mm(torch.ones(8, 16, device="openreg"), torch.ones(8, 8, device="openreg"), offs=offs("openreg"))
    # The offsets on another device than the operands: the device check of PyTorch's wrappers.
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._grouped_mm(torch.ones(8, 4, device="openreg"), torch.ones(2, 4, 4, device="openreg"), offs=offs("cpu"))


def test_addmm_beta_zero_ignores_nan_and_in_place():
    c = torch.full((2, 2), float("nan"))
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), c, a, b, device="openreg:0")
    x = torch.randn(2, 2)
    y = x.openreg()
    y.addmm_(a.openreg(), b.openreg(), alpha=0.5)
    torch.testing.assert_close(y.cpu(), x.addmm(a, b, alpha=0.5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((4, 10), 1), ((4, 10), 0), ((3, 5, 7), 1), ((3, 5, 7), -1),
                                       ((), 0), ((0, 4), 1), ((2, 700), 1), ((2, 3, 300), 1),
                                       # lanes split across threads (one block); rows with a tail
                                       ((300, 40), 0), ((5, 100), 1), ((3, 65), 1), ((37, 20), 1),
                                       # one row at a time just past the short rows; a last block under 16
                                       ((3, 41), 1), ((2, 260), 1), ((6, 16), 1)], ids=str)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_forward_and_backward(op, shape, dim, dtype, device):
    # Seeded: in 16-bit, a forward result one unit in the last place away from the CPU's (a
    # different order of summing) moves the gradient by more than the tolerance on some inputs.
    torch.manual_seed(0)
    x = torch.randn(shape).to(dtype)
    fn = getattr(torch.nn.functional, op)
    got = check(lambda t: fn(t, dim), x, device=device, dtype=dtype)
    assert got.dtype == dtype
    check(lambda t: fn(t.transpose(0, -1), dim) if t.dim() > 1 else fn(t, dim), x, device=device, dtype=dtype)
    grad = torch.randn(shape).to(dtype)
    expected = torch.autograd.grad(fn(x.requires_grad_(), dim), x, grad)[0]
    xd = x.detach().to(device).requires_grad_()
    got = torch.autograd.grad(fn(xd, dim), xd, grad.to(device))[0]
    torch.testing.assert_close(got.cpu(), expected, **TOL[dtype])
    # The backward kernel alone, from the same forward result on both sides: any inputs.
    backward = getattr(torch, f"_{op}_backward_data")
    y = fn(torch.randn(shape).to(dtype), dim)
    check(lambda g, y: backward(g, y, dim, dtype), grad, y, device=device, dtype=dtype)


def test_softmax_half_to_float_out_nan_and_inf():
    h = torch.randn(3, 4, dtype=torch.float16).openreg()
    assert torch._log_softmax(h, 1, True).dtype == torch.float32  # as CUDA does
    torch.testing.assert_close(torch._softmax(h, 1, True).cpu(), torch.softmax(h.cpu().float(), 1))
    for fn in [torch._softmax, torch._log_softmax]:  # backward: float32 grads, float16 result
        g = torch.randn(3, 4)
        x = h.clone().requires_grad_()
        got = torch.autograd.grad(fn(x, 1, True), x, g.openreg())[0]
        ref = h.cpu().float().requires_grad_()
        expected = torch.autograd.grad(fn(ref, 1, False), ref, g)[0]
        assert got.dtype == torch.float16
        torch.testing.assert_close(got.cpu().float(), expected, rtol=1e-2, atol=1e-2)
    x = torch.randn(3, 4)
    out = torch.empty(4, 3).t()  # not contiguous: computed aside, copied in
    got = torch._log_softmax(x.openreg(), 1, False, out=out.openreg())
    torch.testing.assert_close(got.cpu(), torch.log_softmax(x, 1))
    special = torch.tensor([[0.0, float("nan"), 1.0], [float("-inf"), 0.0, 1.0], [float("-inf")] * 3])
    # the same in rows long enough to go one at a time, in the overlapped last 16 too
    long = torch.randn(5, 100)
    long[0, 97], long[1, ::7], long[2], long[3, 3], long[4, 90] = float("nan"), float("-inf"), float("-inf"), float("inf"), float("inf")
    for fn in [torch.softmax, torch.log_softmax]:
        for t in [special, long]:
            torch.testing.assert_close(fn(t.openreg(), 1).cpu(), fn(t, 1), equal_nan=True)


def test_softmax_of_other_dtypes_runs_on_the_host_counted():
    x = torch.randn(3, 4, dtype=torch.float64)
    torch.openreg.reset_fallback_counts()
    xd = x.openreg().requires_grad_()
    y = torch.log_softmax(xd, 1)
    (grad,) = torch.autograd.grad(y.sum(), xd)
    xc = x.clone().requires_grad_()
    torch.testing.assert_close(grad.cpu(), torch.autograd.grad(torch.log_softmax(xc, 1).sum(), xc)[0])
    counts = torch.openreg.fallback_counts()
    assert counts["aten::_log_softmax (Double)"] == 1
    assert counts["aten::_log_softmax_backward_data (Double)"] == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_loss_and_cross_entropy(weighted, reduction, dtype, device):
    logits = torch.randn(8, 5).to(dtype)
    target = torch.tensor([0, 4, 2, -100, 1, 1, 3, 0])
    weight = torch.rand(5).to(dtype) if weighted else None
    f = torch.nn.functional
    for loss in [f.nll_loss, f.cross_entropy]:
        fn = lambda x, t, w: loss(x, t, weight=w, reduction=reduction)  # noqa: E731
        check(fn, logits, target, weight, device=device, dtype=dtype)
        x = logits.clone().requires_grad_()
        expected = torch.autograd.grad(fn(x, target, weight).sum(), x)[0]
        xd = logits.to(device).requires_grad_()
        wd = None if weight is None else weight.to(device)
        got = torch.autograd.grad(fn(xd, target.to(device), wd).sum(), xd)[0]
        torch.testing.assert_close(got.cpu(), expected, **TOL[dtype])
    # One sample: 1-D input, 0-D target; a batch of nothing (forward and backward).
    for x, t in [(logits[0], target[1]), (logits[:0], target[:0])]:
        check(lambda x, t: f.nll_loss(x, t, reduction=reduction), x, t, device=device, dtype=dtype)
        xc, xd = x.clone().requires_grad_(), x.to(device).requires_grad_()
        expected = torch.autograd.grad(f.nll_loss(xc, t, reduction=reduction).sum(), xc)[0]
        got = torch.autograd.grad(f.nll_loss(xd, t.to(device), reduction=reduction).sum(), xd)[0]
        torch.testing.assert_close(got.cpu(), expected, **TOL[dtype])


def test_nll_loss_errors_and_host_path_match_cpu():
    f = torch.nn.functional
    # A class index is data on the device: the kernel checks it on the stream, and the stream
    # reports CPU's error at its next synchronize (a device-side assert); on an idle stream the
    # small task runs at once and the call raises. Queued behind other work, the call returns.
    for bad in [5, -1]:
        for reduction in ["mean", "none"]:
            x, t = torch.randn(3, 4), torch.tensor([0, bad, 1])
            with pytest.raises(IndexError, match=rf"^Target {bad} is out of bounds\.$"):
                f.nll_loss(x, t, reduction=reduction)
            with pytest.raises(IndexError, match=rf"Target {bad} is out of bounds\.$"):
                f.nll_loss(x.openreg(), t.openreg(), reduction=reduction)
                torch.openreg.synchronize()
            assert torch.equal((torch.ones(3, device="openreg") * 2).cpu(), torch.full((3,), 2.0))
    same_error(f.nll_loss, torch.randn(3, 4), torch.tensor([0, 1]))
    same_error(f.nll_loss, torch.randn(3, 4, 2, 2, 2), torch.zeros(3, 2, 2, dtype=torch.long))
    same_error(lambda x, t, w: f.nll_loss(x, t, weight=w), torch.randn(3, 4), torch.tensor([0, 1, 2]), torch.ones(3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        f.nll_loss(torch.randn(3, 4, device="openreg"), torch.tensor([0, 1, 2]))
    # Byte targets and float64 run CPU's kernel on the host (counted), with the same results.
    torch.openreg.reset_fallback_counts()
    x, t = torch.randn(3, 4, dtype=torch.float64), torch.tensor([0, 3, 1], dtype=torch.uint8)
    check(f.nll_loss, x, t, device="openreg:0")
    assert torch.openreg.fallback_counts() == {"aten::nll_loss_forward (Double)": 1}


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_nll_loss_does_not_wait_for_the_device(reduction):
    """The class indices are read on the stream: with a long kernel queued, the loss and its
    backward return before the stream is done (reading them on the host would wait for it),
    and a bad index queued that way is reported at the synchronize."""
    a = torch.randn(1536, 1536, device="openreg")
    x = torch.randn(8, 5, device="openreg", requires_grad=True)
    for target, error in [(torch.tensor([0, 4, 2, -100, 1, 1, 3, 0]), None), (torch.tensor([0, 9] * 4), "Target 9")]:
        target = target.openreg()
        torch.openreg.synchronize()
        busy = a @ a @ a
        loss = torch.nn.functional.cross_entropy(x, target, reduction=reduction)
        loss.sum().backward()
        assert not torch.openreg.current_stream().query(), "the loss waited for the stream"
        if error is None:
            torch.openreg.synchronize()
        else:
            with pytest.raises(IndexError, match=error):
                torch.openreg.synchronize()
        del busy


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("padding_idx,scale_grad_by_freq", [(None, False), (2, False), (None, True), (0, True)])
def test_embedding_backward_matches_cpu(dtype, padding_idx, scale_grad_by_freq):
    idx = torch.tensor([[1, 2, 2, 0], [9, 0, 2, 2]], dtype=dtype)
    w = torch.randn(10, 5)
    for indices in [idx, idx.t(), idx[:, ::2], idx[:0]]:  # transposed, strided, empty
        wc, wd = w.clone().requires_grad_(), w.openreg().requires_grad_()
        for weight, index in [(wc, indices), (wd, indices.openreg())]:
            out = torch.nn.functional.embedding(index, weight, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
            (out * torch.arange(out.numel(), dtype=out.dtype, device=out.device).view(out.shape)).sum().backward()
        torch.testing.assert_close(wd.grad.cpu(), wc.grad)


def test_embedding_backward_does_not_wait_for_the_device():
    """The indices are read on the stream: with a long kernel queued, the backward returns
    before the stream is done (reading them on the host would wait for it, at the end of a
    language model's backward pass), and a bad index queued that way is reported at the
    synchronize as CPU's IndexError."""
    a = torch.randn(1536, 1536, device="openreg")
    g = torch.randn(4, 3, device="openreg")
    for indices, error in [([1, 0, 7, 1], None), ([1, 12, 3, 0], "index 12 is out of range for 8 weights")]:
        indices = torch.tensor(indices, device="openreg")
        torch.openreg.synchronize()
        busy = a @ a @ a
        grad = torch.ops.aten.embedding_dense_backward(g, indices, 8, -1, False)
        assert not torch.openreg.current_stream().query(), "the backward waited for the stream"
        if error is None:
            torch.openreg.synchronize()
            want = torch.ops.aten.embedding_dense_backward(g.cpu(), indices.cpu(), 8, -1, False)
            torch.testing.assert_close(grad.cpu(), want)
        else:
            with pytest.raises(IndexError, match=error):
                torch.openreg.synchronize()
        del busy


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_index_select_does_not_wait_for_the_device(dtype):
    """An embedding's forward (index_select) reads its indices on the stream too: the first
    operator of a step does not wait for the last step's optimizer, and a bad index queued that
    way is reported at the synchronize as CPU's IndexError."""
    a = torch.randn(1536, 1536, device="openreg")
    w = torch.randn(8, 3, device="openreg")
    for indices, error in [([1, 0, 7, 1], None), ([1, 8, 3], "index out of range in self")]:
        indices = torch.tensor(indices, dtype=dtype, device="openreg")
        torch.openreg.synchronize()
        busy = a @ a @ a
        rows = torch.nn.functional.embedding(indices, w)
        assert not torch.openreg.current_stream().query(), "index_select waited for the stream"
        if error is None:
            torch.openreg.synchronize()
            torch.testing.assert_close(rows.cpu(), w.cpu()[indices.cpu()])
        else:
            with pytest.raises(IndexError, match=error):
                torch.openreg.synchronize()
        del busy


def test_linear_and_mlp_gradients_match_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to("openreg")
    torch.nn.functional.cross_entropy(model(x.openreg()), y.openreg()).backward()
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad.cpu(), e)


# ---- bad input: the same exception type and message as CPU ----

def same_error(fn, *inputs):
    with pytest.raises(Exception) as cpu:
        fn(*inputs)
    with pytest.raises(type(cpu.value)) as dev:
        fn(*[t.openreg() if isinstance(t, torch.Tensor) else t for t in inputs])
    assert str(dev.value).replace("openreg:0", "cpu") == str(cpu.value), (dev.value, cpu.value)


def test_errors_match_cpu():
    same_error(torch.add, torch.ones(2, 3), torch.ones(4))
    same_error(torch.mm, torch.ones(2, 3), torch.ones(4, 2))
    same_error(torch.bmm, torch.ones(2, 3, 4), torch.ones(2, 5, 4))
    same_error(torch.addmm, torch.ones(3), torch.ones(2, 3), torch.ones(3, 2))
    same_error(lambda a, b: a.add_(b), torch.ones(3), torch.ones(2, 3))
    same_error(lambda a, b: torch.add(a, b, out=torch.empty(2, dtype=torch.int64, device=a.device)),
               torch.ones(2), torch.ones(2))
    same_error(lambda a: a - a, torch.ones(2, dtype=torch.bool))
    same_error(lambda a: a.relu(), torch.ones(2, dtype=torch.bool))
    same_error(torch.mm, torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float16))


def test_out_of_the_wrong_size_is_resized_with_the_cpu_warning():
    for device in ["cpu", "openreg"]:
        out = torch.empty(5, device=device)
        with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
            torch.add(torch.ones(2, 2, device=device), 1, out=out)
        assert out.shape == (2, 2) and out.cpu().eq(2).all()


def test_mixed_devices_and_out_on_another_device():
    a, b = torch.ones(2, 2, device="openreg:0"), torch.ones(2, 2, device="openreg:1")
    for fn in [lambda: torch.mm(a, b), lambda: torch.bmm(a[None], b[None]), lambda: torch.addmm(a, a, b)]:
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()
    with pytest.raises(RuntimeError, match="found at least two devices"):
        torch.add(torch.ones(2, device="openreg:0"), torch.ones(2, device="openreg:0"),
                  out=torch.empty(2, device="openreg:1"))
    with pytest.raises(RuntimeError, match="found at least two devices"):
        torch.add(torch.ones(2, device="openreg:0"), torch.ones(2))
    with pytest.raises(RuntimeError, match="Expected out tensor to have device openreg:0, but got cpu"):
        torch.mm(torch.ones(2, 2, device="openreg:0"), torch.ones(2, 2, device="openreg:0"),
                 out=torch.empty(2, 2))


def test_kernels_are_queued_on_the_current_stream():
    x = torch.randn(1 << 21, device="openreg:0")
    s = torch.Stream(device="openreg:0")
    with s:
        torch.openreg._sleep(100)
        y = x * 2 + 1
        z = y.sum()
        assert not s.query()
        torch.testing.assert_close(z.cpu(), (x.cpu() * 2 + 1).sum(), rtol=1e-4, atol=1e-2)


def test_native_kernels_do_not_fall_back():
    torch.openreg.reset_fallback_counts()
    a = torch.randn(8, 8, dtype=torch.float16).openreg()
    torch.openreg.reset_fallback_counts()
    ((a @ a).relu() * 2 - a / 3).exp().sum(0).mean()
    a.float().tanh().sigmoid().amax(1)
    logits = a.float().requires_grad_()
    torch.nn.functional.cross_entropy(logits, torch.arange(8).openreg()).backward()
    torch.softmax(logits, 0).sum().backward()
    assert torch.openreg.fallback_counts() == {}
