"""Profiler benchmark: what profiling costs an MLP training step on openreg (ratios to the
unprofiled step, measured in the same run), and what the runtime's trace costs a tiny
operator when it records and when it does not.

`python bench/profiler.py` prints the table (`make bench` runs it).
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from operators import per_call  # noqa: E402

STEPS = 20


def mlp_step(device):
    """An MLP's SGD training step on `device`, as a function of no arguments."""
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


def step_time(step, around):
    """Median seconds per step over 7 batches of STEPS steps, each batch inside `around()`."""
    def batch():
        with around():
            start = time.perf_counter()
            for _ in range(STEPS):
                step()
            torch.openreg.synchronize()
            return (time.perf_counter() - start) / STEPS
    batch()
    return statistics.median(batch() for _ in range(7))


class nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    step = mlp_step("openreg")
    plain = step_time(step, nothing)
    kineto = step_time(step, lambda: profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]))
    legacy = step_time(step, lambda: torch.autograd.profiler.profile(use_device="openreg"))
    print(f"torch {torch.__version__}; time per MLP 784-256-256-10 SGD step (batch 64), median of 7 x {STEPS}")
    print(f"{'case':<44} {'time':>9} {'ratio':>6} {'target':>7}")
    print(f"{'unprofiled':<44} {plain * 1e6:>7.0f}us {1:>5.2f}x")
    print(f"{'torch.profiler, CPU + PrivateUse1 (Kineto)':<44} {kineto * 1e6:>7.0f}us {kineto / plain:>5.2f}x {1.3:>6.1f}x")
    print(f"{'autograd.profiler, use_device (legacy)':<44} {legacy * 1e6:>7.0f}us {legacy / plain:>5.2f}x")

    # Off and on alternate, five times each, and each side keeps its median: a slow spell of
    # the shared machine then lands on both sides rather than on one.
    x = torch.randn(3, 3, device="openreg")
    offs, ons = [], []
    for _ in range(5):
        offs.append(per_call(lambda: x + x, "openreg", 2000))
        torch.openreg._C._trace_start()
        ons.append(per_call(lambda: x + x, "openreg", 2000))
        torch.openreg._C._trace_stop()
        torch.openreg._C._trace_start()  # drop the activities recorded above
        torch.openreg._C._trace_stop()
    off, on = statistics.median(offs), statistics.median(ons)
    print(f"{'x + x 3x3, runtime trace off':<44} {off * 1e9:>7.0f}ns {1:>5.2f}x")
    print(f"{'x + x 3x3, runtime trace recording':<44} {on * 1e9:>7.0f}ns {on / off:>5.2f}x")


if __name__ == "__main__":
    main()
