"""`torch.openreg`: device management, streams, memory and random state."""

import torch

import torch_openreg._C as _C


def is_available() -> bool:
    return True


def device_count() -> int:
    return _C._get_device_count()


def current_device() -> int:
    return _C._get_device()


def set_device(device: int) -> None:
    _C._exchangeDevice(device)


class device:
    """Makes `index` the current device inside a `with` block."""

    def __init__(self, index):
        self.idx = -1 if index is None else index
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchangeDevice(self.idx)

    def __exit__(self, *exc):
        _C._exchangeDevice(self.prev_idx)
        return False


# ANCHOR: streams
# Streams and events are PyTorch's own torch.Stream and torch.Event, which reach the runtime
# through the device guard; these are the torch.cuda-style names users look for.
Stream = torch.Stream
Event = torch.Event


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(device)


def synchronize(device=None) -> None:
    """Waits for the work queued on every stream of the device."""
    torch.accelerator.synchronize(device)
# ANCHOR_END: streams


# ANCHOR: memory
# The caching allocator's statistics, through torch.accelerator's memory API (our allocator
# is a c10::DeviceAllocator).
def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(device)


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(device)


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(device)


def empty_cache() -> None:
    torch.accelerator.empty_cache()


def _sleep(ms: int, device=None) -> None:
    """Test work: the current stream sleeps for `ms` milliseconds (like torch.cuda._sleep)."""
    _C._sleep(torch.accelerator.current_device_index() if device is None else device, ms)
# ANCHOR_END: memory


def _lazy_init() -> None:
    """Called by PyTorch before the first tensor is created on the device; nothing to do."""


def _is_in_bad_fork() -> bool:
    """torch.manual_seed seeds this device only if the module answers this."""
    return False


from .random import get_rng_state, initial_seed, manual_seed, manual_seed_all, set_rng_state  # noqa: E402,F401


def fallback_counts() -> dict[str, int]:
    """The operators that ran on the CPU through the fallback, with how often: the kernels to
    write next. With OPENREG_WARN_FALLBACK=1 the first run of each is also a warning."""
    return dict(_C._fallback_counts())


def reset_fallback_counts() -> None:
    _C._reset_fallback_counts()
