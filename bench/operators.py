"""Operator benchmarks: native Rust kernels against CPU, and against the same cases through
the plain CPU fallback (a second process with OPENREG_NATIVE_KERNELS=0).

`python bench/operators.py` prints the table; `--json` prints raw seconds for one process.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import torch


def per_call(fn, device, calls, repeats=7):
    """Median seconds per call of `fn`, over batches of `calls` calls ended by a synchronize."""
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def mlp_step(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 784).to(device)
    y = torch.randint(0, 10, (64,)).to(device)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


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
    m1, m2 = torch.randn(512, 512).to(device), torch.randn(512, 512).to(device)
    out.append(("mm 512x512", lambda: m1 @ m2, 20))
    out.append(("MLP 784-256-256-10 SGD step, batch 64", mlp_step(device), 20))
    return out
# ANCHOR_END: cases

TARGETS = {"x + x 3x3": 1.0, "add 1M": 1.1, "mul 1M": 1.1, "relu 1M": 1.1, "add 16M": 1.1,
           "mul 16M": 1.1, "relu 16M": 1.1, "sum 16M": 1.2, "mm 512x512": 1.2,
           "MLP 784-256-256-10 SGD step, batch 64": 1.3}


def measure(device):
    return {name: per_call(fn, device, calls) for name, fn, calls in cases(device)}


def main():
    if "--json" in sys.argv:
        print(json.dumps({"cpu": measure("cpu"), "openreg": measure("openreg")}))
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
    for name, cpu in native["cpu"].items():
        dev, fb, fb_cpu = native["openreg"][name], fallback["openreg"][name], fallback["cpu"][name]
        print(f"{name:<40} {cpu * 1e6:>7.1f}us {dev * 1e6:>7.1f}us {dev / cpu:>5.2f}x "
              f"{TARGETS[name]:>6.1f}x {fb * 1e6:>7.1f}us {fb / fb_cpu:>5.2f}x")


if __name__ == "__main__":
    main()
