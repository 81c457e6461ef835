"""``torch.openreg``'s memory functions, shaped like ``torch.cuda``'s. Our caching allocator is
a ``c10::DeviceAllocator``, so each is ``torch.accelerator``'s for the device; the names are
what device-generic code looks up on ``torch.<device>`` (memory trackers, FSDP, DCP)."""

import torch


def _index(device) -> int:
    from . import _device_index

    return _device_index(device, optional=True)


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by tensors on ``device``."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    """The peak of ``memory_allocated`` since the start or ``reset_peak_memory_stats``."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds on ``device``: in use, or cached for reuse."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    """The peak of ``memory_reserved`` since the start or ``reset_peak_memory_stats``."""
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device=None) -> dict:
    """The allocator's statistics, flattened as ``torch.cuda.memory_stats`` gives them."""
    return torch.accelerator.memory_stats(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    """Starts the peaks over from the current values."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def empty_cache() -> None:
    """Gives the cached, unused blocks of every device back to the device."""
    torch.accelerator.empty_cache()


__all__ = ["empty_cache", "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved",
           "memory_stats", "reset_peak_memory_stats"]
