"""torchvision's detection operators on the device (csrc/operators/TorchVision.cpp): nms,
roi_align, roi_pool, ps_roi_align, ps_roi_pool and deform_conv2d, forward and backward, each
against torchvision's CPU kernels over the correctness matrix (box placements and scales,
sampling ratios, channels-last and strided operands, empty inputs, dtypes, both devices), with
no fallback for the dtypes the kernels compute in; torch.library.opcheck for the registration
(schema, autograd, fake tensors); and the errors of bad input."""

import pytest
import torch
from torchvision import ops

DEVICES = ["openreg:0", "openreg:1"]
# float16 on CPU rounds every step to float16; the device computes in float32 and rounds once.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=1e-2),
       torch.float64: dict(rtol=0, atol=0)}

# name: (feature map [N, C, H, W], number of boxes, box scale in map pixels, spatial_scale)
BOXES = {
    "inside": ((2, 8, 10, 12), 6, 8.0, 1.0),
    "scaled": ((2, 8, 10, 12), 6, 20.0, 0.5),
    "outside": ((1, 8, 6, 7), 5, 14.0, 1.0),   # boxes start before and end past the map
    "tiny": ((2, 4, 9, 9), 5, 0.3, 1.0),       # smaller than a pixel, some reversed
    "many": ((3, 8, 16, 16), 40, 12.0, 1.0),
    "wide": ((1, 4, 3, 300), 4, 200.0, 1.0),
}


def make_boxes(case, generator):
    shape, k, size, scale = BOXES[case]
    n, h, w = shape[0], shape[2], shape[3]
    xy = torch.rand(k, 2, generator=generator) * torch.tensor([w, h]) / scale
    wh = torch.rand(k, 2, generator=generator) * size / scale
    if case == "outside":
        xy -= 3.0
    if case == "tiny":
        wh[::2] *= -1  # reversed boxes: x2 < x1
    batch = torch.randint(0, n, (k, 1), generator=generator).float()
    return torch.cat([batch, xy, xy + wh], 1)


def layout(x, how):
    if how == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if how == "strided":
        wide = torch.zeros(*x.shape[:-1], x.shape[-1] * 2, dtype=x.dtype, device=x.device)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x


# name: function of (input, rois, spatial_scale)
ROI_OPS = {
    "roi_align": lambda x, r, s=1.0: ops.roi_align(x, r, (3, 2), s, 2, False),
    "roi_align_adaptive": lambda x, r, s=1.0: ops.roi_align(x, r, (2, 3), s, -1, False),
    "roi_align_aligned": lambda x, r, s=1.0: ops.roi_align(x, r, (3, 3), s, -1, True),
    "roi_pool": lambda x, r, s=1.0: ops.roi_pool(x, r, (2, 3), s),
    "ps_roi_align": lambda x, r, s=1.0: ops.ps_roi_align(x, r, (2, 2), s, 2),
    "ps_roi_align_adaptive": lambda x, r, s=1.0: ops.ps_roi_align(x, r, (2, 2), s, -1),
    "ps_roi_pool": lambda x, r, s=1.0: ops.ps_roi_pool(x, r, (2, 2), s),
}


