//! The runtime's trace, for profiling tools: what ran on each stream and when (activities),
//! which host operation launched it (the correlation id the launching thread had pushed), and
//! annotations: named ranges (pushed and popped per thread, like NVTX's) and marks. Nothing is
//! recorded unless a trace is on; otherwise each hook is one relaxed atomic load.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::stream::{Observer, set_observer};

/// One annotation; a mark has `end_ns == start_ns`. Times are `CLOCK_MONOTONIC`
/// nanoseconds, the clock PyTorch's profiler reads (`c10::getTime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    pub name: String,
    pub thread: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One piece of work as it ran on a stream. `name` is where it was launched from (the
/// launching function, from the task's type name); `correlation` is the id the launching
/// thread had pushed (0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    pub name: &'static str,
    pub kind: Kind,
    pub device: usize,
    pub stream: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub correlation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kernel,
    Memcpy,
    /// An event record: an instant on the stream.
    Event,
}

static ON: AtomicBool = AtomicBool::new(false);
static RECORDS: Mutex<Vec<Annotation>> = Mutex::new(Vec::new());
static ACTIVITIES: Mutex<Vec<Activity>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    // Open ranges of this thread: name and start.
    static OPEN: RefCell<Vec<(String, u64)>> = const { RefCell::new(Vec::new()) };
    // Correlation ids pushed by this thread (the profiler's current operator).
    static CORRELATION: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out-pointer; CLOCK_MONOTONIC cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn records() -> std::sync::MutexGuard<'static, Vec<Annotation>> {
    RECORDS.lock().unwrap_or_else(|e| e.into_inner())
}

fn activities() -> std::sync::MutexGuard<'static, Vec<Activity>> {
    ACTIVITIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts recording (clearing what an earlier trace left).
pub fn start() {
    records().clear();
    activities().clear();
    ON.store(true, Ordering::Release);
    set_observer(Some(&TRACER));
}

/// Stops recording and returns the annotations, in the order ranges closed. Activities
/// stay until [`take_activities`] (work launched before the stop may still be running).
pub fn stop() -> Vec<Annotation> {
    ON.store(false, Ordering::Release);
    set_observer(None);
    std::mem::take(&mut *records())
}

/// The activities recorded so far, in the order they finished.
pub fn take_activities() -> Vec<Activity> {
    std::mem::take(&mut *activities())
}

pub fn push_correlation(id: u64) {
    CORRELATION.with(|c| c.borrow_mut().push(id));
}

pub fn pop_correlation() {
    CORRELATION.with(|c| c.borrow_mut().pop());
}

// ANCHOR: traced
/// The streams' observer while a trace is on: it records each task as an activity.
struct Tracer;

impl Observer for Tracer {
    fn launched(&self) -> u64 {
        CORRELATION.with(|c| c.borrow().last().copied().unwrap_or(0))
    }

    fn run(&self, task: &mut dyn FnMut(), name: &'static str, device: usize, stream: u64, correlation: u64) {
        let (name, kind) = launched_from(name);
        let start_ns = now_ns();
        task();
        let end_ns = now_ns();
        activities().push(Activity { name, kind, device, stream, start_ns, end_ns, correlation });
    }
}

static TRACER: Tracer = Tracer;

/// "module::function" of the function that created a task, from the closure's type name
/// (`crate::module::function::{{closure}}`), and what kind of work that is.
fn launched_from(full: &'static str) -> (&'static str, Kind) {
    let path = full.split("::{{closure}}").next().unwrap_or(full);
    let mut parts = path.rsplitn(3, "::");
    let (function, module) = (parts.next().unwrap_or(path), parts.next().unwrap_or(""));
    let name = &path[path.len() - function.len() - if module.is_empty() { 0 } else { module.len() + 2 }..];
    let kind = match module {
        "copy" => Kind::Memcpy,
        "Event" | "event" => Kind::Event,
        _ => Kind::Kernel,
    };
    (name, kind)
}
// ANCHOR_END: traced

// ANCHOR: record
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Opens a range on this thread. Ranges nest; only those opened while on are recorded.
pub fn range_push(name: &str) {
    if is_on() {
        OPEN.with(|open| open.borrow_mut().push((name.to_owned(), now_ns())));
    }
}

/// Closes this thread's innermost open range (nothing if none is open).
pub fn range_pop() {
    let Some((name, start_ns)) = OPEN.with(|open| open.borrow_mut().pop()) else { return };
    if is_on() {
        let thread = THREAD.with(|t| *t);
        records().push(Annotation { name, thread, start_ns, end_ns: now_ns() });
    }
}
// ANCHOR_END: record

/// Records an instant.
pub fn mark(name: &str) {
    if is_on() {
        let (thread, now) = (THREAD.with(|t| *t), now_ns());
        records().push(Annotation { name: name.to_owned(), thread, start_ns: now, end_ns: now });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trace is process-wide: tests that start and stop it must not overlap.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn ranges_nest_and_only_a_trace_records() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        range_push("before");
        range_pop();
        start();
        range_push("outer");
        range_push("inner");
        mark("here");
        range_pop();
        range_pop();
        range_pop(); // more pops than pushes: ignored
        let got = stop();
        let names: Vec<&str> = got.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["here", "inner", "outer"]);
        assert!(got[2].start_ns <= got[1].start_ns && got[1].end_ns <= got[2].end_ns);
        assert_eq!(got[0].start_ns, got[0].end_ns);
        mark("after");
        assert!(stop().is_empty());
    }

    #[test]
    fn a_task_is_named_after_the_function_that_launched_it() {
        fn launch_example() -> impl FnOnce() + Send + 'static {
            crate::stream::observed(&TRACER, 1, 7, || {})
        }
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        start();
        push_correlation(42);
        let task = launch_example();
        pop_correlation();
        task();
        stop();
        let got = take_activities();
        assert_eq!(got.len(), 1);
        let a = &got[0];
        assert!(a.name.ends_with("launch_example"), "{}", a.name);
        assert_eq!((a.kind, a.device, a.stream, a.correlation), (Kind::Kernel, 1, 7, 42));
        assert!(a.start_ns <= a.end_ns);
    }
}
