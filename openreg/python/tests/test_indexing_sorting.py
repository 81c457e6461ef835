"""The kernels that index, sort, count and divide with rounding, through the correctness matrix:
both devices, the dtypes they compute in, non-contiguous and transposed operands, out=,
empty and 0-dim tensors, against CPU; none of them reaches the CPU fallback."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def make(shape, dtype, low=-9, high=9):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(max(low, 0) if dtype == torch.uint8 else low, high, shape, dtype=dtype)


def on(device, tree):
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in tree]


def native(fn, *args, device):
    """fn on CPU and on the device; the device's result, after checking no fallback ran."""
    torch.openreg.reset_fallback_counts()
    got = fn(*on(device, args))
    assert torch.openreg.fallback_counts() == {}, torch.openreg.fallback_counts()
    return got, fn(*args)


def exact_then_rounded(fn, *args):
    """fn computed in float64 from 16-bit float inputs, rounded once to their dtype: what our
    kernels give (they compute in float32 and round once), where CPU's may round in between."""
    wide = [a.double() if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16) else a
            for a in args]
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    result = fn(*wide)
    return tuple(r.to(dtype) if r.is_floating_point() else r for r in result) if isinstance(result, tuple) \
        else result.to(dtype)


def same(got, expected):
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert g.device.type == "openreg"
        torch.testing.assert_close(g.cpu(), e, equal_nan=True, atol=0, rtol=0)


# ANCHOR: index_cases
INDEX_CASES = {
    "one index": lambda x, i, m: x[i],
    "negative and repeated": lambda x, i, m: x[torch.tensor([-1, 0, -1])],
    "two broadcast indices": lambda x, i, m: x[i.view(-1, 1), i.view(1, -1)],
    "slice then index": lambda x, i, m: x[:, i],
    "index, slice, index": lambda x, i, m: x[i, 1:3, i],
    "bool mask": lambda x, i, m: x[m],
    "mask then slice": lambda x, i, m: x[m[:, :, 0]],
    "transposed source": lambda x, i, m: x.transpose(0, 1)[i],
    "empty index": lambda x, i, m: x[i[:0]],
    "CPU indices": lambda x, i, m: x[i.cpu()],
}
# ANCHOR_END: index_cases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool, torch.complex64])
@pytest.mark.parametrize("case", INDEX_CASES, ids=str)
def test_index(case, dtype, device):
    torch.manual_seed(0)
    x = make((4, 5, 6), dtype) if dtype not in (torch.bool, torch.complex64) else \
        (torch.randn(4, 5, 6) > 0 if dtype == torch.bool else torch.randn(4, 5, 6, dtype=dtype))
    i, m = torch.tensor([3, 0, 2]), torch.rand(4, 5, 6) > 0.5
    fn = INDEX_CASES[case]
    got, expected = native(lambda x, i, m: fn(x, i, m), x, i, m, device=device)
    same(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_index_errors_are_cpus(device):
    x = torch.randn(3, 4, device=device)
    # The index values are read by the kernel, on the stream: a bad one is the stream's error,
    # raised by the call when the kernel ran at once (an idle stream), else at the synchronize.
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[torch.tensor([3], device=device)]
        torch.openreg.synchronize(device)
    with pytest.raises(IndexError, match=r"index -5 is out of bounds for dimension 1 with size 4"):
        busy = torch.randn(2048, 2048, device=device) @ torch.randn(2048, 2048, device=device)
        x[:, torch.tensor([[0, -5]], device=device)]
        torch.openreg.synchronize(device)
    assert torch.equal(x[torch.tensor([-1])].cpu(), x.cpu()[-1:])  # the stream works after
    del busy
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[torch.tensor([0]), torch.tensor([0]), torch.tensor([0])]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        x[torch.tensor([0.0], device=device)]
    with pytest.raises(IndexError, match="The shape of the mask"):
        x[torch.ones(4, dtype=torch.bool, device=device)]
    with pytest.raises(IndexError, match="indices should be either on cpu or on the same device"):
        x[torch.tensor([0], device="openreg:1" if device.endswith("0") else "openreg:0")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate, dtype, device):
    if accumulate and dtype == torch.bool:
        pytest.skip("bool has no sum: CPU adds as logical or; covered by the host path test below")
    torch.manual_seed(0)
    x = make((5, 6), dtype) if dtype != torch.bool else torch.rand(5, 6) > 0.5
    rows, cols = torch.tensor([4, 0, 4]), torch.tensor([1, 2, 1])
    v = make((3,), dtype) if dtype != torch.bool else torch.tensor([True, False, True])
    mask = torch.tensor([True, False, True, True, False])
    for index in ([rows, cols], [rows], [mask], [rows.cpu(), cols]):
        values = v if len(index) == 2 else v[:1].expand(int(index[0].sum()) if index[0].dtype == torch.bool else 3, 6)
        # Repeated positions are written (or accumulate) in order, as on CPU.
        got, expected = native(lambda x, values, *idx: x.clone().index_put_(idx, values, accumulate=accumulate),
                               x, values, *index, device=device)
        same(got, expected)


# Writes through integer indices: the values' shape is the indexing result's, or broadcasts to
# it. Each case returns the written base tensor (a view's writes land in it).
PUT_CASES = {
    "one index": lambda x, i, v, acc: put(x, [i], v(3, 5, 6), acc),
    "negative and repeated": lambda x, i, v, acc: put(x, [torch.tensor([-1, 0, -1, 3]).to(i.device)], v(4, 5, 6), acc),
    "two broadcast indices": lambda x, i, v, acc: put(x, [i.view(-1, 1), i.view(1, -1)], v(3, 3, 6), acc),
    "slice then index": lambda x, i, v, acc: put(x, [None, i], v(4, 3, 6), acc),
    "index, slice, index": lambda x, i, v, acc: put(x, [i, None, i], v(3, 5), acc),
    "value broadcast": lambda x, i, v, acc: put(x, [i, i], v(6), acc),
    "0-dim index": lambda x, i, v, acc: put(x, [i[0]], v(5, 6), acc),
    "int32 indices": lambda x, i, v, acc: put(x, [i.int()], v(3, 5, 6), acc),
    "CPU indices": lambda x, i, v, acc: put(x, [i.cpu()], v(3, 5, 6), acc),
    "empty index": lambda x, i, v, acc: put(x, [i[:0]], v(0, 5, 6), acc),
    "transposed target": lambda x, i, v, acc: (put(x.transpose(0, 2), [i], v(3, 5, 4), acc), x)[1],
    "strided target": lambda x, i, v, acc: (put(x[:, ::2], [i], v(3, 3, 6), acc), x)[1],
}


def put(x, indices, values, accumulate):
    """`x[indices] = values` (`+=` with accumulate, repeated positions adding up); None in
    `indices` stands for a whole dimension, as `:` does in `x[:, i]`."""
    return torch.ops.aten.index_put_(x, indices, values, accumulate)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.float64] + INTS + [torch.bool, torch.complex64])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("case", PUT_CASES, ids=str)