def run_roi(op, x, rois, case):
    return ROI_OPS[op](x, rois, BOXES[case][3])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("how", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("case", BOXES)
@pytest.mark.parametrize("op", ROI_OPS)
def test_roi_operator_matches_cpu_forward_and_backward(op, case, how, dtype, device):
    g = torch.Generator().manual_seed(hash((op, case)) % 1000)
    shape = BOXES[case][0]
    x_cpu = torch.randn(shape, generator=g).to(dtype)
    rois = make_boxes(case, g).to(dtype)
    x = layout(x_cpu.to(device), how).requires_grad_()
    x_cpu = layout(x_cpu, how).requires_grad_()
    torch.openreg.reset_fallback_counts()
    y = run_roi(op, x, rois.to(device), case)
    grad = torch.randn(y.shape, generator=g).to(dtype)
    y.backward(grad.to(device))
    counts = torch.openreg.fallback_counts()
    if dtype == torch.float64:
        assert any(name.startswith("torchvision::") for name in counts), counts
    else:
        assert counts == {}, counts
    y_cpu = run_roi(op, x_cpu, rois, case)
    y_cpu.backward(grad)
    assert y.device == torch.device(device) and x.grad.device == torch.device(device)
    if dtype == torch.float16:
        # CPU rounds each step to float16: compare both with float32's result.
        x32 = x_cpu.detach().float().requires_grad_()
        ref = run_roi(op, x32, rois.float(), case)
        ref.backward(grad.float())
        torch.testing.assert_close(y.cpu().float(), ref, **TOL[dtype], equal_nan=True)
        torch.testing.assert_close(x.grad.cpu().float(), x32.grad, **TOL[dtype], equal_nan=True)
    else:
        torch.testing.assert_close(y.cpu(), y_cpu, **TOL[dtype], equal_nan=True)
        torch.testing.assert_close(x.grad.cpu(), x_cpu.grad, **TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ROI_OPS)
def test_roi_operator_strided_boxes_and_mappings(op, device):
    """Boxes that are a strided view, and the int32 mappings the pooling operators return."""
    g = torch.Generator().manual_seed(1)
    x_cpu = torch.randn(2, 8, 10, 12, generator=g)
    rois = make_boxes("inside", g)
    wide = torch.zeros(rois.shape[0], 10)
    wide[:, ::2] = rois
    strided = wide[:, ::2]
    y = ROI_OPS[op](x_cpu.to(device), strided.to(device))
    torch.testing.assert_close(y.cpu(), ROI_OPS[op](x_cpu, rois), rtol=1e-5, atol=1e-5)
    raw = {"roi_pool": torch.ops.torchvision.roi_pool, "ps_roi_align": torch.ops.torchvision.ps_roi_align,
           "ps_roi_pool": torch.ops.torchvision.ps_roi_pool}.get(op)
    if raw is not None:
        args = (1.0, 2, 2) + ((2,) if op == "ps_roi_align" else ())
        _, mapping = raw(x_cpu.to(device), rois.to(device), *args)
        _, mapping_cpu = raw(x_cpu, rois, *args)
        assert mapping.dtype == torch.int32
        assert torch.equal(mapping.cpu(), mapping_cpu)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ROI_OPS)
def test_roi_operator_without_boxes(op, device):
    x = torch.randn(2, 8, 5, 5, device=device, requires_grad=True)
    rois = torch.zeros(0, 5, device=device)
    y = ROI_OPS[op](x, rois)
    assert y.shape[0] == 0 and y.device == x.device
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), torch.zeros(2, 8, 5, 5))


def test_roi_errors_are_cpus():
    """The same bad call raises on the device what it raises on CPU, where CPU raises."""
    x, rois = torch.randn(2, 4, 6, 6), torch.tensor([[0, 1.0, 1, 4, 4]])
    calls = {
        "boxes of 4 columns": lambda d: torch.ops.torchvision.roi_align(x.to(d), rois[:, 1:].to(d), 1.0, 2, 2, 2, False),
        "boxes of another dtype": lambda d: torch.ops.torchvision.roi_align(x.to(d), rois.double().to(d), 1.0, 2, 2, 2, False),
        "bfloat16": lambda d: torch.ops.torchvision.roi_align(x.bfloat16().to(d), rois.bfloat16().to(d), 1.0, 2, 2, 2, False),
        "channels not a multiple of the bins": lambda d: torch.ops.torchvision.ps_roi_align(x.to(d), rois.to(d), 1.0, 3, 3, 2),
    }
    for what, call in calls.items():
        with pytest.raises(Exception) as on_cpu:
            call("cpu")
        with pytest.raises(type(on_cpu.value)) as on_device:
            call("openreg")
        assert str(on_device.value), what


def test_roi_checks_devices_and_dimensions():
    x, rois = torch.randn(2, 4, 6, 6, device="openreg"), torch.tensor([[0, 1.0, 1, 4, 4]])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ops.torchvision.roi_align(x, rois, 1.0, 2, 2, 2, False)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ops.torchvision.roi_align(x, rois.to("openreg:1"), 1.0, 2, 2, 2, False)
    with pytest.raises(RuntimeError, match="expected a 4-D input"):
        torch.ops.torchvision.roi_align(x[0], rois.to("openreg"), 1.0, 2, 2, 2, False)
    with pytest.raises(RuntimeError, match="output size must be positive"):
        torch.ops.torchvision.roi_pool(x, rois.to("openreg"), 1.0, 0, 2)


