//! The profiler stubs' annotations (`csrc/runtime/Profiler.cpp`), recorded by the runtime's
//! trace. Infallible: the stubs cannot report an error.

use openreg_runtime::trace;

pub(crate) fn trace_range_push(name: &[u8]) {
    trace::range_push(&String::from_utf8_lossy(name));
}

pub(crate) fn trace_range_pop() {
    trace::range_pop();
}

pub(crate) fn trace_mark(name: &[u8]) {
    trace::mark(&String::from_utf8_lossy(name));
}