def test_index_put_through_integer_indices(case, accumulate, dtype, device):
    if accumulate and dtype in (torch.bool, torch.complex64):
        pytest.skip("no device sum for bool or complex: the host path, in test_index_put")
    torch.manual_seed(0)
    values = make((24, 30), dtype) if dtype not in (torch.bool, torch.complex64) else \
        (torch.rand(24, 30) > 0.5 if dtype == torch.bool else torch.randn(24, 30, dtype=dtype))
    x = make((4, 5, 6), dtype) if dtype not in (torch.bool, torch.complex64) else torch.zeros(4, 5, 6, dtype=dtype)
    fn = PUT_CASES[case]

    def write(x, i, values):
        def v(*shape):  # values of that shape, the same on both devices
            return values.flatten()[:torch.Size(shape).numel()].view(shape)
        return fn(x.clone(), i, v, accumulate)

    got, expected = native(write, x, torch.tensor([3, 0, 3]), values, device=device)
    same(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_a_write_out_of_range_is_cpus_index_error_and_writes_nothing(device):
    x = torch.randn(3, 4, device=device)
    before = x.cpu()
    for index, message in [((torch.tensor([0, 3]),), "index 3 is out of bounds for dimension 0 with size 3"),
                           ((slice(None), torch.tensor([[0, -5]])), "index -5 is out of bounds for dimension 1 with size 4")]:
        with pytest.raises(IndexError, match=message):
            x.cpu()[index] = 1.0  # CPU's class and message
        with pytest.raises(IndexError, match=message):
            x[tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in index)] = 1.0
            torch.openreg.synchronize(device)
        assert torch.equal(x.cpu(), before)  # every index is checked before any write
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_add_(0, torch.tensor([0, 3], device=device), torch.ones(2, 4, device=device))
        torch.openreg.synchronize(device)
    assert torch.equal(x.cpu(), before)


