"""The profiler on openreg: the legacy path's device times (PrivateUse1 profiler stubs) and
the runtime's annotation trace (the PrivateUse1 observer)."""

import threading

import torch


def profile_step(x, w):
    with torch.autograd.profiler.profile(use_device="openreg") as prof:
        with torch.autograd.profiler.record_function("step"):
            y = torch.relu(torch.mm(x, w) + 1)
            y.sum()
        torch.openreg.synchronize()
    return prof


# ANCHOR: legacy
def test_legacy_profiler_reports_positive_cpu_and_device_times():
    x, w = torch.randn(128, 256, device="openreg"), torch.randn(256, 256, device="openreg")
    profile_step(x, w)  # warm-up: the first profiled run initialises the profiler
    prof = profile_step(x, w)
    events = {e.name: e for e in prof.function_events}
    for name in ["aten::mm", "aten::add", "aten::relu", "aten::sum", "step"]:
        assert events[name].cpu_time_total > 0, name
        assert events[name].device_time_total > 0, name
    # The range's device time spans the operators it contains (one stream: no overlap).
    inside = sum(events[n].device_time_total for n in ["aten::mm", "aten::add", "aten::relu", "aten::sum"])
    assert events["step"].device_time_total >= inside
    table = prof.key_averages().table(sort_by="device_time_total")
    assert "OPENREG total" in table and "aten::mm" in table
# ANCHOR_END: legacy


def test_device_time_follows_the_stream_not_the_host():
    # An operator queued behind a 50 ms stream sleep: its device interval starts when the
    # stream reaches it, so its device time is short although the host waited.
    x = torch.ones(4, device="openreg")
    with torch.autograd.profiler.profile(use_device="openreg") as prof:
        torch.openreg._sleep(50)  # 50 ms of "device work" on the current stream
        y = x + 1
        torch.openreg.synchronize()
    add = next(e for e in prof.function_events if e.name == "aten::add")
    assert 0 < add.device_time_total < 50_000
    assert torch.equal(y.cpu(), torch.full((4,), 2.0))


def test_a_profiler_session_in_a_second_thread():
    results = {}

    def work():
        torch.openreg.set_device(1)
        x = torch.randn(64, 64, device="openreg:1")
        results["prof"] = profile_step(x, x)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    events = {e.name: e for e in results["prof"].function_events}
    assert events["aten::mm"].device_time_total > 0 and events["aten::mm"].cpu_time_total > 0


# ANCHOR: ranges
def test_emit_ranges_records_each_operator_as_a_range():
    x = torch.randn(32, 32, device="openreg")
    with torch.openreg.profiler.emit_ranges() as ranges:
        with torch.autograd.profiler.record_function("block"):
            torch.mm(x, x).relu()
    names = [r[0] for r in ranges]
    assert "block" in names and "aten::mm" in names and "aten::relu" in names
    block = ranges[names.index("block")]
    mm = ranges[names.index("aten::mm")]
    assert block[2] <= mm[2] <= mm[3] <= block[3], "ranges nest"
    # Outside the block nothing is recorded, and no profiler is left running.
    torch.mm(x, x)
    torch.openreg._C._trace_start()
    torch.mm(x, x)
    assert torch.openreg._C._trace_stop() == []
    assert not torch.autograd.profiler._is_profiler_enabled
# ANCHOR_END: ranges


# --- Kineto: torch.profiler with ProfilerActivity.PrivateUse1 ---

from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def two_stream_step(x, side):
    with record_function("step"):
        y = torch.mm(x, x) + 1
        with side:
            z = torch.relu(x)
        side.synchronize()
        return (y + z).cpu()


def device_events(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_user_annotation")]


# ANCHOR: kineto
def test_kineto_shows_device_work_per_stream_linked_to_its_operators(tmp_path):
    import json

    x, side = torch.randn(256, 256, device="openreg"), torch.Stream(device="openreg")
    two_stream_step(x, side)  # warm-up
    with profile(activities=ACTIVITIES) as prof:
        result = two_stream_step(x, side)
    torch.testing.assert_close(result, (torch.mm(x.cpu(), x.cpu()) + 1) + x.cpu().relu(), rtol=1e-4, atol=1e-4)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())  # the trace file parses
    device = device_events(trace)
    names = [e["name"] for e in device]
    assert "matmul::launch_matmul" in names and "copy::memcpy" in names

    # One row per stream, named after it; the relu ran on the side stream.
    rows = {(e["pid"], e["tid"]) for e in device}
    assert rows == {(0, 0), (0, side.stream_id)}
    row_names = {(m["pid"], m["tid"]): m["args"]["name"] for m in trace["traceEvents"]
                 if m.get("ph") == "M" and m["name"] == "thread_name"}
    assert row_names[(0, side.stream_id)] == f"openreg:0 stream {side.stream_id}"
    # Work on one stream runs in order, one piece after the other.
    for row in rows:
        spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in device if (e["pid"], e["tid"]) == row)
        assert all(a_end <= b_start + 1 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))

    # Each kernel is linked to the operator that launched it.
    ops = {e["args"]["External id"]: e["name"] for e in trace["traceEvents"]
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    launched_by = {e["name"]: ops.get(e["args"].get("External id")) for e in device if e["cat"] == "kernel"}
    assert launched_by["matmul::launch_matmul"] == "aten::mm"
    by_name = {e.key: e for e in prof.key_averages()}
    assert by_name["aten::mm"].device_time_total > 0
    assert "step" in {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
# ANCHOR_END: kineto


def test_kineto_memory_events():
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        y = torch.ones(1024, 1024, device="openreg") * 2
        del y
    # Allocations are attributed to the operators that made them; frees are [memory] events.
    by_name = {e.key: e for e in prof.key_averages()}
    assert by_name["aten::empty"].self_device_memory_usage == 4 << 20
    assert by_name["aten::mul"].self_device_memory_usage == 4 << 20
    frees = [e.device_memory_usage for e in prof.events() if e.name == "[memory]"]
    assert frees.count(-(4 << 20)) == 2, frees


def test_kineto_in_a_second_thread_and_bad_activities():
    results = {}

    def work():
        x = torch.randn(64, 64, device="openreg")
        with profile(activities=ACTIVITIES) as prof:
            torch.mm(x, x)
        results["names"] = {e.name for e in prof.events()}

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and "matmul::launch_matmul" in results["names"]
    import pytest

    with pytest.raises(TypeError, match="Expected ProfilerActivity"):
        with profile(activities=["openreg"]):
            pass
    # The device and the profiler still work afterwards.
    with profile(activities=ACTIVITIES) as prof:
        torch.ones(3, device="openreg").add_(1)
    assert any(e.device_type == torch.autograd.DeviceType.PrivateUse1 for e in prof.events())
