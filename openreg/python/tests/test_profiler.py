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