@pytest.mark.parametrize("write", ["index", "index_put_", "index_put_ accumulate", "index_add_"])
def test_integer_indices_do_not_wait_for_the_device(write):
    """The index values are read on the stream: with a long kernel queued, the call returns
    before the stream is done (reading them on the host would have waited for it)."""
    x, i = torch.randn(64, 8, device="openreg"), torch.tensor([5, 1, 5], device="openreg")
    ops = {"index": lambda: x[i], "index_put_": lambda: x.index_put_((i,), torch.ones(8, device="openreg")),
           "index_put_ accumulate": lambda: x.index_put_((i,), torch.ones(8, device="openreg"), accumulate=True),
           "index_add_": lambda: x.index_add_(0, i, torch.ones(3, 8, device="openreg"))}
    a = torch.randn(1536, 1536, device="openreg")
    torch.openreg.synchronize()
    busy = a @ a @ a
    ops[write]()
    assert not torch.openreg.current_stream().query(), "the call waited for the stream"
    torch.openreg.synchronize()
    del busy


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_and_scatter_add(dim, dtype, device):
    torch.manual_seed(0)
    x, src = make((4, 5), dtype), make((3, 5), dtype)
    index = torch.randint(0, 4, (3, 4))
    for fn in [lambda x, i, s: x.scatter(dim, i, s), lambda x, i, s: x.scatter_add(dim, i, s),
               lambda x, i, s: x.scatter(dim, i, 7), lambda x, i, s: x.t().scatter_add(dim, i.t()[:2], s.t()),
               lambda x, i, s: torch.scatter_add(x, dim, i, s, out=torch.empty_like(x)),
               lambda x, i, s: x.clone().scatter_add_(dim, i[:0], s)]:
        # A plain scatter with repeated indices keeps the last write, as CPU's serial kernel.
        got, expected = native(fn, x, index, src, device=device)
        if dtype == torch.bfloat16:
            # Each add to a repeated index rounds to bfloat16 (as CUDA's atomic adds do), in
            # an order of its own: an ulp or two of the partial sums (about 4) apart from CPU.
            torch.testing.assert_close(got.cpu(), expected, atol=2 * 4 * 2 ** -8, rtol=2 ** -7)
        else:
            same(got, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(descending, dim, dtype, device):
    torch.manual_seed(0)
    x = make((4, 7, 5), dtype)
    for fn in [lambda x: torch.sort(x, dim=dim, descending=descending, stable=True),
               lambda x: torch.sort(x.transpose(0, 2), dim=dim, descending=descending, stable=True),
               lambda x: torch.sort(x, dim=dim, descending=descending, stable=True,
                                    out=(torch.empty(0, dtype=x.dtype, device=x.device),
                                         torch.empty(0, dtype=torch.long, device=x.device)))]:
        got, expected = native(fn, x, device=device)
        same(tuple(got), tuple(expected))


@pytest.mark.parametrize("device", DEVICES)
def test_sort_nan_empty_and_scalar(device):
    x = torch.tensor([2.0, float("nan"), -1.0, float("nan"), 0.0, -0.0])
    for descending in (False, True):
        got, expected = native(lambda x: torch.sort(x, descending=descending, stable=True), x, device=device)
        same(tuple(got), tuple(expected))
    for x in (torch.tensor(3.0), torch.empty(0), torch.empty(2, 0)):
        got, expected = native(lambda x: torch.sort(x, stable=True), x, device=device)
        same(tuple(got), tuple(expected))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest, dtype, device):
    torch.manual_seed(0)
    x = torch.randperm(4 * 9 * 5).reshape(4, 9, 5).to(dtype)  # no ties: CPU's order is unique
    for fn in [lambda x: torch.topk(x, 3, dim=1, largest=largest),
               lambda x: torch.topk(x.transpose(1, 2), 2, largest=largest),
               lambda x: torch.topk(x, 0, dim=0, largest=largest),
               lambda x: torch.topk(x[0, 0, 0], 1, largest=largest),
               lambda x: torch.topk(x, 5, dim=-1, largest=largest,
                                    out=(torch.empty(0, dtype=x.dtype, device=x.device),
                                         torch.empty(0, dtype=torch.long, device=x.device)))]:
        got, expected = native(fn, x, device=device)
        same(tuple(got), tuple(expected))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16] + INTS)
