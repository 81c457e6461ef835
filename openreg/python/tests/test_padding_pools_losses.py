"""The last operators module_db sent to the fallback, now on the device: reflection and
replication padding (Padding.cpp), 3-D and adaptive max pooling (Pooling.cpp), the margin
losses (LossMargin.cpp), CTC (LossCTC.cpp), index_add, masked_select and CELU. Each against CPU
over dtypes, layouts, both devices, out=, empty and 0-dim inputs, forward and backward, with no
fallback; bad input gives CPU's error."""

import re

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["openreg:0", "openreg:1"]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype in (torch.float32, torch.float64) else dict(rtol=2e-2, atol=2e-2)


def twins(shape, dtype, device, seed=0, layout=lambda x: x, scale=3.0):
    """The same values on CPU and the device, through the same `layout` (a view)."""
    base = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale
    cpu = layout(base.to(dtype).clone()).requires_grad_(dtype.is_floating_point)
    dev = layout(base.to(dtype).to(device)).requires_grad_(dtype.is_floating_point)
    return cpu, dev


def compare(fn, cpu, dev, dtype, fallback=(), cpu_in_float32=False):
    """fn on both devices, forward and backward (a weighted sum of every output, so each output
    element has its own gradient); the device reaches no fallback but `fallback`. With
    `cpu_in_float32`, CPU (which lacks the 16-bit kernel) computes in float32."""
    if cpu_in_float32 and dtype in (torch.float16, torch.bfloat16):
        widen = lambda t: t.detach().float().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
        wide = [widen(t) for t in cpu]
        return _compare(fn, wide, dev, dtype, fallback, narrow=True)
    return _compare(fn, cpu, dev, dtype, fallback)


def _compare(fn, cpu, dev, dtype, fallback, narrow=False):
    torch.openreg.reset_fallback_counts()
    got = fn(*dev)
    got = got if isinstance(got, tuple) else (got,)
    weight = (1 + torch.arange(got[0].numel()) % 3).reshape(got[0].shape)
    if got[0].requires_grad and got[0].numel():
        (got[0].float() * weight.to(got[0].device)).sum().backward()
    reached = set(torch.openreg.fallback_counts())
    want = fn(*cpu)
    want = want if isinstance(want, tuple) else (want,)
    if want[0].requires_grad and want[0].numel():
        (want[0].float() * weight).sum().backward()
    assert reached == set(fallback), reached
    cast = (lambda t: t.to(dtype) if t.is_floating_point() else t) if narrow else (lambda t: t)
    for g, w in zip(got, want):
        w = cast(w.detach())
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        torch.testing.assert_close(g.detach().cpu(), w, equal_nan=True, **tolerance(dtype))
    for d, c in zip(dev, cpu):
        if isinstance(c, torch.Tensor) and c.grad is not None:
            torch.testing.assert_close(d.grad.cpu(), cast(c.grad), equal_nan=True, **tolerance(dtype))


def same_error(fn, cpu, dev):
    with pytest.raises(Exception) as want:
        fn(*cpu)
    with pytest.raises(type(want.value), match=re.escape(str(want.value).splitlines()[0])):
        fn(*dev)


# -- padding ------------------------------------------------------------------------------------

