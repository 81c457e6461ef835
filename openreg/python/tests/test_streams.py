"""Streams and events through the device guard (torch.Stream, torch.Event, torch.accelerator)."""

import threading

import pytest
import torch
import torch_openreg


def test_streams_and_current_stream():
    default = torch.accelerator.current_stream(0)
    assert default.stream_id == 0 and default.device == torch.device("openreg:0")
    s = torch.Stream(device="openreg:1", priority=-1)
    assert s.device == torch.device("openreg:1") and s.stream_id > 0
    with s:
        assert torch.accelerator.current_stream(1) == s
        assert torch.accelerator.current_stream(0) == default
    assert torch.accelerator.current_stream(1).stream_id == 0
    assert s.query()
    s.synchronize()


def test_events_record_query_synchronize_and_time():
    s = torch.Stream(device="openreg")
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    start.record(s)
    torch.ones(1000, device="openreg").sum()
    end.record(s)
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    s.wait_event(end)
    torch.accelerator.current_stream().wait_stream(s)


def test_unrecorded_event_queries_true_and_timing_needs_flag():
    e = torch.Event(device="openreg")
    assert e.query()
    e.synchronize()
    a, b = torch.Event(device="openreg"), torch.Event(device="openreg")
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)


def test_event_on_another_device_stream():
    e = torch.Event(device="openreg:0")
    e.record(torch.Stream(device="openreg:0"))
    with pytest.raises(RuntimeError, match="event device index 0 does not match the recording stream's device index 1"):
        e.record(torch.Stream(device="openreg:1"))


def test_threads_with_their_own_streams():
    errors = []

    def work(device):
        try:
            s = torch.Stream(device=f"openreg:{device}")
            with s:
                x = torch.arange(1000.0, device=f"openreg:{device}")
                for _ in range(20):
                    x = x + 1
                assert x.cpu()[0].item() == 20.0
            s.synchronize()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ANCHOR: overlap
def test_two_streams_overlap():
    import time

    torch.accelerator.synchronize()
    a, b = torch.Stream(device="openreg"), torch.Stream(device="openreg")
    start = time.perf_counter()
    with a:
        torch.openreg._sleep(200)
    with b:
        torch.openreg._sleep(200)
    queued = time.perf_counter() - start
    torch.accelerator.synchronize()
    wall = time.perf_counter() - start
    assert queued < 0.1, "queuing work does not wait for it"
    assert wall < 0.35, f"two 200 ms sleeps on two streams took {wall:.3f} s"
# ANCHOR_END: overlap


def test_device_to_device_copies_are_queued_and_ordered():
    x = torch.arange(1 << 20, dtype=torch.float32, device="openreg")
    s = torch.Stream(device="openreg")
    with s:
        torch.openreg._sleep(100)
        y = x.clone()  # queued behind the sleep on the same stream
        assert not s.query()
        z = y.to("openreg:1")  # across devices: waits for s, then runs on openreg:1's stream
    assert torch.equal(z.cpu(), torch.arange(1 << 20, dtype=torch.float32))


def test_external_streams_made_by_the_runtime():
    stream_id = torch_openreg._C._runtime_new_stream(1, 0)  # created outside PyTorch
    s = torch.openreg.ExternalStream(stream_id, device=1)
    assert s.stream_id == stream_id and s.device == torch.device("openreg:1")
    with s:
        assert torch.accelerator.current_stream(1) == s
        torch.openreg._sleep(50)
    assert not s.query()
    s.synchronize()
    with pytest.raises(ValueError, match="openreg:1 has no stream with id 999999"):
        torch.openreg.ExternalStream(999999, device=1).query()


def test_waiting_on_an_unrecorded_event_returns_at_once():
    # PyTorch (like CUDA) defines waiting on a never-recorded event as a no-op: no hang.
    e = torch.Event(device="openreg")
    s = torch.Stream(device="openreg")
    s.wait_event(e)
    e.wait(s)
    s.synchronize()
    assert s.query()
    start, end = torch.Event(device="openreg", enable_timing=True), torch.Event(device="openreg", enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded before calculating elapsed time"):
        start.elapsed_time(end)
