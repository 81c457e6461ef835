"""Device memory statistics through torch.accelerator, and host memory."""

import pytest
import torch

MB = 1 << 20


def test_memory_allocated_follows_alloc_and_free():
    torch.accelerator.synchronize()
    before = torch.accelerator.memory_allocated(1)
    x = torch.empty(MB, dtype=torch.uint8, device="openreg:1")
    assert torch.accelerator.memory_allocated(1) == before + MB
    assert torch.accelerator.memory_allocated(0) == torch.accelerator.memory_allocated("openreg:0")
    y = torch.empty(10, device="openreg:1")  # 40 bytes, rounded up to 512
    assert torch.accelerator.memory_allocated(1) == before + MB + 512
    del x, y
    assert torch.accelerator.memory_allocated(1) == before


def test_peak_and_reset():
    torch.accelerator.reset_peak_memory_stats(0)
    base = torch.accelerator.memory_allocated(0)
    assert torch.accelerator.max_memory_allocated(0) == base
    x = torch.empty(4 * MB, dtype=torch.uint8, device="openreg:0")
    del x
    assert torch.accelerator.max_memory_allocated(0) == base + 4 * MB
    assert torch.accelerator.max_memory_reserved(0) >= base + 4 * MB
    torch.accelerator.reset_peak_memory_stats(0)
    assert torch.accelerator.max_memory_allocated(0) == base


def test_memory_stats_and_info():
    x = torch.empty(2 * MB, dtype=torch.uint8, device="openreg:1")
    stats = torch.accelerator.memory_stats(1)
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated(1)
    assert stats["allocated_bytes.large_pool.current"] >= 2 * MB
    assert stats["reserved_bytes.all.current"] == torch.accelerator.memory_reserved(1)
    assert stats["num_device_alloc"] >= 1
    free, total = torch.accelerator.get_memory_info(1)
    assert total == 8 << 30 and free <= total - 2 * MB
    del x
    torch.accelerator.empty_cache()
    torch.accelerator.reset_accumulated_memory_stats(1)
    assert torch.accelerator.memory_stats(1)["num_device_alloc"] == 0


def test_out_of_memory_is_a_clear_error():
    with pytest.raises(torch.OutOfMemoryError, match=r"openreg:0 out of memory: tried to allocate 16\.00 GiB; "
                       r".* allocated and .* reserved by PyTorch, of a capacity of 8\.00 GiB"):
        torch.empty(16 << 30, dtype=torch.uint8, device="openreg:0")
    assert torch.accelerator.memory_stats(0)["num_ooms"] >= 1


def test_capacity_comes_from_the_environment():
    import subprocess, sys
    code = (
        "import torch\n"
        "print(torch.accelerator.get_memory_info(0)[1])\n"
        "x = torch.empty(40 << 20, dtype=torch.uint8, device='openreg')\n"
        "try:\n"
        "    torch.empty(40 << 20, dtype=torch.uint8, device='openreg')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "OPENREG_DEVICE_MEMORY": "64M"})
    assert out.returncode == 0, out.stderr
    total, message = out.stdout.splitlines()[:2]
    assert total == str(64 << 20)
    assert message.startswith("openreg:0 out of memory: tried to allocate 40.00 MiB; 40.00 MiB allocated")
    assert "of a capacity of 64.00 MiB" in message


def test_cached_blocks_are_reused_and_empty_cache_releases_them():
    x = torch.empty(3 * MB, dtype=torch.uint8, device="openreg:1")
    ptr = x.data_ptr()
    reserved = torch.accelerator.memory_reserved(1)
    del x
    assert torch.accelerator.memory_reserved(1) == reserved  # kept in the cache
    y = torch.empty(3 * MB, dtype=torch.uint8, device="openreg:1")
    assert y.data_ptr() == ptr
    del y
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved(1) < reserved


def test_record_stream_keeps_a_block_from_reuse_until_the_stream_is_done():
    import threading

    side = torch.Stream(device="openreg:1")
    x = torch.empty(64 * 1024, device="openreg:1")
    ptr = x.data_ptr()
    x.record_stream(side)
    side.synchronize()
    del x  # the side stream has nothing queued: the block is free again at once
    y = torch.empty(64 * 1024, device="openreg:1")
    assert y.data_ptr() == ptr
    with pytest.raises(RuntimeError, match="record_stream: the tensor is on openreg:1 but the stream is on openreg:0"):
        y.record_stream(torch.Stream(device="openreg:0"))


def test_stress_every_byte_accounted_for():
    import gc
    import threading

    gc.collect()  # tensors of earlier tests waiting in reference cycles would be freed midway
    torch.accelerator.synchronize()
    before = [torch.accelerator.memory_allocated(i) for i in range(2)]
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            device = f"openreg:{seed % 2}"
            stream = torch.Stream(device=device)
            held = []
            with stream:
                for i in range(200):
                    n = int(torch.randint(1, 300_000, (1,), generator=g))
                    held.append(torch.empty(n, dtype=torch.uint8, device=device))
                    if i % 3 == 0:
                        held.pop(int(torch.randint(0, len(held), (1,), generator=g)))
            del held
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [torch.accelerator.memory_allocated(i) for i in range(2)] == before
    for i in range(2):
        stats = torch.accelerator.memory_stats(i)
        assert stats["allocation.all.current"] == stats["allocation.small_pool.current"] + stats["allocation.large_pool.current"]


def test_torch_cuda_style_memory_functions_are_the_allocators():
    """The names device-generic code looks up on torch.<device> (memory trackers, FSDP)."""
    m = torch.openreg
    m.synchronize()
    m.empty_cache()
    allocated, reserved = m.memory_allocated(), m.memory_reserved()
    m.reset_peak_memory_stats()
    x = torch.empty(1 << 20, device="openreg")  # 4 MiB: a segment of its own
    assert m.memory_allocated() - allocated >= x.nbytes
    assert m.max_memory_allocated() >= m.memory_allocated()
    assert m.memory_reserved() >= m.memory_allocated() and m.memory_reserved() > reserved
    assert m.max_memory_reserved() >= m.memory_reserved()
    assert m.memory_stats()["allocated_bytes.all.current"] == m.memory_allocated()
    del x
    assert m.memory_allocated() == allocated
    m.empty_cache()
    assert m.memory_reserved() == reserved  # the segment went back to the device
    assert m.get_device_name(1) == "OpenReg 1"