@pytest.mark.parametrize("op", ["roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool"])
def test_a_box_of_another_image_is_an_index_error_at_synchronize(op):
    """The batch index is data on the device: the kernel checks it, as a GPU's device-side
    assert does, and the stream reports it at its next synchronize. The stream works after."""
    x = torch.randn(2, 4, 6, 6, device="openreg")
    rois = torch.tensor([[0, 1.0, 1, 4, 4], [2, 0, 0, 3, 3]], device="openreg")
    f = getattr(ops, op)
    # Small work on an idle stream runs at once, so the error can also come from the call.
    with pytest.raises(IndexError, match=r"box 1 has batch index 2(\.0)?, outside \[0, 2\)"):
        f(x, rois, (2, 2), 1.0)
        torch.openreg.synchronize()
    assert torch.equal((torch.ones(3, device="openreg") * 2).cpu(), torch.full((3,), 2.0))


# ---- nms ----

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("n", [1, 2, 50, 500])
def test_nms_matches_cpu(n, threshold, device):
    g = torch.Generator().manual_seed(n)
    xy = torch.rand(n, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 30 + 1], 1)
    scores = torch.rand(n, generator=g)
    torch.openreg.reset_fallback_counts()
    keep = ops.nms(boxes.to(device), scores.to(device), threshold)
    assert torch.openreg.fallback_counts() == {}
    assert keep.device == torch.device(device) and keep.dtype == torch.int64
    assert torch.equal(keep.cpu(), ops.nms(boxes, scores, threshold))


@pytest.mark.parametrize("device", DEVICES)
def test_nms_ties_strided_and_batched(device):
    g = torch.Generator().manual_seed(3)
    xy = torch.rand(60, 2, generator=g) * 50
    boxes = torch.cat([xy, xy + 20], 1)
    scores = (torch.rand(60, generator=g) * 4).round() / 4  # many equal scores
    keep = ops.nms(boxes.to(device), scores.to(device), 0.4)
    assert torch.equal(keep.cpu(), ops.nms(boxes, scores, 0.4))
    wide = torch.zeros(60, 8)
    wide[:, ::2] = boxes
    keep = ops.nms(wide[:, ::2].to(device), scores.to(device), 0.4)
    assert torch.equal(keep.cpu(), ops.nms(boxes, scores, 0.4))
    # batched_nms (detection heads): per-class offsets, then nms, on the device.
    idxs = torch.randint(0, 3, (60,), generator=g)
    kept = ops.batched_nms(boxes.to(device), scores.to(device), idxs.to(device), 0.4)
    assert torch.equal(kept.cpu(), ops.batched_nms(boxes, scores, idxs, 0.4))


def test_nms_empty_float64_and_errors():
    empty = ops.nms(torch.zeros(0, 4, device="openreg"), torch.zeros(0, device="openreg"), 0.5)
    assert empty.shape == (0,) and empty.dtype == torch.int64 and empty.device.type == "openreg"
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11.0]], dtype=torch.float64)
    scores = torch.tensor([0.9, 0.8], dtype=torch.float64)
    torch.openreg.reset_fallback_counts()
    assert torch.equal(ops.nms(boxes.to("openreg"), scores.to("openreg"), 0.5).cpu(), ops.nms(boxes, scores, 0.5))
    assert list(torch.openreg.fallback_counts()) == ["torchvision::nms (Double)"] or \
        all(k.startswith("torchvision::nms") for k in torch.openreg.fallback_counts())
    bad = {
        "1-d boxes": (torch.zeros(4), torch.zeros(1)),
        "3 coordinates": (torch.zeros(2, 3), torch.zeros(2)),
        "2-d scores": (torch.zeros(2, 4), torch.zeros(2, 1)),
        "lengths differ": (torch.zeros(2, 4), torch.zeros(3)),
        "float16": (torch.zeros(2, 4).half(), torch.zeros(2).half()),
    }
    for what, (b, s) in bad.items():
        with pytest.raises(Exception) as on_cpu:
            torch.ops.torchvision.nms(b, s, 0.5)
        with pytest.raises(type(on_cpu.value)):
            torch.ops.torchvision.nms(b.to("openreg"), s.to("openreg"), 0.5)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ops.torchvision.nms(torch.zeros(2, 4, device="openreg"), torch.zeros(2), 0.5)


# ---- deform_conv2d ----

# name: (input [N, C, H, W], weight [O, C/groups, kh, kw], stride, padding, dilation,
#        offset groups, mask, offset scale)
DEFORM = {
    "plain": ((2, 4, 7, 8), (6, 4, 3, 3), 1, 1, 1, 1, False, 1.0),
    "mask": ((2, 4, 7, 8), (6, 4, 3, 3), 1, 1, 1, 1, True, 1.0),
    "groups": ((1, 4, 6, 6), (4, 2, 3, 3), 1, 0, 1, 2, True, 1.0),
    "strided": ((3, 3, 9, 10), (5, 3, 3, 2), 2, (1, 0), (2, 1), 1, True, 1.0),
    "far_offsets": ((2, 2, 5, 5), (3, 2, 3, 3), 1, 1, 1, 1, True, 6.0),  # samples leave the map
    "one_by_one": ((2, 3, 4, 4), (4, 3, 1, 1), 1, 0, 1, 3, False, 0.5),
}


