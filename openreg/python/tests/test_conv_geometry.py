"""Convolution and pooling over random geometries, against CPU, forward and backward: kernels
larger than the input, padding as large as the kernel, dilation, stride larger than the
kernel, groups up to depthwise with many channels, batch 1 and odd batches, 1-D, 2-D and 3-D,
transposed, channels-last. A geometry the kernel cannot compute must be an error, never a
panic or a wrong result."""

import random

import pytest
import torch
import torch.nn.functional as F


def geometry(rng, dims):
    groups = rng.choice([1, 1, 2, 3, "depthwise"])
    per_group_in, per_group_out = rng.randint(1, 3), rng.randint(1, 3)
    if groups == "depthwise":
        groups = rng.choice([4, 16, 40])
        per_group_in, per_group_out = 1, 1
    kernel = [rng.randint(1, 7) for _ in range(dims)]
    dilation = [rng.choice([1, 1, 2, 3]) for _ in range(dims)]
    stride = [rng.choice([1, 1, 2, 3, 8]) for _ in range(dims)]
    padding = [rng.randint(0, k * d - (k * d > 1)) if rng.random() < 0.8 else k * d for k, d in zip(kernel, dilation)]
    size = [rng.randint(1, 9) for _ in range(dims)]
    batch = rng.choice([1, 2, 3])
    return dict(groups=groups, cin=groups * per_group_in, cout=groups * per_group_out, kernel=kernel,
                dilation=dilation, stride=stride, padding=padding, size=size, batch=batch)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def run_both(fn, tensors):
    cpu = [t.detach().clone().requires_grad_(True) for t in tensors]
    dev = [t.detach().to("openreg").requires_grad_(True) for t in tensors]
    try:
        want = fn(*cpu)
    except RuntimeError as e:
        with pytest.raises(RuntimeError):
            fn(*dev)
        return None
    got = fn(*dev)
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(0))
    want.backward(grad)
    got.backward(grad.to("openreg"))
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)
    return True


