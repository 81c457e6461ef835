"""Streams and events in ``torch.openreg``, shaped like ``torch.cuda``'s: classes that are
``torch.Stream``/``torch.Event`` for the device, and the current-stream functions."""

import contextlib
import functools

import torch


def _index(device) -> int:
    from . import _device_index

    return _device_index(device, optional=True)


class Stream(torch.Stream):
    """A new stream of an openreg device (the current one by default)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # an existing stream, named by torch.Stream's own arguments
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("openreg", _index(device)), priority=priority)


class Event(torch.Event):
    """An event of the openreg device (``enable_timing=True`` for ``elapsed_time``)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device="openreg", enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    """The calling thread's current stream of ``device``."""
    return torch.accelerator.current_stream(_index(device))


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current for its device on the calling thread."""
    torch.accelerator.set_stream(stream)


def stream(stream: torch.Stream | None):
    """A context manager that makes ``stream`` current (nothing for ``None``)."""
    return contextlib.nullcontext() if stream is None else stream


@functools.cache
def _properties(index: int):
    import collections

    Properties = collections.namedtuple("OpenRegDeviceProperties",
                                        ["name", "total_memory", "multi_processor_count"])
    total = torch.accelerator.get_memory_info(index)[1]
    return Properties(f"OpenReg {index}", total, torch.get_num_threads())


def get_device_properties(device=None):
    """Name, memory and compute units of ``device``, as Inductor asks for them."""
    return _properties(_index(device))


def get_device_name(device=None) -> str:
    """``"OpenReg <index>"``."""
    return get_device_properties(device).name


__all__ = ["Event", "Stream", "current_stream", "get_device_name", "get_device_properties", "set_stream", "stream"]
