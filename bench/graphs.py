"""Graph benchmark: a captured MLP training step and a chain of 100 tiny operators, replayed,
against the same work run eagerly on openreg and on the CPU, in one run (ratios).

`python bench/graphs.py` prints the table (`make bench` runs it).
"""

import statistics
import time

import torch


def per_call(fn, calls, sync, repeats=7):
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


def mlp_step(device):
    """One SGD step of an MLP 784-256-256-10 on a batch of 64, with static inputs: the step
    a graph can capture (a mean-squared loss; no operator that waits for the device)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    x, target = torch.randn(64, 784, device=device), torch.randn(64, 10, device=device)

    def step():
        optimizer.zero_grad(set_to_none=False)
        out = model(x)
        ((out - target) * (out - target)).mean().backward()
        optimizer.step()
    return step


def chain(device):
    a = torch.ones(3, 3, device=device)

    def run():
        for _ in range(100):
            a.mul_(1.0001)
    return run


def main():
    cpu_sync = lambda: None  # noqa: E731
    side = torch.Stream(device="openreg")
    rows = []
    for name, make, calls in [("MLP 784-256-256-10 MSE SGD step, batch 64", mlp_step, 20),
                              ("100 pointwise ops on 3x3", chain, 20)]:
        cpu = per_call(make("cpu"), calls, cpu_sync)
        with side:
            work = make("openreg")
            eager = per_call(work, calls, side.synchronize)
            graph = torch.accelerator.Graph()
            graph.capture_begin()
            work()
            graph.capture_end()
            replay = per_call(graph.replay, calls, side.synchronize)
        rows.append((name, cpu, eager, replay))
    print(f"torch {torch.__version__}; time per call, median of 7 batches")
    print(f"{'case':<40} {'CPU':>9} {'eager':>9} {'replay':>9} {'replay/CPU':>10} {'replay/eager':>12}")
    for name, cpu, eager, replay in rows:
        print(f"{name:<40} {cpu * 1e6:>7.0f}us {eager * 1e6:>7.0f}us {replay * 1e6:>7.0f}us "
              f"{replay / cpu:>9.2f}x {replay / eager:>11.2f}x")
    print("targets: MLP step replay <= 0.5x CPU eager and faster than eager; 100 ops replay <= 0.2x eager")


if __name__ == "__main__":
    main()