@pytest.mark.parametrize("seed", range(120))
def test_convolution_geometries_match_cpu(seed):
    rng = random.Random(seed)
    dims = rng.choice([1, 2, 2, 3])
    g = geometry(rng, dims)
    x = torch.randn(g["batch"], g["cin"], *g["size"], generator=torch.Generator().manual_seed(seed))
    w = torch.randn(g["cout"], g["cin"] // g["groups"], *g["kernel"], generator=torch.Generator().manual_seed(seed + 1))
    b = torch.randn(g["cout"])
    if dims == 2 and rng.random() < 0.3:
        x = x.contiguous(memory_format=torch.channels_last)
    transposed = rng.random() < 0.3
    if transposed:
        wt = torch.randn(g["cin"], g["cout"] // g["groups"], *g["kernel"], generator=torch.Generator().manual_seed(seed + 2))
        out_pad = [rng.randint(0, max(0, min(s, d) - 1)) for s, d in zip(g["stride"], g["dilation"])]
        fn = lambda x, w, b: CONV_T[dims](x, w, b, stride=g["stride"], padding=g["padding"], output_padding=out_pad,
                                          groups=g["groups"], dilation=g["dilation"])
        run_both(fn, [x, wt, b])
    else:
        fn = lambda x, w, b: CONV[dims](x, w, b, stride=g["stride"], padding=g["padding"], dilation=g["dilation"],
                                        groups=g["groups"])
        run_both(fn, [x, w, b])


def test_convnext_last_stage_on_small_images():
    """Depthwise 7x7, padding 3, on 2x2 planes (ConvNeXt's last stage on small images)."""
    x = torch.randn(4, 320, 2, 2)
    w = torch.randn(320, 1, 7, 7)
    assert run_both(lambda x, w: F.conv2d(x, w, padding=3, groups=320), [x, w])


@pytest.mark.parametrize("seed", range(60))
def test_pooling_geometries_match_cpu(seed):
    rng = random.Random(1000 + seed)
    kernel = [rng.randint(1, 4) for _ in range(2)]
    stride = [rng.randint(1, 4) for _ in range(2)]
    padding = [rng.randint(0, k // 2) for k in kernel]
    dilation = [rng.randint(1, 2) for _ in range(2)]
    size = [rng.randint(max(1, k), 9) for k in kernel]
    ceil, include_pad = rng.random() < 0.5, rng.random() < 0.5
    x = torch.randn(rng.randint(1, 3), rng.randint(1, 5), *size, generator=torch.Generator().manual_seed(seed))
    run_both(lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil), [x])
    run_both(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil, count_include_pad=include_pad), [x])


def assert_depthwise_matches_cpu(rng, seed, channels, kernel, dilation, stride, padding, size, batches):
    """One depthwise convolution of the geometry, its batch drawn from `batches`: channels-last
    in some cases, transposed in a quarter; forward and gradients against CPU."""
    dims = len(size)
    x = torch.randn(rng.choice(batches), channels, *size, generator=torch.Generator().manual_seed(seed))
    if dims == 2 and rng.random() < 0.3:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, 1, *kernel, generator=torch.Generator().manual_seed(seed + 1))
    b = torch.randn(channels)
    if rng.random() < 0.25:
        fn = lambda x, w, b: CONV_T[dims](x, w, b, stride=stride, padding=padding, dilation=dilation, groups=channels)
    else:
        fn = lambda x, w, b: CONV[dims](x, w, b, stride=stride, padding=padding, dilation=dilation, groups=channels)
    assert run_both(fn, [x, w, b]) in (True, None)


@pytest.mark.parametrize("seed", range(40))
def test_depthwise_convolution_on_wide_rows_matches_cpu(seed):
    """Depthwise 1-D and 2-D convolutions on rows of 16 outputs or more, which the kernel
    computes a row at a time: strides down and across (across, 1 takes the row path and 2 the
    other), dilation, padding up to the kernel's reach, widths that are not a multiple of 16,
    channel counts that are not a multiple of 16, transposed, and channels-last."""
    rng = random.Random(5000 + seed)
    dims = rng.choice([1, 2, 2])
    channels = rng.choice([1, 3, 16, 17, 40])
    kernel = [rng.randint(1, 7) for _ in range(dims)]
    dilation = [rng.choice([1, 1, 2, 3]) for _ in range(dims)]
    stride = [rng.choice([1, 2, 3]) for _ in range(dims - 1)] + [rng.choice([1, 1, 1, 2])]
    padding = [rng.randint(0, k * d) for k, d in zip(kernel, dilation)]
    size = [rng.randint(1, 24) for _ in range(dims - 1)] + [rng.randint(16, 70)]
    assert_depthwise_matches_cpu(rng, seed, channels, kernel, dilation, stride, padding, size, [1, 2, 3])


@pytest.mark.parametrize("seed", range(40))
def test_depthwise_convolution_on_narrow_planes_matches_cpu(seed):
    """Depthwise convolutions on rows narrower than a vector, one input per output both ways,
    which the kernel computes over the whole padded plane at once (outputs that fall between
    rows computed and dropped); other strides, and planes where that wastes most lanes, take
    the channels-in-lanes path. Odd sizes, dilation, padding up to the kernel's reach,
    transposed, channels-last."""
    rng = random.Random(7000 + seed)
    dims = rng.choice([1, 2, 2, 2])
    channels = rng.choice([1, 3, 16, 17, 40])
    kernel = [rng.randint(1, 7) for _ in range(dims)]
    dilation = [rng.choice([1, 1, 1, 2]) for _ in range(dims)]
    stride = [1] * dims if rng.random() < 0.8 else [rng.choice([1, 2]) for _ in range(dims)]
    padding = [rng.randint(0, k * d) for k, d in zip(kernel, dilation)]
    size = [rng.randint(1, 15) for _ in range(dims)]
    assert_depthwise_matches_cpu(rng, seed, channels, kernel, dilation, stride, padding, size, [1, 2, 5])


def test_depthwise_convolution_on_narrow_planes_carries_infinities_as_on_cpu():
    """Over a whole plane at once, the outputs computed between rows read the next row's
    inputs, infinities included: they are dropped, and only the outputs that read an infinity
    are infinite or NaN, as on CPU."""
    x = torch.randn(2, 3, 7, 7)
    x[0, 1, 3, 0] = float("inf")
    x[1, 2, 6, 6] = float("-inf")
    w = torch.randn(3, 1, 5, 5)
    grad = torch.randn(2, 3, 7, 7)
    grad[1, 0, 0, 6] = float("inf")
    cpu = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [2, 2], [1, 1], False, [0, 0], 3,
                                              [True, True, False])
    dev = torch.ops.aten.convolution_backward(grad.to("openreg"), x.to("openreg"), w.to("openreg"), None, [1, 1],
                                              [2, 2], [1, 1], False, [0, 0], 3, [True, True, False])
    forward = [F.conv2d(t, w.to(t.device), padding=2, groups=3).cpu() for t in (x, x.to("openreg"))]
    for want, got in [(forward[0], forward[1]), *zip(cpu[:2], dev[:2])]:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert torch.isfinite(forward[1][0, 0]).all() and not torch.isfinite(forward[1][0, 1]).all()
    assert torch.isfinite(dev[0][1, 1]).all() and not torch.isfinite(dev[0][1, 0]).all()


def test_depthwise_gradients_on_wide_rows_carry_infinities_as_on_cpu():
    """The weight gradient's last vector of a row reaches past the row's end into the next
    row: an infinity there must not enter a sum it has no part in (0 * inf is NaN)."""
    x = torch.randn(2, 3, 6, 29)
    x[0, 1, 3, 0] = float("inf")  # first of a row: the row above's last vector reaches it
    x[1, 2, 5, 28] = float("-inf")
    w = torch.randn(3, 1, 3, 3)
    grad = torch.randn(2, 3, 4, 27)
    cpu = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 3,
                                              [True, True, False])
    dev = torch.ops.aten.convolution_backward(grad.to("openreg"), x.to("openreg"), w.to("openreg"), None, [1, 1],
                                              [0, 0], [1, 1], False, [0, 0], 3, [True, True, False])
    for want, got in zip(cpu[:2], dev[:2]):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert not torch.isfinite(dev[1][1]).all() and torch.isfinite(dev[1][0]).all()
