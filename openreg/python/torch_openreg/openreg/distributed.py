"""``occl``: the ``torch.distributed`` backend for openreg tensors.

c10d stays the engine (process groups, the store, DDP, FSDP2, DTensor); this file only adapts
its ``Backend`` interface to OCCL, the runtime's communication library (Rust, over TCP). It is
Python because a C++ ``c10d::Backend`` reaches Python only through pybind11, which this project
otherwise avoids, and every collective here is one call into Rust that queues the work on a
stream: the Python layer costs a few microseconds per collective, the transfer milliseconds.
"""

import atexit
import datetime
import os
import queue
import socket
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _Backend
from torch._C._distributed_c10d import Work as _Work

import torch_openreg._C as _C

BACKEND = "occl"


# ANCHOR: options
class Options(_Backend.Options):
    """``init_process_group("occl", pg_options=Options(timeout=..., shared_memory=...))``: how
    long a rank waits for a peer before the collective fails (it overrides
    ``init_process_group``'s timeout), and whether ranks on one host share memory (by default
    they do, unless ``OCCL_SHM=0``)."""

    def __init__(self, timeout: datetime.timedelta = datetime.timedelta(minutes=10),
                 shared_memory: bool | None = None):
        if timeout.total_seconds() <= 0:
            raise ValueError(f"occl: the timeout must be positive, got {timeout}")
        super().__init__(BACKEND, timeout)
        self.timeout = timeout
        self.shared_memory = shared_memory
# ANCHOR_END: options


def _advertised_host() -> str:
    """The address peers use to reach this process: ``OCCL_SOCKET_HOST`` if set, else the
    local interface that routes to ``MASTER_ADDR`` (across hosts), else loopback."""
    if host := os.environ.get("OCCL_SOCKET_HOST"):
        return host
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def _buffer(t: torch.Tensor):
    """What OCCL needs of a tensor: its bytes and the storage they lie in."""
    storage = t.untyped_storage()
    return (t.data_ptr(), t.numel() * t.element_size(), storage.data_ptr(), storage.nbytes())


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _reduce_op(op) -> str:
    """``ReduceOp.SUM`` -> ``"SUM"`` (Rust refuses the names it does not implement)."""
    return op.op.name if hasattr(op, "op") else op.name


def _seconds(timeout) -> float | None:
    """c10d's ``kNoTimeout`` (zero, or negative when unset) means no bound."""
    if timeout is None or timeout.total_seconds() <= 0:
        return None
    return timeout.total_seconds()


# ANCHOR: completions
class _Completions:
    """Completes the futures of finished operations from a thread of its own, as the
    watchdog thread of ProcessGroupNCCL does: DDP's reducer chains its bucket callbacks on
    those futures and must not depend on anyone calling ``wait()``."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._stopping = False
        _ALL_COMPLETIONS.add(self)

    def add(self, handles, future, value):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="occl completions", daemon=True)
            self._thread.start()
        self._queue.put((handles, future, value))

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            handles, future, value = item
            try:
                for handle in handles:
                    # In slices, so that stop() is seen even while a collective hangs.
                    while not handle.completed_within(0.1):
                        if self._stopping:
                            return
                    handle.wait()  # raises the failure, if any
                future.set_result(value)
            except Exception as e:  # a failed collective fails its future (see Work.get_future)
                future.set_result(_Failure(str(e)))

    def stop(self):
        self._stopping = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None


# A thread still inside Rust when Python finalizes would be killed there: stop them first.
_ALL_COMPLETIONS = weakref.WeakSet()
atexit.register(lambda: [c.stop() for c in list(_ALL_COMPLETIONS)])
# ANCHOR_END: completions


class _Failure:
    """A failed collective's message, in place of its result."""

    def __init__(self, message):
        self.message = message


def _raise_failure(done: torch.futures.Future):
    value = done.value()
    if isinstance(value, _Failure):
        raise dist.DistBackendError(value.message)
    return value


# ANCHOR: work
class Work(_Work):
    """One queued collective. ``wait()`` returns when it completed on the device (raising
    ``DistBackendError`` if it failed) and makes the current stream wait for it and for the
    copies that follow it, so that later work on any stream sees its results."""

    def __init__(self, handles, end: torch.Event, result, keep, completions):
        super().__init__()
        self._handles, self._end, self._result = handles, end, result
        self._keep = keep  # tensors the device still uses
        self._completions = completions
        self._future = None

    def wait(self, timeout=None) -> bool:
        for handle in self._handles:
            handle.wait(_seconds(timeout))
        torch.accelerator.current_stream(self._end.device.index).wait_event(self._end)
        self._keep = None
        return True

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            done = torch.futures.Future()
            self._completions.add(self._handles, done, self._result)
            # Future.set_exception only marks the Python wrapper, which c10d does not hand on;
            # an exception raised in a then() callback fails the C++ future itself.
            self._future = done.then(_raise_failure)
        return self._future
