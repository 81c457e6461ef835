"""Records the allocation history of two training steps of the zoo's gpt2 on openreg
(torch.openreg.memory._record_memory_history) and draws the snapshot's trace as an SVG
(src/generated/memory-timeline.svg): the bytes held by live blocks over the allocator's
events, with the memory reserved in segments above them. Then profiles the same two steps with
`profile_memory=True` and draws the timeline PyTorch's viewer derives from the profile
(`_memory_viz._profile_to_snapshot`, what `profile_plot` shows) beside it
(src/generated/memory-profile.svg). Prints PyTorch's own text views of the snapshot
(torch.cuda._memory_viz: segsum, and the first lines of trace).

Usage: python book-tests/memory_picture.py OUT_DIR
"""

import sys
import warnings
from pathlib import Path

import torch
from torch.cuda import _memory_viz

sys.path.insert(0, str(Path(__file__).parents[1] / "openreg" / "python" / "tests"))
from test_zoo import LANGUAGE, batch_for  # noqa: E402

warnings.filterwarnings("ignore")


def gpt2_steps():
    torch.manual_seed(0)
    model = LANGUAGE["gpt2"]().to("openreg").train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = {k: v.to("openreg") for k, v in batch_for("gpt2").items()}

    def steps():
        for _ in range(2):
            optimizer.zero_grad()
            model(**batch).loss.backward()
            optimizer.step()
        torch.openreg.synchronize()
    return steps


def record() -> dict:
    steps = gpt2_steps()
    torch.openreg.memory._record_memory_history(max_entries=100_000, stacks="python")
    steps()
    snapshot = torch.openreg.memory._snapshot()
    torch.openreg.memory._record_memory_history(enabled=None)
    return snapshot


def profiled() -> dict:
    """The same steps under the profiler, as the snapshot PyTorch's viewer builds from it."""
    steps = gpt2_steps()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True,
                                with_stack=True) as prof:
        steps()
    return _memory_viz._profile_to_snapshot(prof)


def curves(snapshot):
    """(active, reserved) bytes after each event of device 0, counted back from the state at
    the end (the model's weights were allocated before recording began)."""
    trace = snapshot["device_traces"][0]
    sign = {"alloc": (1, 0), "free_completed": (-1, 0), "segment_alloc": (0, 1), "segment_free": (0, -1)}
    net = [sum(sign.get(e["action"], (0, 0))[k] * e["size"] for e in trace) for k in (0, 1)]
    device0 = [s for s in snapshot["segments"] if s["device"] == 0]
    active = sum(b["size"] for s in device0 for b in s["blocks"] if b["state"] == "active_allocated") - net[0]
    reserved = sum(s["total_size"] for s in device0) - net[1]
    out = []
    for e in trace:
        if e["action"] == "alloc":
            active += e["size"]
        elif e["action"] == "free_completed":
            active -= e["size"]
        elif e["action"] == "segment_alloc":
            reserved += e["size"]
        elif e["action"] == "segment_free":
            reserved -= e["size"]
        out.append((active, reserved))
    return out


def svg(points, what, width=720, height=240) -> str:
    left, top, bottom = 70, 44, 30
    top_value = max(max(p) if what[0] else p[0] for p in points) * 1.05
    x = lambda i: left + (width - left - 10) * i / max(1, len(points) - 1)
    y = lambda v: top + (height - top - bottom) * (1 - v / top_value)
    line = lambda k: " ".join(f"{x(i):.1f},{y(p[k]):.1f}" for i, p in enumerate(points))
    mib = top_value / 2**20
    ticks = "".join(
        f'<text x="{left - 6}" y="{y(v * 2**20) + 4:.1f}" text-anchor="end">{v:.1f} MiB</text>'
        f'<line x1="{left}" x2="{width - 10}" y1="{y(v * 2**20):.1f}" y2="{y(v * 2**20):.1f}" stroke="#ddd"/>'
        for v in (0, mib / 3, 2 * mib / 3))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
            f'font-size="11">{ticks}'
            + (f'<polyline fill="none" stroke="#f58518" stroke-width="1.5" points="{line(1)}"/>'
               f'<text x="{left}" y="14" fill="#f58518">{what[0]}</text>' if what[0] else '') +
            f'<polyline fill="none" stroke="#4c78a8" stroke-width="1.5" points="{line(0)}"/>'
            f'<text x="{left}" y="28" fill="#4c78a8">{what[1]}</text>'
            f'<text x="{(width + left) / 2}" y="{height - 8}" text-anchor="middle">{what[2]} of two '
            f'training steps ({len(points)})</text></svg>\n')


def main(out: Path):
    snapshot = record()
    trace = snapshot["device_traces"][0]
    (out / "memory-timeline.svg").write_text(
        svg(curves(snapshot), ("reserved in segments", "held by live blocks", "allocator events")))
    from_profile = profiled()
    (out / "memory-profile.svg").write_text(
        svg(curves(from_profile), (None, "held by live tensors", "profiler memory events")))
    model_frames = {f["name"] for e in trace if e["action"] == "alloc" for f in e["frames"]
                    if "transformers" in f["filename"]}
    print(_memory_viz.segsum(snapshot).split("\n\nLegend")[0].strip())
    print()
    print(f"{len(trace)} trace entries; allocations from {len(model_frames)} functions of transformers' gpt2, "
          f"among them {', '.join(sorted(model_frames & {'forward', '_attn', 'eager_attention_forward'}))}")
    print()
    print("\n".join(_memory_viz.trace(snapshot).splitlines()[:8]))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
