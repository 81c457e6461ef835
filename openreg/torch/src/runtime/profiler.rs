//! The profiler stubs' annotations (`csrc/runtime/Profiler.cpp`), recorded by the runtime's
//! trace. Infallible: the stubs cannot report an error.

use openreg_runtime::trace;

use crate::ffi::ffi::TraceActivity;

pub(crate) fn trace_range_push(name: &[u8]) {
    trace::range_push(&String::from_utf8_lossy(name));
}

pub(crate) fn trace_range_pop() {
    trace::range_pop();
}

pub(crate) fn trace_mark(name: &[u8]) {
    trace::mark(&String::from_utf8_lossy(name));
}

// ANCHOR: session
// A Kineto session: start and stop the runtime's trace, tag launches with the profiler's
// correlation id (the operator being run on this thread), and hand the activities over.
pub(crate) fn trace_start() {
    trace::start();
}

pub(crate) fn trace_stop() {
    trace::stop();
}

pub(crate) fn trace_push_correlation(id: u64) {
    trace::push_correlation(id);
}

pub(crate) fn trace_pop_correlation() {
    trace::pop_correlation();
}

pub(crate) fn trace_take_activities() -> Vec<TraceActivity> {
    trace::take_activities()
        .into_iter()
        .map(|a| TraceActivity {
            name: a.name,
            kind: a.kind as u8,
            device: a.device as i64,
            stream: a.stream,
            start_ns: a.start_ns,
            end_ns: a.end_ns,
            correlation: a.correlation,
        })
        .collect()
}
// ANCHOR_END: session
