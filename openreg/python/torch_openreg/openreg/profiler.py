"""Device-side annotations, like ``torch.autograd.profiler.emit_nvtx`` for CUDA: inside
``emit_ranges()``, every operator (and ``record_function`` range) becomes a range in the
OpenReg runtime's trace, where a vendor's tracing tool would read it."""

import contextlib

from .. import _C


@contextlib.contextmanager
def emit_ranges(record_shapes: bool = False):
    """Records every operator as a range of the runtime's trace. Yields a list that holds
    ``(name, thread, start_ns, end_ns)`` tuples once the block has ended."""
    # Imported here: this module loads while `import torch` is still running (autoload).
    from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig
    from torch.autograd import _disable_profiler, _enable_profiler
    from torch.autograd.profiler import _run_on_profiler_start, _run_on_profiler_stop

    ranges = []
    _C._trace_start()
    _run_on_profiler_start()
    _enable_profiler(ProfilerConfig(ProfilerState.PRIVATEUSE1, record_shapes, False, False, False,
                                    False, _ExperimentalConfig()), set())
    try:
        yield ranges
    finally:
        _disable_profiler()
        _run_on_profiler_stop()
        ranges.extend(_C._trace_stop())
