"""Operator benchmarks: native Rust kernels against CPU, and against the same cases through
the plain CPU fallback (a second process with OPENREG_NATIVE_KERNELS=0).

`python bench/operators.py` prints the table; `--svg FILE` also draws it as a bar chart;
`--json` prints raw seconds for one process.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def batch(fn, sync, calls):
    """Seconds per call of `fn` over `calls` calls ended by a synchronize."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def per_call(fn, device, calls, repeats=9, warmup=0.05):
    """Median seconds per call of `fn` on `device`, over batches of `calls` calls, after
    `warmup` seconds of untimed batches. The warm-up is long on purpose: after a parallel
    region, the CPU's OpenMP workers spin for 10-20 ms before they sleep (libgomp's
    GOMP_SPINCOUNT), and on a 2-core machine that takes a core from whatever runs next.
    Measured right after the CPU, a 40 us openreg layer_norm read 72 us."""
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    start = time.perf_counter()
    while time.perf_counter() - start < warmup:
        batch(fn, sync, calls)
    return statistics.median(batch(fn, sync, calls) for _ in range(repeats))


# ANCHOR: cases
def cases(device):
    """(name, function, calls per batch) for each benchmarked case on `device`."""
    torch.manual_seed(0)
    out = []
    small = torch.randn(3, 3).to(device)
    out.append(("x + x 3x3", lambda: small + small, 2000))
    for n, label, calls in [(1 << 20, "1M", 50), (1 << 24, "16M", 5)]:
        a, b = torch.randn(n).to(device), torch.randn(n).to(device)
        out.append((f"add {label}", lambda a=a, b=b: a + b, calls))
        out.append((f"mul {label}", lambda a=a, b=b: a * b, calls))
        out.append((f"relu {label}", lambda a=a: a.relu(), calls))
        if label == "16M":
            out.append((f"sum {label}", lambda a=a: a.sum(), calls))
    # softmax along rows of 1024 and 4096, along the first dimension, along a middle one
    for shape, dim, f in [((1024, 1024), -1, torch.softmax), ((1024, 1024), 0, torch.softmax),
                          ((64, 128, 64), 1, torch.softmax), ((256, 4096), -1, torch.softmax),
                          ((1024, 1024), -1, torch.log_softmax), ((256, 4096), -1, torch.log_softmax)]:
        x = torch.randn(*shape).to(device)
        label = f"{f.__name__} {'x'.join(map(str, shape))} dim {dim}"
        out.append((label, lambda x=x, dim=dim, f=f: f(x, dim), 20))
    # the model families' operators: layer norm over wide rows, convolutions on 64 channels
    for rows, width in [(256, 1024), (64, 4096)]:
        x, w, b = torch.randn(rows, width).to(device), torch.randn(width).to(device), torch.randn(width).to(device)
        out.append((f"layer_norm {rows}x{width}", lambda x=x, w=w, b=b: F.layer_norm(x, x.shape[-1:], w, b), 20))
    image = torch.randn(8, 64, 32, 32).to(device)
    for k in [3, 1]:
        w = torch.randn(64, 64, k, k).to(device)
        out.append((f"conv2d {k}x{k} 64ch 8x32x32", lambda w=w, k=k: F.conv2d(image, w, padding=k // 2), 10))
    out.append(("batch_norm 8x64x32x32", lambda: F.batch_norm(image, None, None, training=True), 20))
    out.append(("max_pool2d 2x2 8x64x32x32", lambda: F.max_pool2d(image, 2), 20))
    m1, m2 = torch.randn(512, 512).to(device), torch.randn(512, 512).to(device)
    out.append(("mm 512x512", lambda: m1 @ m2, 20))
    return out
# ANCHOR_END: cases

TARGETS = {"x + x 3x3": 1.0, "add 1M": 1.1, "mul 1M": 1.1, "relu 1M": 1.1, "add 16M": 1.1,
           "mul 16M": 1.1, "relu 16M": 1.1, "sum 16M": 1.2, "mm 512x512": 1.2,
           "softmax 1024x1024 dim -1": 1.2, "softmax 1024x1024 dim 0": 1.2, "softmax 64x128x64 dim 1": 1.2,
           "softmax 256x4096 dim -1": 1.2, "log_softmax 1024x1024 dim -1": 1.2,
           "log_softmax 256x4096 dim -1": 1.2, "layer_norm 256x1024": 1.2, "layer_norm 64x4096": 1.2,
           "conv2d 3x3 64ch 8x32x32": 1.2, "conv2d 1x1 64ch 8x32x32": 1.2, "batch_norm 8x64x32x32": 1.2,
           "max_pool2d 2x2 8x64x32x32": 1.2}


def measure():
    """{device: {case: seconds per call}}. Each case runs on the CPU and then on openreg, so a
    slow spell of the shared machine is less likely to land on one side of a ratio only.
    (Alternating single batches was worse: each side's idle threads, OpenMP's and ours, still
    poll for a while after a batch and slow the other side's next one.)"""
    out = {"cpu": {}, "openreg": {}}
    for (name, on_cpu, calls), (_, on_device, _) in zip(cases("cpu"), cases("openreg")):
        out["cpu"][name] = per_call(on_cpu, "cpu", calls)
        out["openreg"][name] = per_call(on_device, "openreg", calls)
    return out


def svg(rows):
    """A horizontal bar chart of openreg/CPU time ratios, native and through the fallback."""
    width, left, bar, gap = 720, 300, 11, 10
    scale = lambda r: min(r, 8.0) / 8.0 * (width - left - 60)  # noqa: E731
    height = 40 + len(rows) * (2 * bar + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="12" role="img" '
           f'aria-label="openreg time per call as a multiple of CPU">',
           f'<text x="{left}" y="16" font-weight="bold">time per call, multiple of CPU '
           f'(shorter is better; 1.0 = CPU)</text>']
    y = 30
    for name, native, fallback in rows:
        out.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end">{name}</text>')
        for value, colour, label in [(native, "#2f7d4f", "native"), (fallback, "#b5532a", "fallback")]:
            w = max(scale(value), 1)
            out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}">'
                       f'<title>{name}, {label}: {value:.2f}x</title></rect>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + bar - 1}">{value:.2f}x</text>')
            y += bar
        y += gap
    one = left + scale(1.0)
    out.append(f'<line x1="{one:.1f}" y1="26" x2="{one:.1f}" y2="{y}" stroke="#333" '
               f'stroke-dasharray="4 3"/>')
    out.append(f'<rect x="{left}" y="{y + 8}" width="10" height="10" fill="#2f7d4f"/>'
               f'<text x="{left + 14}" y="{y + 17}">Rust kernels</text>'
               f'<rect x="{left + 110}" y="{y + 8}" width="10" height="10" fill="#b5532a"/>'
               f'<text x="{left + 124}" y="{y + 17}">CPU fallback (bars stop at 8x)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if "--json" in sys.argv:
        print(json.dumps(measure()))
        return
    run = lambda env: json.loads(subprocess.run(  # noqa: E731
        [sys.executable, __file__, "--json"], env={**os.environ, **env}, check=True,
        capture_output=True, text=True).stdout)
    native = run({})
    fallback = run({"OPENREG_NATIVE_KERNELS": "0"})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; time per call, "
          "ratio = openreg / CPU in the same process")
    print(f"{'case':<40} {'CPU':>9} {'openreg':>9} {'ratio':>6} {'target':>7} "
          f"{'fallback':>9} {'ratio':>6}")
    rows = []
    for name, cpu in native["cpu"].items():
        dev, fb, fb_cpu = native["openreg"][name], fallback["openreg"][name], fallback["cpu"][name]
        print(f"{name:<40} {cpu * 1e6:>7.1f}us {dev * 1e6:>7.1f}us {dev / cpu:>5.2f}x "
              f"{TARGETS[name]:>6.1f}x {fb * 1e6:>7.1f}us {fb / fb_cpu:>5.2f}x")
        rows.append((name, dev / cpu, fb / fb_cpu))
    if "--svg" in sys.argv:
        with open(sys.argv[sys.argv.index("--svg") + 1], "w") as f:
            f.write(svg(rows))


if __name__ == "__main__":
    main()
