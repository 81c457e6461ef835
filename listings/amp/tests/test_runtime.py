"""The device runtime through PyTorch's own API: copies over the correctness matrix, on
every stream; streams that run asynchronously and in order; events; and the caching
allocator's reuse, record_stream and statistics."""

import time

import pytest
import torch
import torch_openreg  # noqa: F401  (explicit here; `import torch` also loads it)

DEVICES = ["openreg:0", "openreg:1"]
LAYOUTS = {
    "contiguous": lambda: torch.randn(4, 5),
    "transposed": lambda: torch.randn(5, 4).t(),
    "strided": lambda: torch.randn(4, 10)[:, ::2],
    "offset": lambda: torch.randn(20)[3:15].view(3, 4),
    "odd": lambda: torch.randn(3, 7, 13),
    "zero_dim": lambda: torch.randn(()),
    "empty": lambda: torch.randn(0, 5),
}
DTYPES = [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64]


def sample(layout, dtype):
    t = LAYOUTS[layout]()
    return (t * 10).to(dtype) if dtype in (torch.int64, torch.bool) else t.to(dtype)


def on(t, device):
    """The same values, with the same strides, on the device (t.to would make them dense)."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device).copy_(t)


# ANCHOR: copies
@pytest.mark.parametrize("stream", ["default", "new"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copies_keep_values_and_layout(layout, dtype, device, stream):
    t = sample(layout, dtype)
    s = torch.Stream(device) if stream == "new" else torch.accelerator.current_stream(device)
    with s:
        x = on(t, device)
        assert x.stride() == t.stride() and torch.equal(x.cpu(), t)
        # Device to device: into a transposed destination, onto the other device, and a
        # clone (the allocator's copy_data path for storages).
        if t.dim() == 2:
            dst = torch.empty(t.shape[::-1], dtype=dtype, device=device).t()
            assert torch.equal(dst.copy_(x).cpu(), t)
        other = DEVICES[1 - DEVICES.index(device)]
        assert torch.equal(x.to(other).cpu(), t)
        assert torch.equal(x.clone().cpu(), t)
        storage = x.untyped_storage().clone()
        y = torch.empty(0, dtype=dtype, device=device).set_(storage, x.storage_offset(), x.size(), x.stride())
        assert torch.equal(y.cpu(), t)
        if t.numel() == 1:
            assert x.item() == t.item()
# ANCHOR_END: copies


def test_a_copy_into_part_of_a_tensor_leaves_the_rest():
    x = torch.zeros(4, 6, device="openreg")
    x[:, 1::2] = torch.ones(4, 3)
    expected = torch.zeros(4, 6)
    expected[:, 1::2] = 1
    assert torch.equal(x.cpu(), expected)


# ANCHOR: streams
def test_work_is_queued_and_runs_asynchronously():
    s = torch.Stream("openreg")
    with s:
        start = time.monotonic()
        torch.openreg._sleep(200)
        assert time.monotonic() - start < 0.1, "queueing work does not wait for it"
        assert not s.query()
    s.synchronize()
    assert s.query() and time.monotonic() - start >= 0.2


def test_work_on_one_stream_runs_in_order():
    with torch.Stream("openreg"):
        x = torch.zeros(1000, device="openreg")
        torch.openreg._sleep(100)
        x.copy_(torch.arange(1000.0))  # queued behind the sleep
        assert torch.equal(x.cpu(), torch.arange(1000.0))  # the read waits for both


def test_wait_stream_orders_two_streams():
    producer, consumer = torch.Stream("openreg"), torch.Stream("openreg")
    x = torch.zeros(1000, device="openreg")
    x.record_stream(producer)
    with producer:
        torch.openreg._sleep(200)
        x.copy_(torch.ones(1000))
    consumer.wait_stream(producer)  # an event recorded on producer, waited for by consumer
    with consumer:
        assert not consumer.query()  # it waits for the producer's sleep
        assert torch.equal(x.cpu(), torch.ones(1000))


def test_synchronize_waits_for_every_stream_of_the_device():
    streams = [torch.Stream("openreg"), torch.Stream("openreg")]
    for s in streams:
        with s:
            torch.openreg._sleep(100)
    torch.openreg.synchronize()
    assert all(s.query() for s in streams)


def test_current_stream_is_per_device_and_per_thread():
    s = torch.Stream("openreg:1")
    with s:
        assert torch.accelerator.current_stream("openreg:1") == s
        assert torch.accelerator.current_stream("openreg:0").stream_id == 0
    assert torch.accelerator.current_stream("openreg:1").stream_id == 0
# ANCHOR_END: streams


# ANCHOR: events
def test_events_complete_in_stream_order_and_time_the_work_between():
    start, end = torch.Event("openreg", enable_timing=True), torch.Event("openreg", enable_timing=True)
    s = torch.Stream("openreg")
    with s:
        start.record()
        torch.openreg._sleep(100)
        end.record()
    assert start.query() or not end.query()
    end.synchronize()
    assert end.query() and start.query()
    assert 100 <= start.elapsed_time(end) < 2000


def test_events_not_recorded_or_not_reached_cannot_be_timed():
    e = torch.Event("openreg", enable_timing=True)
    assert e.query()  # never recorded: nothing to wait for
    e.synchronize()
    with pytest.raises(ValueError, match="Both events must be recorded"):  # PyTorch's check
        e.elapsed_time(torch.Event("openreg", enable_timing=True))
    start, end = torch.Event("openreg", enable_timing=True), torch.Event("openreg", enable_timing=True)
    start.record()
    torch.openreg._sleep(200)
    end.record()
    with pytest.raises(RuntimeError, match="Both events must be completed"):
        start.elapsed_time(end)  # end is still queued: PyTorch asks queryEvent first
    torch.openreg.synchronize()
# ANCHOR_END: events


def test_bad_stream_and_device_errors():
    with pytest.raises(RuntimeError, match=r"invalid device ordinal: index 5"):
        torch.Stream("openreg:5")
    device_type = torch.Stream("openreg").device_type
    with pytest.raises(RuntimeError, match=r"no stream 999 on openreg:0, expected an id in \[0, "):
        torch.Stream(stream_id=999, device_index=0, device_type=device_type).synchronize()


# ANCHOR: allocator
def test_a_freed_block_is_reused_on_its_stream_only():
    s1, s2 = torch.Stream("openreg"), torch.Stream("openreg")
    with s1:
        ptr = torch.empty(1000, device="openreg").data_ptr()  # freed at once
        assert torch.empty(1000, device="openreg").data_ptr() == ptr
    with s2:
        assert torch.empty(1000, device="openreg").data_ptr() != ptr


def test_record_stream_keeps_a_block_until_that_streams_work_is_done():
    user = torch.Stream("openreg")
    x = torch.empty(1000, device="openreg")
    ptr = x.data_ptr()
    with user:
        torch.openreg._sleep(200)
    x.record_stream(user)
    del x
    assert torch.empty(1000, device="openreg").data_ptr() != ptr  # user's work is pending
    user.synchronize()
    assert torch.empty(1000, device="openreg").data_ptr() == ptr


def test_statistics_peaks_and_empty_cache():
    torch.openreg.synchronize()
    torch.openreg.empty_cache()
    base = torch.openreg.memory_allocated()
    torch.openreg.reset_peak_memory_stats()
    x = torch.empty(1000, device="openreg")  # 4000 bytes, rounded up to 4096
    assert torch.openreg.memory_allocated() == base + 4096
    assert torch.openreg.max_memory_allocated() == base + 4096
    del x
    assert torch.openreg.memory_allocated() == base
    assert torch.openreg.max_memory_allocated() == base + 4096
    assert torch.openreg.memory_reserved() >= base + 4096  # cached, not given back
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved() == torch.openreg.memory_allocated() == base
    stats = torch.accelerator.memory_stats()
    assert stats["allocation.all.current"] == stats["active.all.current"]


def test_zero_bytes_have_no_block():
    before = torch.openreg.memory_allocated()
    assert torch.empty(0, device="openreg").data_ptr() == 0
    assert torch.openreg.memory_allocated() == before
# ANCHOR_END: allocator
