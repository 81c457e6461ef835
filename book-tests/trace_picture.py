"""Profiles one MLP training step on openreg with Kineto and draws the trace's timeline as an
SVG (src/generated/profiler-trace.svg): the host's operators above, each stream's device work
below. The next batch is copied to the device on a second stream while the step computes, as
a training loop that prefetches does. Prints one line per row (what ran there).

Usage: python book-tests/trace_picture.py OUT.svg
"""

import collections
import json
import re
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

COLORS = {"kernel": "#4c78a8", "gpu_memcpy": "#f58518", "gpu_user_annotation": "#54a24b", "cpu_op": "#bab0ac"}


def step(model, optimizer, batch, target, side, pinned):
    # Prefetch the next batch on the side stream while this one computes.
    with side:
        upcoming = pinned.to("openreg", non_blocking=True)
    loss = torch.nn.functional.cross_entropy(model(batch), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch.accelerator.current_stream().wait_stream(side)
    return loss.item(), upcoming


def record() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch, target = torch.randn(64, 784, device="openreg"), torch.randint(0, 10, (64,), device="openreg")
    pinned = torch.randn(64, 784).pin_memory()
    side = torch.Stream(device="openreg")
    for _ in range(3):  # warm-up
        step(model, optimizer, batch, target, side, pinned)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step(model, optimizer, batch, target, side, pinned)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def rows(trace: dict):
    """(label, events) per row: top-level host operators, then each stream."""
    ops = sorted((e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    top, end = [], -1.0
    for e in ops:  # operators not inside another one
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e.get("dur", 0)
    names = {(m["pid"], m["tid"]): m["args"]["name"] for m in trace["traceEvents"]
             if m.get("ph") == "M" and m.get("name") == "thread_name"}
    device = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_user_annotation"):
            device[names.get((e["pid"], e["tid"]), f"device {e['pid']} row {e['tid']}")].append(e)
    return [("host: operators", top)] + sorted(device.items())


def svg(trace: dict) -> str:
    table = rows(trace)
    events = [e for _, evs in table for e in evs]
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e.get("dur", 0) for e in events)
    left, width, height, gap = 150, 850, 34, 12
    scale = width / max(t1 - t0, 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" '
           f'height="{len(table) * (height + gap) + 50}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>']
    for i, (label, evs) in enumerate(table):
        y = 10 + i * (height + gap)
        out.append(f'<text x="5" y="{y + height / 2 + 4}">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{width}" height="{height}" fill="#f4f4f4"/>')
        for e in evs:
            x, w = left + (e["ts"] - t0) * scale, max(e.get("dur", 0) * scale, 1.0)
            name = re.sub(r"^\w+::launch_", "", e["name"]).replace("aten::", "")
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{height}" '
                       f'fill="{COLORS[e["cat"]]}" stroke="white" stroke-width="0.5"><title>{e["name"]} '
                       f'({e.get("dur", 0):.0f} us)</title></rect>')
            if w > 6 * len(name):
                out.append(f'<text x="{x + 2:.1f}" y="{y + height / 2 + 4}" fill="white">{name}</text>')
    y = 10 + len(table) * (height + gap)
    out.append(f'<text x="{left}" y="{y + 12}">0 us</text>')
    out.append(f'<text x="{left + width}" y="{y + 12}" text-anchor="end">{t1 - t0:.0f} us</text>')
    for j, (cat, color) in enumerate(COLORS.items()):
        out.append(f'<rect x="{left + 120 + j * 150}" y="{y + 2}" width="12" height="12" fill="{color}"/>'
                   f'<text x="{left + 136 + j * 150}" y="{y + 12}">{cat}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def summary(trace: dict) -> str:
    lines = []
    for label, evs in rows(trace):
        kinds = collections.Counter(e["cat"] for e in evs)
        lines.append(f"{label:28} " + ", ".join(f"{n} {cat}" for cat, n in sorted(kinds.items())))
    return "\n".join(lines) + "\n"


def main(out: str) -> None:
    trace = record()
    Path(out).write_text(svg(trace))
    print(summary(trace), end="")


if __name__ == "__main__":
    main(sys.argv[1])
