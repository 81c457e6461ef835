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
    y = torch.empty(10, device="openreg:1")  # rounded up to a page
    assert torch.accelerator.memory_allocated(1) == before + MB + 4096
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
    with pytest.raises(torch.OutOfMemoryError, match=r"openreg:0 out of memory: tried to allocate 16\.00 GiB"):
        torch.empty(16 << 30, dtype=torch.uint8, device="openreg:0")
    assert torch.accelerator.memory_stats(0)["num_ooms"] >= 1
