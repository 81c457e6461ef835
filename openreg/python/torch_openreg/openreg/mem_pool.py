"""``torch.openreg.MemPool``: a pool of device memory that only the allocations routed to it
use, shaped like ``torch.cuda.MemPool``. Graph capture allocates from one too: a graph keeps
its pool, and ``torch.accelerator.Graph(pool=p.id)`` shares it."""

import contextlib

import torch_openreg._C as _C


# ANCHOR: mem_pool
class MemPool:
    """A pool of device memory on ``device`` (the current one by default). Its memory goes
    back to the device when nothing refers to it any more: this object, a ``use_mem_pool``
    block, a graph that captured into it; blocks still held by tensors go back as they are
    freed."""

    def __init__(self, allocator=None, use_on_oom=False, no_split=False, device=None):
        from . import _device_index

        # CUDA's arguments, for code written against torch.cuda.MemPool.
        for name, value in (("allocator", allocator), ("use_on_oom", use_on_oom), ("no_split", no_split)):
            if value:
                raise NotImplementedError(f"MemPool({name}=...) is not supported on openreg: its pools take "
                                          "memory from the device's caching allocator")
        self._device = _device_index(device, optional=True)
        self._id = _C._mem_pool_create(self._device)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, as ``torch.accelerator.Graph(pool=...)`` takes it."""
        return (0, self._id)

    @property
    def device(self) -> int:
        return self._device

    def use_count(self) -> int:
        """How many things refer to the pool (this object, open blocks, graphs)."""
        return _C._mem_pool_info(self._id)[1]

    def memory_stats(self) -> dict:
        """The pool's segments and allocated blocks, in bytes and counts."""
        return _C._mem_pool_stats(self._id)

    def snapshot(self) -> dict:
        """The pool's segments and its part of the recorded trace, in the format of
        ``torch.openreg.memory._snapshot()``."""
        return _C._memory_snapshot(self._id)

    def __del__(self):
        if getattr(self, "_id", None) is not None:
            _C._mem_pool_release(self._id)
            self._id = None


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device=None):
    """Routes this thread's allocations on ``device`` (the pool's by default) to ``pool``
    until the block ends. Other threads (autograd's backward among them) are not routed."""
    from . import _device_index

    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool: expected a torch.openreg.MemPool, got {type(pool).__name__}")
    index = pool.device if device is None else _device_index(device)
    _C._begin_allocate_to_pool(index, pool.id[1])
    try:
        yield
    finally:
        _C._end_allocate_to_pool(index, pool.id[1])
# ANCHOR_END: mem_pool
