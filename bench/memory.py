"""Memory history benchmark: what recording allocation history (for memory snapshots) costs a
zoo model's training step on openreg, as ratios to the same step unrecorded, measured in
alternation in one run; the CPU step is timed alongside for scale.

`python bench/memory.py` prints the table; `book-tests/generate.py memory-bench` records it for the book.
"""

import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "openreg" / "python" / "tests"))
from zoo import sync, training_step  # noqa: E402
from test_zoo import LANGUAGE, VISION, batch_for  # noqa: E402

warnings.filterwarnings("ignore")
ROUNDS = {"gpt2": 60, "resnet10t": 15}  # a few seconds each
MODES = {  # name: _record_memory_history arguments (None: not recording)
    "off": None,
    "python stacks": {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 100_000},
    "C++ stacks": {"enabled": "all", "context": "all", "stacks": "all", "max_entries": 100_000},
}


def timed(step, mode):
    memory = torch.openreg.memory
    if mode is not None:
        memory._record_memory_history(**mode, clear_history=True)
    try:
        start = time.perf_counter()
        step()
        sync("openreg")
        return time.perf_counter() - start
    finally:
        memory._record_memory_history(enabled=None)


def main():
    print(f"{'case':<28}{'CPU ms':>9}{'openreg ms':>12}{'python stacks':>15}{'C++ stacks':>12}")
    for name in ("gpt2", "resnet10t"):
        make = {**LANGUAGE, **VISION}[name]
        torch.manual_seed(0)
        model = make()
        cpu = training_step(make(), batch_for(name), "cpu")
        step = training_step(model, batch_for(name), "openreg")
        for _ in range(2):
            cpu()
            step()
            sync("openreg")
        times = {m: [] for m in MODES}
        cpu_times = []
        for _ in range(ROUNDS[name]):
            start = time.perf_counter()
            cpu()
            cpu_times.append(time.perf_counter() - start)
            for m, args in MODES.items():
                times[m].append(timed(step, args))
        off = statistics.median(times["off"])
        ratios = [statistics.median(times[m]) / off for m in ("python stacks", "C++ stacks")]
        print(f"{name + ' training step':<28}{statistics.median(cpu_times) * 1e3:>9.1f}{off * 1e3:>12.1f}"
              f"{ratios[0]:>14.2f}x{ratios[1]:>11.2f}x")


if __name__ == "__main__":
    main()
