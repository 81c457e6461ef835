//! Events: a marker queued on a stream. It completes when the stream reaches it, which the
//! host can wait for (`synchronize`), another stream can wait for (`block`), and two completed
//! events can be timed against each other.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::stream::stream;

#[derive(Default)]
struct State {
    recorded: u64,  // how many times the event was recorded
    completed: u64, // the latest recording the stream has reached
    time: Option<Instant>,
}

#[derive(Default)]
struct Marker {
    state: Mutex<State>,
    reached: Condvar,
}

impl Marker {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until recording `n` has completed.
    fn wait(&self, n: u64) {
        let mut state = self.lock();
        while state.completed < n {
            state = self.reached.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

// ANCHOR: event
/// What PyTorch holds as an event's `void*`. Queued tasks share the marker, so destroying the
/// event while a recording is pending is safe.
pub struct Event(Arc<Marker>);

pub fn new_event() -> Box<Event> {
    Box::new(Event(Arc::default()))
}

impl Event {
    /// Queues the marker on stream `id` of `device`.
    pub fn record(&self, device: i8, id: i64) -> Result<(), String> {
        let stream = stream(device, id)?;
        let n = {
            let mut state = self.0.lock();
            state.recorded += 1;
            state.recorded
        };
        let marker = Arc::clone(&self.0);
        stream.launch(Box::new(move || {
            let mut state = marker.lock();
            state.completed = state.completed.max(n);
            state.time = Some(Instant::now());
            marker.reached.notify_all();
            Ok(())
        }));
        Ok(())
    }

    /// Makes stream `id` of `device` wait, before its next work, for the latest recording
    /// (nothing to wait for if the event was never recorded).
    pub fn block(&self, device: i8, id: i64) -> Result<(), String> {
        let stream = stream(device, id)?;
        let n = self.0.lock().recorded;
        if n > 0 {
            let marker = Arc::clone(&self.0);
            stream.launch(Box::new(move || {
                marker.wait(n);
                Ok(())
            }));
        }
        Ok(())
    }

    pub fn query(&self) -> bool {
        let state = self.0.lock();
        state.completed >= state.recorded
    }

    /// Blocks the host until the latest recording has completed.
    pub fn synchronize(&self) {
        let n = self.0.lock().recorded;
        self.0.wait(n);
    }

    /// Milliseconds from this event to `end`, both completed.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f64, String> {
        let time = |e: &Event| {
            let state = e.0.lock();
            match state.time {
                Some(t) if state.completed >= state.recorded => Ok(t),
                _ => Err("openreg: elapsed_time needs two events that were recorded and have completed".to_string()),
            }
        };
        let (start, stop) = (time(self)?, time(end)?);
        Ok(if stop >= start { (stop - start).as_secs_f64() * 1e3 } else { -((start - stop).as_secs_f64() * 1e3) })
    }
}
// ANCHOR_END: event
