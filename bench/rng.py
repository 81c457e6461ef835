"""Random-number benchmark: randn, rand and randint of 1M and 16M elements, and dropout of 16M,
on openreg (Philox, every core) against CPU (a Mersenne Twister, one thread draws) in one run.

`python bench/rng.py` prints the table (`make bench` runs it).
"""

import statistics
import time

import torch

CASES = [
    ("randn 1M", lambda d: torch.randn(1 << 20, device=d)),
    ("randn 16M", lambda d: torch.randn(1 << 24, device=d)),
    ("rand 1M", lambda d: torch.rand(1 << 20, device=d)),
    ("rand 16M", lambda d: torch.rand(1 << 24, device=d)),
    ("randint 1M", lambda d: torch.randint(0, 1000, (1 << 20,), device=d)),
    ("randint 16M", lambda d: torch.randint(0, 1000, (1 << 24,), device=d)),
    ("randn float64 1M", lambda d: torch.randn(1 << 20, device=d, dtype=torch.float64)),
    ("randperm 1M", lambda d: torch.randperm(1 << 20, device=d)),
]


def timed(fn, device, repeats):
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    fn(device)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(device)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    print(f"torch {torch.__version__}")
    print(f"{'case':<28}{'CPU':>11}{'openreg':>11}{'ratio':>8}")
    x = {d: torch.ones(1 << 24, device=d) for d in ("cpu", "openreg")}
    dropout = ("dropout 16M", lambda d: torch.nn.functional.dropout(x[d], 0.5))
    for name, fn in [*CASES, dropout]:
        repeats = 5 if "16M" in name else 15
        cpu, dev = timed(fn, "cpu", repeats), timed(fn, "openreg", repeats)
        print(f"{name:<28}{cpu * 1e3:>9.2f}ms{dev * 1e3:>9.2f}ms{dev / cpu:>7.2f}x")


if __name__ == "__main__":
    main()