PADS = {
    # (functional mode, dims): a padding that crops one side, one wider than 1
    ("reflect", 1): (2, 1), ("reflect", 2): (1, 2, 0, 1), ("reflect", 3): (1, 0, 2, 1, 1, 1),
    ("replicate", 1): (3, -1), ("replicate", 2): (4, 1, -1, 2), ("replicate", 3): (1, 2, 0, 3, 2, 1),
}
PAD_LAYOUTS = {
    "contiguous": lambda x: x,
    "transposed": lambda x: x.transpose(-1, -2).contiguous().transpose(-1, -2),
    "strided": lambda x: x[..., ::2],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("layout", sorted(PAD_LAYOUTS))
@pytest.mark.parametrize("mode,dims", sorted(PADS))
def test_padding_matches_cpu_forward_and_backward(mode, dims, layout, dtype, device):
    shape = (2, 3) + (4, 5, 8)[-dims:]
    c, d = twins(shape, dtype, device, layout=PAD_LAYOUTS[layout])
    # float64's backward has no accumulating kernel: its sums (and the zeros they start from)
    # run on the host, counted.
    name = f"{mode.replace('reflect', 'reflection').replace('replicate', 'replication')}_pad{dims}d_backward"
    host = {f"aten::{name} (Double)", "aten::fill_ (Double)"}
    compare(lambda x: F.pad(x, PADS[mode, dims], mode=mode), [c], [d], dtype,
            fallback=() if dtype != torch.float64 else host)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,dims", sorted(PADS))
def test_padding_without_batch_with_empty_batch_and_channels_last(mode, dims, device):
    pad = PADS[mode, dims]
    for shape in [(3,) + (4, 5, 8)[-dims:], (0, 3) + (4, 5, 8)[-dims:]]:
        c, d = twins(shape, torch.float32, device)
        compare(lambda x: F.pad(x, pad, mode=mode), [c], [d], torch.float32)
    if dims >= 2:
        fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
        c, d = twins((2, 3) + (4, 5, 8)[-dims:], torch.float32, device, layout=lambda x: x.to(memory_format=fmt))
        compare(lambda x: F.pad(x, pad, mode=mode), [c], [d], torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_padding_out_and_integers(device):
    x = torch.arange(24).reshape(2, 3, 4)
    for op, pad in [(torch.ops.aten.reflection_pad1d, [2, 3]), (torch.ops.aten.replication_pad1d, [4, 0])]:
        out = torch.empty(1, device=device)
        assert op.out(x.float().to(device), pad, out=out) is out
        torch.testing.assert_close(out.cpu(), op(x.float(), pad))
        torch.testing.assert_close(op(x.to(device), pad).cpu(), op(x, pad))  # int64: the gather moves bytes


@pytest.mark.parametrize("device", DEVICES)
def test_padding_errors_are_cpus(device):
    x = torch.randn(1, 2, 3)
    same_error(lambda t: F.pad(t, (3, 0), mode="reflect"), [x], [x.to(device)])  # pad >= size
    same_error(lambda t: F.pad(t, (-3, -1), mode="replicate"), [x], [x.to(device)])  # nothing left
    same_error(lambda t: F.pad(t, (1, 1), mode="reflect"), [torch.randn(2, 0, 3)], [torch.randn(2, 0, 3, device=device)])
    x = torch.randn(1, 2, 3, 3)
    same_error(lambda t: F.pad(t, (3, 1, 1, 1), mode="reflect"), [x], [x.to(device)])
    g = torch.randn(1, 2, 3, 4)
    same_error(lambda g, t: torch.ops.aten.reflection_pad2d_backward(g, t, [1, 1, 1, 1]), [g, x], [g.to(device), x.to(device)])


# -- pooling ------------------------------------------------------------------------------------

POOL_LAYOUTS = {
    "contiguous": lambda x: x,
    "channels_last_3d": lambda x: x.to(memory_format=torch.channels_last_3d),
    "transposed": lambda x: x.transpose(-1, -2),
}
POOLS = {
    "avg": lambda x: F.avg_pool3d(x, 3, stride=2, padding=1),
    "avg_ceil_exclude_pad": lambda x: F.avg_pool3d(x, (2, 3, 2), stride=(1, 2, 3), padding=(1, 1, 0), ceil_mode=True, count_include_pad=False),
    "avg_divisor": lambda x: F.avg_pool3d(x, 2, divisor_override=3),
    "max": lambda x: F.max_pool3d(x, 3, stride=2, padding=1),
    "max_dilated_ceil": lambda x: F.max_pool3d(x, 2, stride=(2, 1, 3), dilation=(1, 2, 2), ceil_mode=True),
    "max_indices": lambda x: F.max_pool3d(x, (1, 3, 2), return_indices=True),
    "adaptive_avg": lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)),
    "adaptive_max": lambda x: F.adaptive_max_pool3d(x, (3, 2, 5), return_indices=True),
    "adaptive_max_2d": lambda x: F.adaptive_max_pool2d(x.flatten(1, 2), (4, 3), return_indices=True),
    "adaptive_max_1d": lambda x: F.adaptive_max_pool1d(x.flatten(2), 7, return_indices=True),
}


