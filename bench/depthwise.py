"""Depthwise convolution (MobileNet's and ConvNeXt's spatial filters) on openreg against the
CPU, in one run: the forward pass, the input gradient and the weight gradient, on planes from
a network's first stages (wide rows, which the kernel computes along rows) to its last ones
(rows narrower than a vector: the whole plane as one run, or across channels), at the
strides, kernels and batches models use.

`python bench/depthwise.py` prints the table (`make bench` runs it).
"""

import torch
import torch.nn.functional as F

from operators import per_call  # batches ended by a synchronize, after a warm-up

# (batch, channels, plane side, kernel, stride)
SHAPES = [(1, 32, 112, 3, 1), (32, 32, 56, 3, 1), (8, 144, 28, 5, 1), (4, 40, 16, 7, 1), (2, 96, 60, 7, 1),
          (32, 96, 56, 3, 2), (64, 240, 7, 5, 1), (16, 384, 14, 7, 1), (32, 96, 14, 3, 1), (4, 160, 4, 7, 1),
          (16, 17, 33, 3, 1)]


def passes(device, n, c, size, k, stride):
    torch.manual_seed(0)
    x, w = torch.randn(n, c, size, size, device=device), torch.randn(c, 1, k, k, device=device)
    pad = k // 2
    grad = torch.randn_like(F.conv2d(x, w, padding=pad, stride=stride, groups=c))

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(grad, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False,
                                                           [0, 0], c, mask)
    return {"forward": lambda: F.conv2d(x, w, padding=pad, stride=stride, groups=c),
            "input grad": backward([True, False, False]), "weight grad": backward([False, True, False])}


def main():
    print(f"torch {torch.__version__}; time per call, median of 9 batches of 5; ratio = openreg / CPU")
    print(f"{'case':<34} {'pass':<12} {'CPU':>9} {'openreg':>9} {'ratio':>6}")
    for n, c, size, k, stride in SHAPES:
        on = {device: passes(device, n, c, size, k, stride) for device in ("cpu", "openreg")}
        for name in on["cpu"]:
            cpu = per_call(on["cpu"][name], "cpu", 5)
            dev = per_call(on["openreg"][name], "openreg", 5)
            case = f"{n}x{c}x{size}x{size} {k}x{k} stride {stride}"
            print(f"{case:<34} {name:<12} {cpu * 1e6:>7.0f}us {dev * 1e6:>7.0f}us {dev / cpu:>5.2f}x")


if __name__ == "__main__":
    main()
