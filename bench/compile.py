"""torch.compile benchmark: Inductor on openreg against Inductor on the CPU (its C++ backend),
and against eager openreg, in one run; plus compile times, cold and from the on-disk cache in
a new process.

`python bench/compile.py` prints the table (`make bench` runs it).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def per_call(fn, sync, calls, repeats=7):
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def chain(x, w, b):
    return torch.nn.functional.gelu(x * w + b)


def mlp(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    forward = torch.compile(model)
    x, y = torch.randn(64, 784, device=device), torch.randint(0, 10, (64,), device=device)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(forward(x), y).backward()
        optimizer.step()
    return step


COMPILE_ONCE = """
import time, torch
x = torch.randn(1024, device="{device}")
start = time.perf_counter()
torch.compile(lambda x: torch.nn.functional.gelu(x * 2 + 1).sum())(x)
print(time.perf_counter() - start)
"""


def compile_seconds(device, cache):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", COMPILE_ONCE.format(device=device)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def main():
    rows = []
    for n, label in [(1 << 20, "1M"), (1 << 24, "16M")]:
        times = {}
        for device in ["cpu", "openreg"]:
            sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
            x, w, b = (torch.randn(n, device=device) for _ in range(3))
            compiled = torch.compile(chain)
            times[device] = per_call(lambda: compiled(x, w, b), sync, 20 if label == "1M" else 3)
            if device == "openreg":
                times["eager"] = per_call(lambda: chain(x, w, b), sync, 20 if label == "1M" else 3)
        rows.append((f"gelu(x * w + b), {label} floats", times))
    times = {}
    for device in ["cpu", "openreg"]:
        sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
        times[device] = per_call(mlp(device), sync, 20)
    rows.append(("MLP 784-256-256-10 training step, compiled", times))

    print(f"torch {torch.__version__}; time per call, median of 7 batches; Inductor on both sides")
    print(f"{'case':<44} {'CPU':>10} {'openreg':>10} {'ratio':>6} {'target':>7} {'eager':>10}")
    for name, t in rows:
        eager = f"{t['eager'] * 1e6:>8.0f}us" if "eager" in t else f"{'':>10}"
        print(f"{name:<44} {t['cpu'] * 1e6:>8.0f}us {t['openreg'] * 1e6:>8.0f}us "
              f"{t['openreg'] / t['cpu']:>5.2f}x {1.1:>6.1f}x {eager}")
    for device in ["cpu", "openreg"]:
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = compile_seconds(device, cache), compile_seconds(device, cache)
        print(f"{'compile gelu chain, ' + device + ', cold / cached':<44} {cold:>9.2f}s {warm:>9.2f}s")


if __name__ == "__main__":
    main()
