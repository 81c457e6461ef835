"""Backend benchmarks: numbers, and ratios to CPU measured in the same run.

Run with `make bench`. Timings are medians of repeats; the machine is shared, so compare the
ratios, not the absolute numbers, between runs.
"""

import os
import statistics
import subprocess
import sys
import time

import torch


def median_time(fn, repeats=15, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def import_time(repeats=7):
    """Seconds for `import torch_openreg` after `import torch`, in fresh interpreters."""
    code = (
        "import time, torch\n"
        "t = time.perf_counter()\n"
        "import torch_openreg\n"
        "print(time.perf_counter() - t)\n"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}  # else torch imports it first
    samples = [
        float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stdout)
        for _ in range(repeats)
    ]
    return statistics.median(samples)


def main():
    rows = []
    t = import_time()
    rows.append(("import torch_openreg (after torch)", f"{t * 1e3:.1f} ms", "target < 20 ms"))

    nbytes = 64 << 20
    host = torch.randn(nbytes // 4)
    dev = host.to("openreg")
    gbps = lambda seconds: nbytes / seconds / 1e9  # noqa: E731
    clone = median_time(lambda: host.clone())
    h2d = median_time(lambda: host.to("openreg"))
    d2h = median_time(lambda: dev.cpu())
    d2d = median_time(lambda: (dev.clone(), torch.accelerator.synchronize()))  # queued: wait
    rows.append(("CPU clone() 64 MiB f32", f"{gbps(clone):.2f} GB/s", "reference"))
    for name, seconds in [(".to('openreg') 64 MiB", h2d), (".cpu() 64 MiB", d2h),
                          ("device clone() 64 MiB", d2d)]:
        rows.append((name, f"{gbps(seconds):.2f} GB/s",
                     f"{clone / seconds:.2f}x of CPU clone (target >= 0.80x)"
                     if "clone" not in name else f"{clone / seconds:.2f}x of CPU clone"))

    pinned = host.pin_memory()
    h2d_pinned = median_time(lambda: (pinned.to("openreg", non_blocking=True), torch.accelerator.synchronize()))
    rows.append(("pinned .to('openreg', non_blocking) 64 MiB", f"{gbps(h2d_pinned):.2f} GB/s",
                 f"{clone / h2d_pinned:.2f}x of CPU clone (target >= 0.80x)"))

    # The same copies into buffers that already exist: bandwidth without allocation costs
    # (a fresh CPU buffer pays a page fault per 4 KiB page; freed device pages stay committed).
    host_dst = torch.empty_like(host)
    dev_dst = torch.empty_like(dev)
    cpu_copy = median_time(lambda: host_dst.copy_(host))
    rows.append(("CPU copy_ 64 MiB into existing", f"{gbps(cpu_copy):.2f} GB/s", "reference"))
    for name, fn in [("copy_ host->openreg, existing", lambda: dev_dst.copy_(host)),
                     ("copy_ openreg->host, existing", lambda: host_dst.copy_(dev)),
                     ("copy_ openreg->openreg, existing",
                      lambda: (dev_dst.copy_(dev), torch.accelerator.synchronize()))]:
        seconds = median_time(fn)
        rows.append((name, f"{gbps(seconds):.2f} GB/s", f"{cpu_copy / seconds:.2f}x of CPU copy_"))

    # Allocation: a 1 MiB tensor created and freed; the openreg block comes from the cache.
    cpu_empty = median_time(lambda: torch.empty(1 << 18), repeats=5000, warmup=500)
    dev_empty = median_time(lambda: torch.empty(1 << 18, device="openreg"), repeats=5000, warmup=500)
    rows.append(("torch.empty 1 MiB + free, CPU", f"{cpu_empty * 1e6:.2f} us", "reference"))
    rows.append(("torch.empty 1 MiB + free, openreg (cached)", f"{dev_empty * 1e6:.2f} us",
                 f"{dev_empty / cpu_empty:.2f}x CPU time (target < 2 us)"))

    # Two streams with 100 ms of queued work each: overlapped, the wall time is near 100 ms.
    def two_streams():
        a, b = torch.Stream(device="openreg"), torch.Stream(device="openreg")
        with a:
            torch.openreg._sleep(100)
        with b:
            torch.openreg._sleep(100)
        torch.accelerator.synchronize()

    overlap = median_time(two_streams, repeats=3, warmup=1)
    rows.append(("two streams x 100 ms of work", f"{overlap * 1e3:.0f} ms",
                 f"{overlap / 0.2:.2f}x of the 200 ms sum (overlap)"))

    width = max(len(r[0]) for r in rows)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>12}  {note}")


if __name__ == "__main__":
    main()
