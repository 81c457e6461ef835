"""``torch.openreg``'s memory functions, shaped like ``torch.cuda``'s. Our caching allocator is
a ``c10::DeviceAllocator``, so each is ``torch.accelerator``'s for the device; the names are
what device-generic code looks up on ``torch.<device>`` (memory trackers, FSDP, DCP)."""

import pickle
import sys

import torch
import torch_openreg._C as _C

from .mem_pool import MemPool, use_mem_pool


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


def _check_exists(device) -> None:
    index = _index(device)
    if not 0 <= index < _C._get_device_count():
        raise ValueError(f"openreg:{index} does not exist: there are {_C._get_device_count()} openreg devices")


# ANCHOR: history
_LEVELS = {"enabled": (None, "state", "all"), "context": (None, "state", "alloc", "all"), "stacks": ("python", "all")}


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False) -> None:
    """Records where device memory is allocated, as ``torch.cuda.memory._record_memory_history``:
    ``enabled`` None (stop), "state" (tracebacks of live blocks) or "all" (also a trace of every
    allocator event, the last ``max_entries`` of them); ``context`` which events keep their
    traceback (None, "state", "alloc", "all"); ``stacks`` "python" or "all" (with C++ frames).
    Recording covers every openreg device; ``device`` is accepted for CUDA's signature."""
    if isinstance(enabled, bool):  # the legacy form, _record_memory_history(True)
        enabled = "all" if enabled else None
    for name, value in (("enabled", enabled), ("context", context), ("stacks", stacks)):
        if value not in _LEVELS[name]:
            raise ValueError(f"_record_memory_history: {name} must be one of {_LEVELS[name]}, got {value!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"_record_memory_history: max_entries must be a positive int, got {max_entries!r}")
    if device is not None:
        _check_exists(device)
    _C._record_memory_history(enabled, context, stacks, min(max_entries, sys.maxsize), bool(clear_history))


def _snapshot(device=None) -> dict:
    """The allocator's segments, blocks and recorded trace, in the dictionary format of
    ``torch.cuda.memory._snapshot()`` (which ``torch.cuda._memory_viz`` renders)."""
    if device is not None:
        _check_exists(device)
    return _C._memory_snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` to ``filename``, for ``python -m torch.cuda._memory_viz`` or
    the viewer at pytorch.org/memory_viz."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
# ANCHOR_END: history


__all__ = ["MemPool", "use_mem_pool", "empty_cache", "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved",
           "memory_stats", "reset_peak_memory_stats"]
