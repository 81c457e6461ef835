//! Annotations for profiling tools: named ranges (pushed and popped per thread, like NVTX's)
//! and marks. PyTorch's profiler stubs forward its `rangePush`/`rangePop`/`mark` here. They
//! are recorded only while a trace is on; otherwise each call is one relaxed atomic load.

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One annotation; a mark has `end_ns == start_ns`. Times are `CLOCK_MONOTONIC`
/// nanoseconds, the clock PyTorch's profiler reads (`c10::getTime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    pub name: String,
    pub thread: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

static ON: AtomicBool = AtomicBool::new(false);
static RECORDS: Mutex<Vec<Annotation>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    // Open ranges of this thread: name and start.
    static OPEN: RefCell<Vec<(String, u64)>> = const { RefCell::new(Vec::new()) };
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

/// Starts recording (clearing what an earlier trace left).
pub fn start() {
    records().clear();
    ON.store(true, Ordering::Release);
}

/// Stops recording and returns what was recorded, in the order ranges closed.
pub fn stop() -> Vec<Annotation> {
    ON.store(false, Ordering::Release);
    std::mem::take(&mut *records())
}

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

    #[test]
    fn ranges_nest_and_only_a_trace_records() {
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
}
