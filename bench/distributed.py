"""Distributed benchmark: occl on openreg tensors against Gloo on CPU tensors, side by side in
one process group ("cpu:gloo,openreg:occl") of 2 processes on this machine: all_reduce time
and bandwidth by size (4 bytes to 64 MiB), through shared memory and over TCP only, and a
DDP training step.

`python bench/distributed.py` prints the table (`make bench` runs it); it starts the two ranks
itself.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

WORLD = 2
SIZES = [4, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def human(n):
    return f"{n} B" if n < 1024 else f"{n >> 10} KiB" if n < 1 << 20 else f"{n >> 20} MiB"


def timed(fn, sync, repeats):
    """The median time of ``fn`` over ``repeats`` runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def all_reduce_rows(rank):
    import torch
    import torch.distributed as dist
    from torch_openreg.openreg.distributed import Options

    # occl between two processes of one host: shared memory (the default) and TCP only
    over_tcp = dist.new_group(backend="occl", pg_options=Options(shared_memory=False))
    cases = [("cpu", None), (f"openreg:{rank}", None), (f"openreg:{rank}", over_tcp)]
    rows = []
    for size in SIZES:
        repeats = 30 if size <= 1 << 20 else 7
        times = []
        for device, group in cases:
            t = torch.ones(size // 4, device=device)
            sync = (lambda: None) if device == "cpu" else torch.openreg.synchronize
            dist.barrier()
            times.append(timed(lambda: dist.all_reduce(t, group=group), sync, repeats))
        gloo, shm, tcp = times
        # bus bandwidth, as nccl-tests reports it: what each link carries, 2(n-1)/n of the data
        bus = lambda s: size * 2 * (WORLD - 1) / WORLD / s / 1e9  # noqa: E731
        cell = lambda s: f"{s * 1e6:.0f} µs ({bus(s):.2f} GB/s)"  # noqa: E731
        rows.append(f"| all_reduce {human(size)} | {cell(gloo)} | {cell(shm)} | {cell(tcp)} | "
                    f"{shm / gloo:.2f}x | {tcp / gloo:.2f}x |")
    return rows


def ddp_rows(rank):
    return [step_row(rank, True), step_row(rank, False)]


def step_row(rank, distributed):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    times = {}
    for device in ["cpu", f"openreg:{rank}"]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                    torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
        ddp = DDP(model) if distributed else model
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, foreach=False)
        x, y = torch.randn(64, 784, device=device), torch.randn(64, 10, device=device)

        def step():
            opt.zero_grad()
            out = ddp(x)
            ((out - y) * (out - y)).mean().backward()
            opt.step()
        sync = (lambda: None) if device == "cpu" else torch.openreg.synchronize
        dist.barrier()
        times[device] = timed(step, sync, 15)
    gloo, occl = times["cpu"], times[f"openreg:{rank}"]
    what = "DDP step" if distributed else "the same step without DDP (both ranks at once)"
    return f"| {what}, MLP 784-512-512-10, batch 64 per rank | {gloo * 1e3:.2f} ms | {occl * 1e3:.2f} ms | | {occl / gloo:.2f}x | |"


def rank_main(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import torch
    import torch.distributed as dist

    torch.openreg.set_device(rank)
    dist.init_process_group("cpu:gloo,openreg:occl", rank=rank, world_size=WORLD)
    rows = all_reduce_rows(rank) + ddp_rows(rank)
    dist.destroy_process_group()
    if rank == 0:
        print(f"{WORLD} processes on one machine ({os.cpu_count()} cores); median of repeats; "
              "bandwidth is bus bandwidth (2(n-1)/n of the data per link)\n")
        print("| case | Gloo, CPU tensors | occl, openreg tensors | occl over TCP only | occl / Gloo | occl TCP / Gloo |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    # One thread per rank for CPU operators, as torchrun sets it: two processes of two OpenMP
    # threads each on two cores spin against each other and make the CPU side ~10x slower.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), port], env=env) for r in range(WORLD)]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(codes):
        raise SystemExit(f"a rank failed: exit codes {codes}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(int(sys.argv[2]), sys.argv[3])
    else:
        main()