# Every layout in float32; the 16-bit floats in one (the layout path does not depend on the dtype).
LAYOUT_DTYPES = [(layout, torch.float32) for layout in sorted(POOL_LAYOUTS)] + [("contiguous", t) for t in FLOATS[1:]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,dtype", LAYOUT_DTYPES)
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_pooling_matches_cpu_forward_and_backward(pool, layout, dtype, device):
    c, d = twins((2, 3, 5, 6, 7), dtype, device, layout=POOL_LAYOUTS[layout])
    compare(POOLS[pool], [c], [d], dtype, cpu_in_float32=pool.startswith("avg"))


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_nan_unbatched_and_empty_batch(device):
    x = torch.randn(3, 4, 5, 6)
    x[0, 1, 2, 3] = float("nan")
    for pool in POOLS.values():
        compare(pool, [x.clone().requires_grad_()], [x.to(device).requires_grad_()], torch.float32)
    for pool in ["avg", "max", "adaptive_max"]:
        c, d = twins((0, 3, 4, 5, 6), torch.float32, device)
        compare(POOLS[pool], [c], [d], torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_out_variants(device):
    x = torch.randn(2, 3, 4, 5, 6)
    out = torch.empty(0, device=device)
    assert torch.ops.aten.avg_pool3d.out(x.to(device), [2, 2, 2], out=out) is out
    torch.testing.assert_close(out.cpu(), F.avg_pool3d(x, 2))
    out, indices = torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
    torch.ops.aten.adaptive_max_pool3d.out(x.to(device), [2, 3, 3], out=out, indices=indices)
    want, want_indices = F.adaptive_max_pool3d(x, (2, 3, 3), return_indices=True)
    torch.testing.assert_close(out.cpu(), want)
    assert torch.equal(indices.cpu(), want_indices)


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_errors_are_cpus(device):
    x = torch.randn(2, 3, 4, 4, 4)
    for fn in [lambda t: F.max_pool3d(t, 3, padding=2), lambda t: F.avg_pool3d(t, 5),
               lambda t: F.max_pool3d(t[0, 0], 2), lambda t: F.adaptive_avg_pool3d(t[:, :0], 2),
               lambda t: F.adaptive_max_pool3d(t, (2, 2)), lambda t: F.max_pool3d(t, 2, stride=0)]:
        same_error(fn, [x], [x.to(device)])


# -- margin losses and CTC ------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.5, True), (1, 2.0, True)])
def test_multi_margin_loss_matches_cpu(p, margin, weighted, reduction, dtype, device):
    c, d = twins((6, 5), dtype, device, scale=1.0, layout=lambda x: x.t().contiguous().t())
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    wc, wd = twins((5,), dtype, device, seed=1, scale=1.0) if weighted else (None, None)
    wc, wd = (wc.detach().abs() if wc is not None else None), (wd.detach().abs() if wd is not None else None)
    compare(lambda x, t, w: F.multi_margin_loss(x, t, p=p, margin=margin, weight=w, reduction=reduction),
            [c, target, wc], [d, target.to(device), wd], dtype, cpu_in_float32=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_matches_cpu(reduction, dtype, device):
    c, d = twins((4, 5), dtype, device, scale=1.0)
    # Lists ended by -1 (what follows is ignored), a repeated label, a full row.
    target = torch.tensor([[3, 0, -1, 1, 2], [1, 1, -1, -1, -1], [0, 1, 2, 3, 4], [-1, 2, 2, 2, 2]])
    compare(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction), [c, target], [d, target.to(device)], dtype,
            cpu_in_float32=True)


@pytest.mark.parametrize("device", DEVICES)
def test_margin_losses_one_sample_and_errors(device):
    c, d = twins((5,), torch.float32, device)
    for reduction in ["none", "sum"]:
        compare(lambda x, t: F.multi_margin_loss(x, t, reduction=reduction), [c, torch.tensor(3)], [d, torch.tensor(3, device=device)], torch.float32)
        compare(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction),
                [c, torch.tensor([4, 1, -1, 0, 0])], [d, torch.tensor([4, 1, -1, 0, 0], device=device)], torch.float32)
    x = torch.randn(3, 4)
    for t in [torch.tensor([0, 4, 1]), torch.tensor([0, -1, 1])]:
        same_error(F.multi_margin_loss, [x, t], [x.to(device), t.to(device)])
    same_error(F.multi_margin_loss, [x, torch.tensor([0, 1])], [x.to(device), torch.tensor([0, 1], device=device)])
    t = torch.tensor([[0, -2, -1, 0], [1, 2, 3, -1], [0, 0, 0, 0]])
    same_error(F.multilabel_margin_loss, [x, t], [x.to(device), t.to(device)])
    t = torch.tensor([[0, 4, -1, 0], [1, 2, 3, -1], [0, 0, 0, 0]])
    same_error(F.multilabel_margin_loss, [x, t], [x.to(device), t.to(device)])


def ctc_case(batch, time, classes, lengths, seed, flat, target_dtype):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(time, batch, classes, generator=g).log_softmax(2)
    targets = torch.randint(1, classes, (batch, max(lengths) + 2), generator=g, dtype=target_dtype)
    if flat:
        targets = torch.cat([targets[b, :n] for b, n in enumerate(lengths)])
    return log_probs, targets


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flat", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("target_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("as_tensors", [False, True], ids=["lists", "tensors"])
def test_ctc_loss_matches_cpu(as_tensors, reduction, target_dtype, flat, device):
    lengths, inputs = [3, 0, 5, 2], [12, 7, 12, 4]  # an empty target, an input shorter than the longest
    log_probs, targets = ctc_case(4, 12, 6, lengths, 0, flat, target_dtype)
    c, d = log_probs.clone().requires_grad_(), log_probs.to(device).requires_grad_()
    il, tl = (torch.tensor(inputs), torch.tensor(lengths)) if as_tensors else (inputs, lengths)
    compare(lambda x, t: F.ctc_loss(x, t, il, tl, reduction=reduction), [c, targets], [d, targets.to(device)], torch.float32)


# loss -> (function, input shape, good targets, bad targets, the device's error for the bad ones:
# CPU's, except for CTC, whose CPU kernel does not check and reads outside its tensors).
LOSSES_OF_TARGETS = {
    "multi_margin_loss": (lambda x, t: F.multi_margin_loss(x, t), (8, 5), lambda: torch.tensor([0, 4, 2, 1, 1, 3, 0, 2]),
                          lambda: torch.tensor([0, 7, 2, 1, 1, 3, 0, 2]), None),
    "multilabel_margin_loss": (lambda x, t: F.multilabel_margin_loss(x, t), (8, 5),
                               lambda: torch.tensor([[0, 4, -1, 0, 0]] * 8), lambda: torch.tensor([[0, 9, -1, 0, 0]] * 8), None),
    # reduction "sum": "mean" divides by the target lengths, which it copies to the device first,
    # and a copy from pageable host memory waits for the stream (on CUDA too).
    "ctc_loss": (lambda x, t: F.ctc_loss(x.log_softmax(-1).transpose(0, 1), t, [6] * 8, [3] * 8, reduction="sum"), (8, 6, 5),
                 lambda: torch.tensor([[1, 2, 3]] * 8), lambda: torch.tensor([[1, 7, 3]] * 8),
                 "ctc_loss: target 7 is not a class other than the blank (classes: 5, blank: 0)"),
}


@pytest.mark.parametrize("loss", LOSSES_OF_TARGETS)
def test_losses_of_targets_do_not_wait_for_the_device(loss):
    """The margin losses and CTC read their targets on the stream: with a long kernel queued,
    the loss and its backward return before the stream is done, and a bad target queued that way
    is an error at the synchronize."""
    fn, shape, good, bad, error = LOSSES_OF_TARGETS[loss]
    torch.manual_seed(0)
    x = torch.randn(shape)
    if error is None:
        with pytest.raises(RuntimeError) as cpu:
            fn(x, bad())
        error = str(cpu.value).splitlines()[0]
    a = torch.randn(1536, 1536, device="openreg")
    xd = x.to("openreg").requires_grad_()
    for target, expected in [(good().to("openreg"), None), (bad().to("openreg"), error)]:
        torch.openreg.synchronize()
        busy = a @ a @ a
        fn(xd, target).backward()
        assert not torch.openreg.current_stream().query(), "the loss waited for the stream"
        if expected is None:
            torch.openreg.synchronize()
            xc = x.clone().requires_grad_()
            fn(xc, good()).backward()
            torch.testing.assert_close(xd.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
        else:
            with pytest.raises(RuntimeError, match=re.escape(expected)):
                torch.openreg.synchronize()
        del busy


@pytest.mark.parametrize("device", DEVICES)
def test_ctc_loss_blank_zero_infinity_unbatched_and_errors(device):
    log_probs, targets = ctc_case(3, 4, 5, [4, 2, 3], 1, False, torch.int64)
    targets[0] = torch.tensor([1, 1, 1, 1, 0, 0])  # needs 7 steps: infinite loss
    for zero_infinity in [False, True]:
        c, d = log_probs.clone().requires_grad_(), log_probs.to(device).requires_grad_()
        compare(lambda x, t: F.ctc_loss(x, t, [4, 4, 4], [4, 2, 3], blank=0, reduction="sum", zero_infinity=zero_infinity),
                [c, targets], [d, targets.to(device)], torch.float32)
    c, d = log_probs.clone().requires_grad_(), log_probs.to(device).requires_grad_()
    shifted = targets.clamp(max=3)  # blank 4: labels 0..3
    compare(lambda x, t: F.ctc_loss(x, t, [4, 3, 4], [1, 2, 3], blank=4, reduction="none"), [c, shifted], [d, shifted.to(device)], torch.float32)
    c, d = log_probs[:, 0].clone().requires_grad_(), log_probs[:, 0].to(device).requires_grad_()
    compare(lambda x, t: F.ctc_loss(x, t, [4], [2]), [c, targets[2, :2]], [d, targets[2, :2].to(device)], torch.float32)
    x, t = log_probs, targets
    for args in [([5, 4, 4], [4, 2, 3]), ([4, 4], [4, 2, 3]), ([4, 4, 4], [7, 2, 3])]:
        same_error(lambda x, t: F.ctc_loss(x, t, *args), [x, t], [x.to(device), t.to(device)])
    same_error(lambda x, t: F.ctc_loss(x, t, [4, 4, 4], [4, 2, 3], blank=5), [x, t], [x.to(device), t.to(device)])
    # Float targets are accepted (ctc_loss converts them), as on CPU.
    compare(lambda x, t: F.ctc_loss(x, t, [4, 4, 4], [3, 2, 3]), [x, t.float()], [x.to(device), t.float().to(device)], torch.float32)


# -- index_add, masked_select, CELU ----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("alpha", [1, -2.5])
def test_index_add_matches_cpu(alpha, dim, dtype, device):
    c, d = twins((4, 5, 6), dtype, device, layout=lambda x: x.transpose(0, 2).contiguous().transpose(0, 2))
    size = c.shape[dim]
    index = torch.tensor([size - 1, 0, size - 1, 1])  # a repeated index accumulates twice
    src_shape = list(c.shape)
    src_shape[dim] = 4
    sc, sd = twins(src_shape, dtype, device, seed=1)
    compare(lambda x, s, i: x.index_add(dim, i, s, alpha=alpha), [c, sc, index], [d, sd, index.to(device)], dtype)
    # in place and out=
    target = torch.zeros(4, 5, 6, dtype=dtype, device=device)
    target.index_add_(dim, index.to(device), sd.detach(), alpha=alpha)
    want = torch.zeros(4, 5, 6, dtype=dtype).index_add_(dim, index, sc.detach(), alpha=alpha)
    torch.testing.assert_close(target.cpu(), want, **tolerance(dtype))
    out = torch.empty(0, dtype=dtype, device=device)
    assert torch.index_add(d.detach(), dim, index.to(device), sd.detach(), alpha=alpha, out=out) is out
    torch.testing.assert_close(out.cpu(), c.detach().index_add(dim, index, sc.detach(), alpha=alpha), **tolerance(dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_index_add_empty_0_dim_integers_and_errors(device):
    x = torch.randn(3)
    compare(lambda x, s, i: x.index_add(0, i, s), [x.clone().requires_grad_(), torch.randn(0), torch.tensor([], dtype=torch.long)],
            [x.to(device).requires_grad_(), torch.randn(0, device=device), torch.tensor([], dtype=torch.long, device=device)], torch.float32)
    s = torch.tensor(2.0)
    compare(lambda x, s, i: x.index_add(0, i, s), [torch.tensor(1.0), s, torch.tensor([0])],
            [torch.tensor(1.0, device=device), s.to(device), torch.tensor([0], device=device)], torch.float32)
    ints = torch.arange(6).reshape(2, 3)
    torch.testing.assert_close(ints.to(device).index_add(1, torch.tensor([2, 2], device=device), ints[:, :2].to(device)).cpu(),
                               ints.index_add(1, torch.tensor([2, 2]), ints[:, :2]))
    # An index out of range: CPU's error at the call; the device's kernel reads the index on the
    # stream and reports it at the synchronize, as a device-side assert.
    with pytest.raises(IndexError, match="^index out of range in self$"):
        x.index_add(0, torch.tensor([0, 3]), torch.ones(2))
    with pytest.raises(IndexError, match="index out of range in self$"):
        x.to(device).index_add(0, torch.tensor([0, 3], device=device), torch.ones(2, device=device))
        torch.openreg.synchronize(device)
    same_error(lambda x, i: x.index_add(0, i, torch.ones(3, device=x.device)), [x, torch.tensor([0, 1])], [x.to(device), torch.tensor([0, 1], device=device)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_masked_select_matches_cpu(dtype, device):
    c, d = twins((4, 6), dtype, device, layout=lambda x: x.t())
    mask = torch.rand(6, 4, generator=torch.Generator().manual_seed(3)) > 0.4
    compare(torch.masked_select, [c, mask], [d, mask.to(device)], dtype)
    row = mask[:1]  # broadcast along the first dimension
    compare(torch.masked_select, [c.detach(), row], [d.detach(), row.to(device)], dtype)
    compare(torch.masked_select, [c.detach()[:, :1], mask], [d.detach()[:, :1], mask.to(device)], dtype)  # self broadcast
    for m in [torch.zeros(6, 4, dtype=torch.bool), torch.tensor(True)]:
        compare(torch.masked_select, [c.detach(), m], [d.detach(), m.to(device)], dtype)
    same_error(torch.masked_select, [c.detach(), mask.int()], [d.detach(), mask.int().to(device)])
    same_error(torch.masked_select, [c.detach(), mask[:, :3]], [d.detach(), mask[:, :3].to(device)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_celu_matches_cpu(alpha, dtype, device):
    c, d = twins((5, 6), dtype, device, layout=lambda x: x.t())
    compare(lambda x: F.celu(x, alpha), [c], [d], dtype)
    out = torch.empty(0, dtype=dtype, device=device)
    assert torch.ops.aten.elu.out(d.detach(), alpha, 1.0, 1 / alpha, out=out) is out
    torch.testing.assert_close(out.cpu(), F.celu(c.detach(), alpha), **tolerance(dtype))
    x = d.detach().clone()
    F.celu(x, alpha, inplace=True)
    torch.testing.assert_close(x.cpu(), F.celu(c.detach(), alpha), **tolerance(dtype))
