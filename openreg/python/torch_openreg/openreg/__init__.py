"""``torch.openreg``: device management for OpenReg, shaped like ``torch.cuda``."""

import threading

import torch
import torch_openreg._C as _C

# ANCHOR: device_index
def _device_index(device, optional=False) -> int:
    """The index in an int, ``"openreg:1"`` or ``torch.device``; the current one if absent."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"expected an openreg device, got {device}")
        device = device.index
    if device is None:
        if optional:
            return current_device()
        raise ValueError("expected a device index, got None")
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(
            f"expected a device as an int, str or torch.device, got {type(device).__name__}"
        )
    return device
# ANCHOR_END: device_index


# ANCHOR: device_management
def is_available() -> bool:
    """True when the runtime reports at least one device."""
    return device_count() > 0


def device_count() -> int:
    """The number of openreg devices (two)."""
    return _C._get_device_count()


def current_device() -> int:
    """The index of the calling thread's current device."""
    return _C._get_device()


def set_device(device) -> None:
    """Makes ``device`` (an index, ``"openreg:N"`` or a ``torch.device``) current for this thread."""
    index = _device_index(device)
    if index >= 0:
        _C._set_device(index)


def synchronize(device=None) -> None:
    """Waits for all work queued on ``device`` (the current one by default)."""
    _C._synchronize(_device_index(device, optional=True))


# ANCHOR: external_stream
def ExternalStream(stream_id: int, device=None) -> torch.Stream:
    """A ``torch.Stream`` for a stream the runtime created outside PyTorch (for example by
    another library using the device); like ``torch.cuda.ExternalStream``, PyTorch only
    refers to it and never owns it."""
    index = _device_index(device, optional=True)
    device_type = torch.accelerator.current_stream(index).device_type  # PrivateUse1's number
    return torch.Stream(stream_id=stream_id, device_index=index, device_type=device_type)
# ANCHOR_END: external_stream


def _sleep(ms: int) -> None:
    """Queues `ms` milliseconds of work on the current stream (like ``torch.cuda._sleep``)."""
    _C._sleep(ms)


# ANCHOR: fallback_counts
def fallback_counts() -> dict[str, int]:
    """How often each operator ran on the CPU instead of in an openreg kernel: through the
    boxed fallback (``"aten::atan2"``) or a kernel's host path for a dtype it does not
    compute in (``"aten::mul (Long)"``). ``OPENREG_WARN_FALLBACK=1`` also warns once for each."""
    return dict(_C._fallback_counts())


def reset_fallback_counts() -> None:
    """Clears the counts ``fallback_counts()`` reports."""
    _C._reset_fallback_counts()
# ANCHOR_END: fallback_counts


class device:
    """Context manager that makes ``device`` current and restores the previous one on exit.

    A negative index or ``None`` makes it a no-op.
    """

    def __init__(self, device):
        self.idx = -1 if device is None else _device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchangeDevice(self.idx)
        return self

    def __exit__(self, *exc):
        _C._set_device(self.prev_idx)
        return False
# ANCHOR_END: device_management


# ANCHOR: lazy_init
_initialized = False
_init_lock = threading.Lock()
def _is_in_bad_fork() -> bool:
    """True in a child forked after the device was initialised; the runtime refuses to work
    there (torch.manual_seed asks this before seeding)."""
    return _C._is_in_bad_fork()


def is_initialized() -> bool:
    """True once the device was initialised in this process (false in a forked child)."""
    return _initialized and not _is_in_bad_fork()


def init() -> None:
    """Initialises the device now rather than on first use."""
    _lazy_init()


def _lazy_init() -> None:
    """PyTorch's one-time device initialisation (the hooks' ``init``). It is cheap here, so
    the RNG functions run it at once instead of queueing calls as ``torch.cuda`` does."""
    global _initialized
    if _is_in_bad_fork():
        # CUDA's wording (tools match on it), then ours.
        raise RuntimeError(
            "Cannot re-initialize OpenReg in forked subprocess. To use OpenReg with "
            "multiprocessing, you must use the 'spawn' start method (the device was used in "
            "the parent before fork())"
        )
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _C._init()
            _initialized = True
# ANCHOR_END: lazy_init


from . import amp  # noqa: E402
from . import custom_ops  # noqa: E402,F401  (Meta kernels and autograd of openreg::)
from . import profiler  # noqa: E402,F401
from .amp import get_amp_supported_dtype  # noqa: E402  (torch.autocast looks for it here)
from ._legacy import *  # noqa: E402,F403
from ._legacy import __all__ as _legacy_all  # noqa: E402
from .random import *  # noqa: E402,F403
from .random import __all__ as _random_all  # noqa: E402
from .random import _get_generator  # noqa: E402,F401  (AOTAutograd's graph-safe RNG)
from .streams import *  # noqa: E402,F403
from .streams import __all__ as _streams_all  # noqa: E402
from .memory import *  # noqa: E402,F403
from .memory import __all__ as _memory_all  # noqa: E402
from . import _dynamo  # noqa: E402
from . import distributed  # noqa: E402

distributed._register()  # init_process_group("occl") (see distributed.py)

_dynamo.install()  # torch.compile finds the device once Dynamo loads (see _dynamo.py)


def _inductor_backend_init() -> None:
    """Inductor's vendor hook: called once, the first time Inductor compiles for openreg."""
    import torch_openreg.inductor_backend  # noqa: F401  (registers on import)

__all__ = [
    "current_device",
    "device",
    "device_count",
    "ExternalStream",
    "fallback_counts",
    "get_amp_supported_dtype",
    "init",
    "is_available",
    "is_initialized",
    "reset_fallback_counts",
    "set_device",
    "synchronize",
    *_random_all,
    *_streams_all,
    *_memory_all,
    *_legacy_all,
]
