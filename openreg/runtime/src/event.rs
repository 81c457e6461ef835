//! Events: markers recorded on a stream that the host or other streams can wait for.
//!
//! An event may be recorded many times; each record bumps its generation, and queries and
//! waits refer to the latest generation at the time they are made, as in CUDA.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::stream::Stream;

// ANCHOR: event
/// A handle to an event; cheap to clone.
#[derive(Clone)]
pub struct Event(Arc<Inner>);

struct Inner {
    timing: bool,
    state: Mutex<State>,
    completed_cv: Condvar,
}

#[derive(Default)]
struct State {
    /// The device of the first stream it was recorded on.
    device: Option<usize>,
    /// Generation of the latest record (0: never recorded).
    recorded: u64,
    /// Latest generation the stream has reached.
    completed: u64,
    /// When the stream reached it (kept only with timing).
    time: Option<Instant>,
}
// ANCHOR_END: event

impl Event {
    /// A new, unrecorded event; `timing` enables [`Event::elapsed_time`].
    pub fn new(timing: bool) -> Event {
        Event(Arc::new(Inner { timing, state: Mutex::default(), completed_cv: Condvar::new() }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn timing(&self) -> bool {
        self.0.timing
    }

    /// The device it was recorded on, if it was recorded.
    pub fn device(&self) -> Option<usize> {
        self.lock().device
    }

    pub fn is_recorded(&self) -> bool {
        self.lock().recorded > 0
    }

    // ANCHOR: record
    /// Records the event on `stream`: it completes when the stream reaches this point.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let generation = {
            let mut s = self.lock();
            match s.device {
                Some(d) if d != stream.device() => {
                    return Err(Error::DeviceMismatch { what: "the stream", expected: d, found: stream.device() });
                }
                _ => s.device = Some(stream.device()),
            }
            s.recorded += 1;
            s.recorded
        };
        let inner = self.0.clone();
        stream.run_or_launch(move || {
            let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if generation > s.completed {
                s.completed = generation;
                if inner.timing {
                    s.time = Some(Instant::now());
                }
            }
            inner.completed_cv.notify_all();
        })
    }
    // ANCHOR_END: record

    /// True if the latest record has completed, or if the event was never recorded.
    pub fn query(&self) -> bool {
        let s = self.lock();
        s.completed >= s.recorded
    }

    /// Blocks until the latest record has completed (at once if never recorded).
    pub fn synchronize(&self) {
        let mut s = self.lock();
        let target = s.recorded;
        while s.completed < target {
            s = self.0.completed_cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A task that waits for the current latest record, for `Stream::wait_event`; `None` if
    /// there is nothing to wait for.
    pub(crate) fn pending_record(&self) -> Option<impl FnOnce() + Clone + Send + 'static> {
        let target = {
            let s = self.lock();
            if s.completed >= s.recorded {
                return None;
            }
            s.recorded
        };
        let inner = self.0.clone();
        Some(move || {
            let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            while s.completed < target {
                s = inner.completed_cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        })
    }

    /// Milliseconds from `self` to `end`, waiting for both to complete.
    pub fn elapsed_time(&self, end: &Event) -> Result<f64> {
        crate::stream::check_may_wait("event elapsed_time", None)?;
        if !self.0.timing || !end.0.timing {
            return Err(Error::TimingDisabled);
        }
        let (d0, d1) = (self.device(), end.device());
        let (Some(d0), Some(d1)) = (d0, d1) else {
            return Err(Error::EventNotRecorded);
        };
        if d0 != d1 {
            return Err(Error::DeviceMismatch { what: "the end event", expected: d0, found: d1 });
        }
        self.synchronize();
        end.synchronize();
        let (t0, t1) = (self.lock().time, end.lock().time);
        let (Some(t0), Some(t1)) = (t0, t1) else {
            return Err(Error::EventNotRecorded);
        };
        Ok(if t1 >= t0 {
            (t1 - t0).as_secs_f64() * 1e3
        } else {
            -((t0 - t1).as_secs_f64() * 1e3)
        })
    }
}

impl Stream {
    /// Makes all future work on this stream wait until `event`'s latest record completed.
    /// Waiting on an event that was never recorded does nothing, as in CUDA.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        match event.pending_record() {
            None => Ok(()),
            Some(waiter) => self.launch(waiter),
        }
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        write!(f, "Event(device={:?}, recorded={}, completed={})", s.device, s.recorded, s.completed)
    }
}