def test_histc(dtype, device):
    torch.manual_seed(0)
    x = make((7, 9), dtype, low=-5, high=12)
    reference = lambda x, **kw: torch.histc(x.float() if not x.dtype.is_floating_point or x.dtype != torch.float32  # noqa: E731
                                              else x, **kw).to(x.dtype)
    for kw in [dict(bins=10, min=-5, max=12), dict(bins=4), dict(bins=3, min=0, max=2), dict(bins=1)]:
        torch.openreg.reset_fallback_counts()
        got = torch.histc(x.to(device), **kw)
        assert torch.openreg.fallback_counts() == {}
        torch.testing.assert_close(got.cpu(), reference(x, **kw))
    # A transposed input, out=, an empty input, and the edges: floats land where CPU's do.
    edges = torch.linspace(-1, 1, 8)
    same(torch.histc(edges.to(device), bins=7, min=-1, max=1), torch.histc(edges, bins=7, min=-1, max=1))
    y = torch.randn(4, 5)
    out = torch.empty(3, device=device)
    got = torch.histc(y.t().to(device), bins=3, min=-1, max=1, out=out)
    assert got is out
    same(got, torch.histc(y.t(), bins=3, min=-1, max=1))
    same(torch.histc(torch.empty(0, device=device), bins=3), torch.histc(torch.empty(0), bins=3))


@pytest.mark.parametrize("device", DEVICES)
def test_histc_errors_are_cpus(device):
    x = torch.randn(5, device=device)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, bins=0)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, min=2, max=1)
    with pytest.raises(RuntimeError, match=r"range of \[1, inf\] is not finite"):
        torch.histc(torch.tensor([1.0, float("inf")], device=device))
    with pytest.raises(RuntimeError, match="should have the same dtype"):
        torch.histc(x, out=torch.empty(3, dtype=torch.float64, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.int8, torch.uint8])
@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_div_rounding(mode, dtype, device):
    torch.manual_seed(0)
    a, b = make((6, 7), dtype, low=-50, high=50), make((7,), dtype, low=1, high=9)
    if not dtype.is_floating_point and dtype != torch.uint8:
        b = b * torch.where(torch.arange(7) % 2 == 0, 1, -1).to(dtype)
    for fn in [lambda a, b: torch.div(a, b, rounding_mode=mode), lambda a, b: torch.div(a.t(), 3, rounding_mode=mode),
               lambda a, b: torch.div(a, b, rounding_mode=mode, out=torch.empty(0, dtype=a.dtype, device=a.device)),
               lambda a, b: a.clone().div_(b, rounding_mode=mode)]:
        expected = exact_then_rounded(fn, a, b) if dtype in (torch.float16, torch.bfloat16) else fn(a, b)
        same(fn(*on(device, (a, b))), expected)
    # A CPU scalar divisor stays on the device; a tensor of integer divisors is read by CPU's kernel.
    got, expected = native(lambda a: a // 4, a, device=device)
    same(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_integer_division_by_zero_is_cpus_error(device):
    a = torch.arange(4, device=device)
    for divisor in (0, torch.zeros(4, dtype=torch.long, device=device)):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            torch.div(a, divisor, rounding_mode="floor")
    assert torch.div(a.float(), 0, rounding_mode="floor").cpu().isinf()[1:].all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.bool])
def test_addr(dtype, device):
    torch.manual_seed(0)
    if dtype == torch.bool:
        x, v1, v2 = torch.rand(4, 5) > 0.5, torch.rand(4) > 0.5, torch.rand(5) > 0.5
        cases = [lambda x, a, b: torch.addr(x, a, b)]
    else:
        x, v1, v2 = make((4, 5), dtype), make((4,), dtype), make((5,), dtype)
        cases = [lambda x, a, b: torch.addr(x, a, b), lambda x, a, b: torch.addr(x, a, b, beta=0, alpha=2),
                 lambda x, a, b: torch.addr(x[:1], a, b, beta=2), lambda x, a, b: torch.addr(x.t().t(), a, b),
                 lambda x, a, b: torch.addr(x, a, b, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                 lambda x, a, b: x.clone().addr_(a, b, alpha=-1)]
    for fn in cases:
        got = fn(*on(device, (x, v1, v2)))
        if dtype in (torch.float16, torch.bfloat16):
            # One rounding from float32, against CPU's several: within one ulp of the exact result.
            eps = torch.finfo(dtype).eps
            torch.testing.assert_close(got.cpu(), exact_then_rounded(fn, x, v1, v2), atol=eps, rtol=eps)
        else:
            torch.testing.assert_close(got.cpu(), fn(x, v1, v2), atol=0, rtol=0)
