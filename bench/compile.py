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


def per_call(functions, sync, calls, repeats=7):
    """Median time per call of each function, the batches of all of them interleaved, so
    that a slow moment of this shared machine falls on every column alike."""
    for fn in functions.values():
        fn()
    sync()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            times[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def chain(x, w, b):
    return torch.nn.functional.gelu(x * w + b)


def row_softmax(x, w, b):
    return torch.softmax(x * w + b, dim=-1)


def mlp(device, compile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    forward = torch.compile(model) if compile else model
    x, y = torch.randn(64, 784, device=device), torch.randn(64, device=device).abs().mul(3).long()

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


# (name, function, shape of x; w and b broadcast along the last dimension, calls per batch)
CASES = [
    ("gelu(x * w + b), 64K floats", chain, (1 << 16,), 200),
    ("gelu(x * w + b), 1M floats", chain, (1 << 20,), 20),
    ("gelu(x * w + b), 4M+17 floats", chain, ((1 << 22) + 17,), 5),
    ("gelu(x * w + b), 16M floats", chain, (1 << 24,), 3),
    ("gelu(x * w + b), 1000 x 4097", chain, (1000, 4097), 5),
    ("softmax(x * w + b), 4096 x 1000", row_softmax, (4096, 1000), 10),
    ("softmax(x * w + b), 16 x 65536", row_softmax, (16, 65536), 10),
]


def sync_for(device):
    return torch.openreg.synchronize if device == "openreg" else (lambda: None)


def main():
    rows = []
    for name, function, shape, calls in CASES:
        times = {}
        for device in ["cpu", "openreg"]:
            x = torch.randn(shape, device=device)
            w, b = torch.randn(shape[-1], device=device), torch.randn(shape[-1], device=device)
            compiled = torch.compile(function)
            measured = per_call({"compiled": lambda: compiled(x, w, b), "eager": lambda: function(x, w, b)},
                                sync_for(device), calls)
            times[device], times[device + " eager"] = measured["compiled"], measured["eager"]
        rows.append((name, times))
    times = {}
    for device in ["cpu", "openreg"]:
        measured = per_call({"compiled": mlp(device, True), "eager": mlp(device, False)}, sync_for(device), 20)
        times[device], times[device + " eager"] = measured["compiled"], measured["eager"]
    rows.append(("MLP 784-256-256-10 training step", times))

    print(f"torch {torch.__version__}; time per call, median of 7 batches; Inductor on CPU and openreg; "
          "eager: the same call uncompiled, its batches interleaved with the compiled call's")
    print(f"{'case':<36} {'CPU':>10} {'openreg':>10} {'ratio':>6} {'eager':>10} {'compiled/eager':>15} "
          f"{'CPU eager':>10} {'CPU compiled/eager':>19}")
    for name, t in rows:
        print(f"{name:<36} {t['cpu'] * 1e6:>8.0f}us {t['openreg'] * 1e6:>8.0f}us "
              f"{t['openreg'] / t['cpu']:>5.2f}x {t['openreg eager'] * 1e6:>8.0f}us "
              f"{t['openreg'] / t['openreg eager']:>14.2f}x {t['cpu eager'] * 1e6:>8.0f}us "
              f"{t['cpu'] / t['cpu eager']:>18.2f}x")
    for device in ["cpu", "openreg"]:
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = compile_seconds(device, cache), compile_seconds(device, cache)
        print(f"{'compile gelu chain, ' + device + ', cold / cached':<36} {cold:>9.2f}s {warm:>9.2f}s")


if __name__ == "__main__":
    main()