def deform_inputs(case, dtype, generator):
    shape, wshape, stride, padding, dilation, offset_groups, with_mask, spread = DEFORM[case]
    pair = lambda v: v if isinstance(v, tuple) else (v, v)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    kh, kw = wshape[2:]
    oh = (shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = torch.randn(shape, generator=generator)
    w = torch.randn(wshape, generator=generator) * 0.3
    b = torch.randn(wshape[0], generator=generator)
    off = torch.randn(shape[0], 2 * offset_groups * kh * kw, oh, ow, generator=generator) * spread
    mask = torch.rand(shape[0], offset_groups * kh * kw, oh, ow, generator=generator) if with_mask else None
    kwargs = dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw))
    tensors = [t.to(dtype) if t is not None else None for t in (x, off, w, b, mask)]
    return tensors, kwargs


def deform(tensors, kwargs):
    x, off, w, b, mask = tensors
    return ops.deform_conv2d(x, off, w, b, mask=mask, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("how", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("case", DEFORM)
def test_deform_conv2d_matches_cpu_forward_and_backward(case, how, dtype, device):
    g = torch.Generator().manual_seed(len(case))
    cpu, kwargs = deform_inputs(case, dtype, g)
    if dtype == torch.float16:  # CPU computes from the same float16 values, in float32
        cpu = [t.float() if t is not None else None for t in cpu]
    lay = lambda t: layout(t, how) if t.dim() == 4 else t
    cpu = [lay(t).requires_grad_() if t is not None else None for t in cpu]
    dev = [lay(t.detach().to(dtype).to(device)).requires_grad_() if t is not None else None for t in cpu]
    torch.openreg.reset_fallback_counts()
    y = deform(dev, kwargs)
    grad = torch.randn(y.shape, generator=g)
    y.backward(grad.to(dtype).to(device))
    counts = torch.openreg.fallback_counts()
    if dtype == torch.float64:
        assert any(name.startswith("torchvision::") for name in counts), counts
    else:
        assert counts == {}, counts
    y_cpu = deform(cpu, kwargs)
    y_cpu.backward(grad.to(y_cpu.dtype))
    # Sums over channels and taps: float32 rounding differs from CPU's order in the matrix
    # products; float16 is compared with float32's result.
    tol = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=2e-2, atol=5e-2),
           torch.float64: dict(rtol=1e-12, atol=1e-12)}[dtype]
    torch.testing.assert_close(y.cpu().to(y_cpu.dtype), y_cpu, **tol)
    for a, b in zip(dev, cpu):
        if a is not None:
            assert a.grad.device == torch.device(device)
            scale = max(1.0, b.grad.abs().max().item())
            torch.testing.assert_close(a.grad.cpu().to(b.dtype) / scale, b.grad / scale, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_deform_conv2d_empty_batch_and_module(device):
    x = torch.randn(0, 4, 6, 6, device=device, requires_grad=True)
    w = torch.randn(3, 4, 3, 3, device=device, requires_grad=True)
    off = torch.randn(0, 18, 4, 4, device=device)
    y = ops.deform_conv2d(x, off, w)
    assert y.shape == (0, 3, 4, 4) and y.device == torch.device(device)
    y.sum().backward()
    assert w.grad.shape == w.shape and torch.equal(w.grad.cpu(), torch.zeros(3, 4, 3, 3))
    # torchvision's module, its offsets from a plain convolution, trained one step.
    torch.manual_seed(0)
    conv = ops.DeformConv2d(4, 5, 3, padding=1)
    predict = torch.nn.Conv2d(4, 18, 3, padding=1)
    inp = torch.randn(2, 4, 6, 6)
    out_cpu = conv(inp, predict(inp))
    out_cpu.square().mean().backward()
    conv_d, predict_d = conv.to(device), predict.to(device)
    for p in [*conv_d.parameters(), *predict_d.parameters()]:
        p.grad = None
    torch.openreg.reset_fallback_counts()
    out = conv_d(inp.to(device), predict_d(inp.to(device)))
    out.square().mean().backward()
    assert torch.openreg.fallback_counts() == {}
    torch.testing.assert_close(out.cpu(), out_cpu.to("cpu"), rtol=1e-4, atol=1e-4)


def test_deform_conv2d_errors_are_cpus():
    g = torch.Generator().manual_seed(0)
    (x, off, w, b, mask), _ = deform_inputs("mask", torch.float32, g)
    op = torch.ops.torchvision.deform_conv2d
    calls = {
        "offset channels": lambda d: op(x.to(d), w.to(d), off[:, :-2].to(d), mask.to(d), b.to(d), 1, 1, 1, 1, 1, 1, 1, 1, True),
        "mask channels": lambda d: op(x.to(d), w.to(d), off.to(d), mask[:, :-1].to(d), b.to(d), 1, 1, 1, 1, 1, 1, 1, 1, True),
        "offset batch": lambda d: op(x.to(d), w.to(d), off[:1].to(d), mask.to(d), b.to(d), 1, 1, 1, 1, 1, 1, 1, 1, True),
        "weight groups": lambda d: op(x.to(d), w.to(d), off.to(d), mask.to(d), b.to(d), 1, 1, 1, 1, 1, 1, 3, 1, True),
        "output too small": lambda d: op(x[..., :1, :1].to(d), w.to(d), off[..., :1, :1].to(d), mask[..., :1, :1].to(d), b.to(d), 1, 1, 0, 0, 1, 1, 1, 1, True),
    }
    for what, call in calls.items():
        with pytest.raises(Exception) as on_cpu:
            call("cpu")
        with pytest.raises(type(on_cpu.value)):
            call("openreg")
    # CPU's kernel divides by the stride before checking it (SIGFPE): the device checks first.
    with pytest.raises(RuntimeError, match="stride_h: 0 stride_w: 1"):
        op(x.to("openreg"), w.to("openreg"), off.to("openreg"), mask.to("openreg"), b.to("openreg"), 0, 1, 1, 1, 1, 1, 1, 1, True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(x.to("openreg"), w, off.to("openreg"), mask.to("openreg"), b.to("openreg"), 1, 1, 1, 1, 1, 1, 1, 1, True)


# ---- the registration, through PyTorch's own checks for custom operators ----

def opcheck_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 6, 7, generator=g)
    rois = make_boxes("inside", g)[:4]
    (dx, doff, dw, db, dmask), _ = deform_inputs("mask", torch.float32, g)
    boxes = torch.cat([rois[:, 1:3], rois[:, 1:3] + 3], 1)
    tv = torch.ops.torchvision
    return {
        "roi_align": (tv.roi_align.default, (x, rois, 0.5, 2, 2, 2, False)),
        "roi_pool": (tv.roi_pool.default, (x, rois, 0.5, 2, 2)),
        "ps_roi_align": (tv.ps_roi_align.default, (x, rois, 0.5, 2, 2, 2)),
        "ps_roi_pool": (tv.ps_roi_pool.default, (x, rois, 0.5, 2, 2)),
        "deform_conv2d": (tv.deform_conv2d.default, (dx, dw, doff, dmask, db, 1, 1, 1, 1, 1, 1, 1, 1, True)),
        "nms": (tv.nms.default, (boxes, torch.rand(4, generator=g), 0.5)),
    }


@pytest.mark.parametrize("name", ["roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool", "deform_conv2d", "nms"])
def test_opcheck(name):
    """torch.library.opcheck: the schema holds (no input mutated, no alias returned) and the
    fake (meta) results' shapes, dtypes and strides are the device kernels'. opcheck's autograd
    check supports CPU, CUDA and XPU only (torch/testing/_internal/optests/
    autograd_registration.py), so the same check is made here for our key: an autograd kernel
    is registered for it (torchvision's, for the Autograd alias) and the results require grad."""
    op, args = opcheck_cases()[name]
    args = tuple(a.to("openreg").requires_grad_(a.is_floating_point() and a.dim() == 4)
                 if isinstance(a, torch.Tensor) else a for a in args)
    utils = ["test_schema", "test_faketensor"]
    if name == "nms":
        utils.remove("test_faketensor")  # data-dependent output size: checked by test_nms_* instead
    torch.library.opcheck(op, args, test_utils=utils)
    qualname = op.name()
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "PrivateUse1")
    if name != "nms":
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Autograd")
        result = op(*args)
        first = result[0] if isinstance(result, tuple) else result
        assert first.requires_grad and first.grad_fn is not None
