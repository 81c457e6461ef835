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
