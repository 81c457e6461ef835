"""Pinned host memory: the caching host allocator and asynchronous copies from and to it."""

import pytest
import torch


def test_pinned_blocks_are_cached_and_released():
    torch.accelerator.empty_host_cache()
    x = torch.empty(1000, dtype=torch.uint8).pin_memory()
    ptr = x.data_ptr()
    del x
    y = torch.empty(3000, dtype=torch.uint8, pin_memory=True)  # same 4 KiB block size
    assert y.data_ptr() == ptr and y.is_pinned()
    del y
    torch.accelerator.empty_host_cache()


def test_non_blocking_copies_from_and_to_pinned_memory_are_queued():
    src = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    stream = torch.Stream(device="openreg")
    with stream:
        torch.openreg._sleep(100)
        dev = src.to("openreg", non_blocking=True)
        assert not stream.query(), "the copy waits behind the sleep, the host does not"
        back = torch.empty_like(src, pin_memory=True)
        back.copy_(dev, non_blocking=True)
    stream.synchronize()
    assert torch.equal(back, src)


def test_a_pinned_block_in_use_by_a_queued_copy_is_not_reused():
    stream = torch.Stream(device="openreg")
    src = torch.ones(4096, dtype=torch.uint8).pin_memory()
    ptr = src.data_ptr()
    with stream:
        torch.openreg._sleep(100)
        dev = src.to("openreg", non_blocking=True)
    del src  # freed while the copy is still queued
    other = torch.empty(4096, dtype=torch.uint8, pin_memory=True)
    assert other.data_ptr() != ptr
    other.fill_(7)  # must not change what the queued copy reads
    stream.synchronize()
    assert dev.cpu().eq(1).all()


def test_pageable_non_blocking_copies_are_synchronous():
    src = torch.arange(10.0)
    dev = src.to("openreg", non_blocking=True)
    assert torch.equal(dev.cpu(), src)


@pytest.mark.filterwarnings("ignore:pin_memory_device is deprecated")
@pytest.mark.parametrize("device_arg", [{"pin_memory_device": "openreg"}, {}])
def test_dataloader_pins_batches_for_the_device(device_arg):
    data = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2))
    # torch 2.15 pins for the current accelerator (openreg); the old argument still works.
    loader = torch.utils.data.DataLoader(data, batch_size=3, pin_memory=True, **device_arg)
    batches = [b for (b,) in loader]
    assert all(b.is_pinned() for b in batches)
    moved = [b.to("openreg", non_blocking=True) for b in batches]
    torch.accelerator.synchronize()
    assert torch.equal(torch.cat([m.cpu() for m in moved]), torch.arange(12.0).reshape(6, 2))