# ANCHOR_END: work


# ANCHOR: backend
class ProcessGroupOCCL(_Backend):
    """The ``occl`` backend of one process group, on this process's openreg device."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 shared_memory: bool | None = None):
        if size < 1 or not 0 <= rank < size:
            raise ValueError(
                f"occl: rank {rank} is out of range for a world of size {size} "
                f"(expected 0 <= rank < {size})"
            )
        super().__init__(rank, size)
        self._timeout = timeout
        # Rendezvous: publish where this rank listens, read where the others do. The store is
        # already prefixed per process group by c10d.
        listener = _C.OcclListener()
        store.set(f"occl/address/{rank}", f"{_advertised_host()}:{listener.port}")
        addresses = [store.get(f"occl/address/{r}").decode() for r in range(size)]
        if shared_memory is None:
            shared_memory = os.environ.get("OCCL_SHM", "1") != "0"
        self._comm = _C.OcclCommunicator.connect(
            listener, rank, size, addresses, timeout.total_seconds(), shared_memory
        )
        self._streams = {}  # device index -> the stream async collectives run on
        self._completions = _Completions()
        self._coalescing = None  # the works issued since start_coalescing
        self._closed = False
# ANCHOR_END: backend

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def transports(self) -> list[str]:
        """How this rank reaches each rank of the group: ``"shm"``, ``"tcp"`` or ``"self"``."""
        return self._comm.transports

    # ANCHOR: capabilities
    # Every capability c10d may ask about is answered here: torch 2.15's trampoline reads them
    # as Python attributes, and one left to the base class's descriptor calls back into the
    # trampoline forever (RecursionError in init_process_group(device_id=...)).
    supports_coalescing = property(lambda self: True)
    supports_splitting = property(lambda self: False)
    supports_shrinking = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    supports_window = property(lambda self: False)
    _supports_time_estimate = property(lambda self: False)
    # ANCHOR_END: capabilities

    # ANCHOR: launch
    def _launch(self, name, tensors, opts, launch, result, post=None, keep=()):
        """Queues one OCCL operation for ``tensors`` and returns its Work: on the current stream
        for a blocking call, on this group's stream (after the current one's work) for
        ``async_op=True``, so that it overlaps with the compute that follows."""
        device = self._check(name, tensors)
        current = torch.accelerator.current_stream(device)
        stream = current
        if opts is not None and opts.asyncOp:
            stream = self._streams.get(device)
            if stream is None:
                stream = self._streams[device] = torch.openreg.Stream(device)
            stream.wait_stream(current)
        with stream:
            handles = launch((device, stream.stream_id))
            if post is not None:
                post()  # copies out of temporary buffers, ordered after the collective
            end = torch.openreg.Event()
            end.record(stream)
        if stream != current:
            for t in [*tensors, *keep]:  # the caching allocator must not reuse them early
                t.record_stream(stream)
        work = Work(handles if isinstance(handles, list) else [handles], end, result,
                    [*tensors, *keep], self._completions)
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work
    # ANCHOR_END: launch

    def _check(self, name, tensors) -> int:
        if self._closed:
            raise dist.DistBackendError(f"occl {name}: the process group was destroyed")
        device = None
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"occl {name}: expected tensors, got {type(t).__name__}")
            if t.device.type != "openreg":
                raise ValueError(
                    f"occl {name}: expected openreg tensors, got a tensor on {t.device}; for CPU "
                    f"tensors give the group a CPU backend too: "
                    f"init_process_group('cpu:gloo,openreg:occl')"
                )
            if not t.is_contiguous():
                raise ValueError(f"occl {name}: tensors must be contiguous (got strides {t.stride()})")
            if device is not None and t.device.index != device:
                raise ValueError(
                    f"occl {name}: all tensors must be on one device, got openreg:{device} and {t.device}"
                )
            device = t.device.index
        return torch.openreg.current_device() if device is None else device

    @staticmethod
    def _one(name, tensors):
        if len(tensors) != 1:
            raise ValueError(f"occl {name}: expected one tensor per process, got {len(tensors)}")
        return tensors[0]

    # ANCHOR: allreduce
    def allreduce(self, tensors, opts):
        t = self._one("all_reduce", tensors)
        return self._launch(
            "all_reduce", [t], opts,
            lambda s: self._comm.all_reduce(s, _buffer(t), _dtype(t), _reduce_op(opts.reduceOp)),
            result=[t],
        )
    # ANCHOR_END: allreduce

    def allreduce_coalesced(self, tensors, opts):
        return self._group("all_reduce_coalesced", [
            (lambda t=t: self._launch(
                "all_reduce", [t], opts,
                lambda s: self._comm.all_reduce(s, _buffer(t), _dtype(t), _reduce_op(opts.reduceOp)),
                result=[t]))
            for t in tensors
        ], result=list(tensors))

    def broadcast(self, tensors, opts):
        t = tensors[opts.rootTensor] if len(tensors) > 1 else self._one("broadcast", tensors)
        return self._launch(
            "broadcast", [t], opts,
            lambda s: self._comm.broadcast(s, _buffer(t), _dtype(t), opts.rootRank),
            result=[t],
        )

    def reduce(self, tensors, opts):
        t = self._one("reduce", tensors)
        return self._launch(
            "reduce", [t], opts,
            lambda s: self._comm.reduce(s, _buffer(t), _dtype(t), _reduce_op(opts.reduceOp), opts.rootRank),
            result=[t],
        )

    def all_gather_single(self, output, input, opts):
        return self._launch(
            "all_gather_into_tensor", [output, input], opts,
            lambda s: self._comm.all_gather(s, _buffer(input), _buffer(output), _dtype(input)),
            result=[output],
        )

    def allgather(self, output_lists, inputs, opts):
        t = self._one("all_gather", inputs)
        outputs = self._one("all_gather", output_lists)
        self._check_list("all_gather", outputs, t)
        flat = t.new_empty((self.size(), *t.shape))
        return self._launch(
            "all_gather", [t, *outputs], opts,
            lambda s: self._comm.all_gather(s, _buffer(t), _buffer(flat), _dtype(t)),
            result=[outputs],
            post=lambda: [o.copy_(f) for o, f in zip(outputs, flat)],
            keep=[flat],
        )

    def allgather_coalesced(self, output_lists, inputs, opts):
        return self._group("all_gather_coalesced", [
            (lambda o=o, i=i: self.allgather([o], [i], opts)) for o, i in zip(output_lists, inputs)
        ], result=list(output_lists))

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        return self._group("all_gather_into_tensor_coalesced", [
            (lambda o=o, i=i: self.all_gather_single(o, i, opts)) for o, i in zip(outputs, inputs)
        ], result=list(outputs))

    def reduce_scatter_single(self, output, input, opts):
        return self._launch(
            "reduce_scatter_tensor", [output, input], opts,
            lambda s: self._comm.reduce_scatter(
                s, _buffer(input), _buffer(output), _dtype(input), _reduce_op(opts.reduceOp)),
            result=[output],
        )

    def reduce_scatter(self, outputs, input_lists, opts):
        out = self._one("reduce_scatter", outputs)
        inputs = self._one("reduce_scatter", input_lists)
        self._check_list("reduce_scatter", inputs, out)
        self._check("reduce_scatter", inputs)
        flat = torch.stack(inputs) if inputs else out.new_empty((0,))
        return self._launch(
            "reduce_scatter", [out, *inputs], opts,
            lambda s: self._comm.reduce_scatter(
                s, _buffer(flat), _buffer(out), _dtype(out), _reduce_op(opts.reduceOp)),
            result=[out],
            keep=[flat],
        )

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        return self._group("reduce_scatter_tensor_coalesced", [
            (lambda o=o, i=i: self.reduce_scatter_single(o, i, opts)) for o, i in zip(outputs, inputs)
        ], result=list(outputs))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts):
        def byte_splits(t, splits, what):
            rows = t.shape[0] if t.dim() else 1
            row = (t.numel() // rows if rows else 0) * t.element_size()
            if not splits:
                if rows % self.size():
                    raise ValueError(
                        f"occl all_to_all_single: the {what}'s first dimension ({rows}) does not "
                        f"divide by the group's size ({self.size()}); pass split sizes"
                    )
                return [rows // self.size() * row] * self.size()
            if len(splits) != self.size() or sum(splits) != rows:
                raise ValueError(
                    f"occl all_to_all_single: {what} split sizes {list(splits)} must be "
                    f"{self.size()} numbers adding up to the first dimension ({rows})"
                )
            return [n * row for n in splits]

        ins = byte_splits(input, input_splits, "input")
        outs = byte_splits(output, output_splits, "output")
        return self._launch(
            "all_to_all_single", [output, input], opts,
            lambda s: self._comm.all_to_all(s, _buffer(input), ins, _buffer(output), outs, _dtype(input)),
            result=[output],
        )

    def alltoall(self, outputs, inputs, opts):
        if len(outputs) != self.size() or len(inputs) != self.size():
            raise ValueError(
                f"occl all_to_all: expected {self.size()} input and output tensors, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        self._check("all_to_all", [*inputs, *outputs])
        flat_in = torch.cat([i.reshape(-1) for i in inputs])
        flat_out = outputs[0].new_empty(sum(o.numel() for o in outputs))
        ins = [i.numel() * i.element_size() for i in inputs]
        outs = [o.numel() * o.element_size() for o in outputs]
        return self._launch(
            "all_to_all", [*outputs, *inputs], opts,
            lambda s: self._comm.all_to_all(s, _buffer(flat_in), ins, _buffer(flat_out), outs, _dtype(flat_in)),
            result=list(outputs),
            post=lambda: [o.copy_(f.view_as(o)) for o, f in zip(outputs, flat_out.split([o.numel() for o in outputs]))],
            keep=[flat_in, flat_out],
        )

    def gather(self, output_lists, inputs, opts):
        t = self._one("gather", inputs)
        root = opts.rootRank
        outputs = output_lists[0] if output_lists else []
        flat = None
        if self.rank() == root:
            self._check_list("gather", outputs, t)
            flat = t.new_empty((self.size(), *t.shape))
        return self._launch(
            "gather", [t, *outputs], opts,
            lambda s: self._comm.gather(s, _buffer(t), None if flat is None else _buffer(flat), _dtype(t), root),
            result=[outputs],
            post=None if flat is None else (lambda: [o.copy_(f) for o, f in zip(outputs, flat)]),
            keep=[] if flat is None else [flat],
        )

    def scatter(self, outputs, input_lists, opts):
        t = self._one("scatter", outputs)
        root = opts.rootRank
        flat = None
        inputs = input_lists[0] if input_lists else []
        if self.rank() == root:
            self._check_list("scatter", inputs, t)
            self._check("scatter", inputs)
            flat = torch.stack(inputs)
        return self._launch(
            "scatter", [t], opts,
            lambda s: self._comm.scatter(s, None if flat is None else _buffer(flat), _buffer(t), _dtype(t), root),
            result=[t],
            keep=[] if flat is None else [flat],
        )

    def send(self, tensors, dst, tag):
        t = self._one("send", tensors)
        return self._launch("send", [t], None, lambda s: self._comm.send(s, _buffer(t), _dtype(t), dst), result=[t])

    def recv(self, tensors, src, tag):
        t = self._one("recv", tensors)
        return self._launch("recv", [t], None, lambda s: self._comm.recv(s, _buffer(t), _dtype(t), src), result=[t])

    def recv_anysource(self, tensors, tag):
        raise NotImplementedError("occl: recv without a source rank is not supported; pass src=")

    def barrier(self, opts):
        return self._launch("barrier", [], opts, lambda s: self._comm.barrier(s), result=[])

    # Coalescing (dist._coalescing_manager): the operations are issued as they come; the Work
    # of the group waits for all of them.
    def start_coalescing(self):
        self._coalescing = []

    def end_coalescing(self):
        works, self._coalescing = self._coalescing or [], None
        return _group_work(works, [w._result for w in works], self._completions)

    def _group(self, name, launches, result):
        works = [launch() for launch in launches]
        return _group_work(works, result, self._completions)

    def _check_list(self, name, tensors, like):
        if len(tensors) != self.size():
            raise ValueError(f"occl {name}: expected {self.size()} tensors (one per rank), got {len(tensors)}")
        for o in tensors:
            if o.shape != like.shape or o.dtype != like.dtype:
                raise ValueError(
                    f"occl {name}: every tensor of the list must match the input "
                    f"({tuple(like.shape)}, {like.dtype}); got ({tuple(o.shape)}, {o.dtype})"
                )

    def shutdown(self):
        self._close("the process group was destroyed")

    def abort(self):
        self._close("the process group was aborted")

    def _close(self, why):
        if not self._closed:
            self._closed = True
            self._comm.abort(f"rank {self.rank()}: {why}")
            self._completions.stop()


def _group_work(works, result, completions):
    if not works:
        end = torch.openreg.Event()
        end.record()
        return Work([], end, result, [], completions)
    handles = [h for w in works for h in w._handles]
    return Work(handles, works[-1]._end, result, [t for w in works for t in (w._keep or [])], completions)


# ANCHOR: register
def _create(dist_options, backend_options) -> ProcessGroupOCCL:
    timeout = getattr(backend_options, "timeout", None) or dist_options.timeout
    return ProcessGroupOCCL(dist_options.store, dist_options.group_rank, dist_options.group_size, timeout,
                            getattr(backend_options, "shared_memory", None))


def _register() -> None:
    """Makes ``init_process_group("occl")`` work, and occl the default for openreg tensors."""
    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["openreg"])
# ANCHOR_END: register
