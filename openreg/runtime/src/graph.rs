//! Graphs: capture the work launched on a stream instead of running it, then replay it as a
//! whole. A replay puts every captured task on the stream's queue at once, with no host work
//! per task beyond a clone: that is what removes launch overhead.
//!
//! Capture is per stream: a capture is the stream's [`LaunchSink`] while it lasts, so
//! [`Stream::launch`] hands it each task (a `Clone` closure, so it can run once per replay)
//! instead of queuing it. Operations that
//! would wait for work that has not run (synchronising, blocking copies, reading results) are
//! errors during capture, and invalidate it; which threads they are errors on depends on the
//! capture mode, as in CUDA.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use crate::error::{Error, Result};
use crate::stream::{LaunchSink, Replayable, Stream};

/// Which threads may not make calls that wait for captured work (CUDA's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureMode {
    /// No thread may; the default.
    Global,
    /// Only the capturing thread may not.
    ThreadLocal,
    /// Any thread may, except to wait on the capturing stream itself.
    Relaxed,
}

// ANCHOR: prologue
/// Work a replay queues before the graph's own tasks, made anew for each replay. A random
/// operator's generator registers one with the capture (CUDA graphs register the generator
/// likewise): at each replay it reads the generator's seed and offset, advances the offset by
/// what the whole graph draws, and returns a task that hands these values to the graph's
/// kernels — in stream order, so two replays queued back to back each get their own.
pub trait ReplayPrologue: Send + Sync {
    fn prologue(self: Arc<Self>) -> Box<dyn FnOnce() + Send + 'static>;
}
// ANCHOR_END: prologue

// ANCHOR: sink
/// A stream's capture in progress: the stream's sink until `end_capture`.
struct Capture {
    tasks: Vec<Box<dyn Replayable>>,
    /// Unique for the process's lifetime (a pool may be shared by several captures).
    id: u64,
    prologues: Vec<Arc<dyn ReplayPrologue>>,
    pool: u64,
    /// Why the capture can no longer succeed (an operation not permitted during capture).
    invalid: Option<String>,
}

impl LaunchSink for Capture {
    fn take(&mut self, task: Box<dyn Replayable>) {
        self.tasks.push(task);
    }
}

/// The capture installed on `stream`, if its sink is one.
fn with_capture<R>(stream: &Stream, f: impl FnOnce(Option<&mut Capture>) -> R) -> R {
    stream.with_sink(|sink| f(sink.as_mut().and_then(|s| (&mut **s as &mut dyn Any).downcast_mut())))
}
// ANCHOR_END: sink

/// The captures in progress: (device, stream, mode, capturing thread). Checked by every call
/// that waits; a count makes the check one atomic load when nothing captures.
static ACTIVE: Mutex<Vec<(usize, u64, CaptureMode, ThreadId)>> = Mutex::new(Vec::new());
static CAPTURING: AtomicUsize = AtomicUsize::new(0);
static NEXT_POOL: AtomicUsize = AtomicUsize::new(1);
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

fn active() -> std::sync::MutexGuard<'static, Vec<(usize, u64, CaptureMode, ThreadId)>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// True while any stream captures (one atomic load).
pub fn any_capturing() -> bool {
    CAPTURING.load(Ordering::Relaxed) != 0
}

/// A new private memory pool id (for a capture given pool 0).
pub fn new_pool() -> u64 {
    NEXT_POOL.fetch_add(1, Ordering::Relaxed) as u64
}

// ANCHOR: check
/// Called by operations that wait for a stream's work (`what` names the operation; `stream`
/// is the stream it waits on, if one). An error if a capture forbids it; the capture it
/// conflicts with is invalidated, so its `end_capture` fails too, and says why.
pub fn check_not_capturing(what: &str, stream: Option<Stream>) -> Result<()> {
    if CAPTURING.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    let me = std::thread::current().id();
    let conflict = active().iter().copied().find(|&(device, id, mode, thread)| {
        let same_stream = stream.is_some_and(|s| s.device() == device && s.id() == id);
        same_stream
            || match mode {
                CaptureMode::Global => true,
                CaptureMode::ThreadLocal => thread == me,
                CaptureMode::Relaxed => false,
            }
    });
    let Some((device, id, _, _)) = conflict else { return Ok(()) };
    let message = format!(
        "OpenReg error: operation not permitted when stream is capturing: {what} during the \
         capture of openreg:{device} stream {id} (it would wait for work that has not run); the \
         capture is invalidated"
    );
    if let Ok(stream) = crate::stream::stream_by_id(device as i64, id) {
        stream.invalidate_capture(&message);
    }
    Err(Error::Capture(message))
}
// ANCHOR_END: check

/// A finished capture: the tasks of one stream, replayable.
pub struct Graph {
    stream: Stream,
    pool: u64,
    tasks: Vec<Box<dyn Replayable>>,
    prologues: Vec<Arc<dyn ReplayPrologue>>,
}

impl Stream {
    // ANCHOR: capture
    /// Starts capturing: work launched on this stream from now on is recorded, not run.
    /// Allocations made for it come from memory pool `pool` (0: a new private pool); returns
    /// the pool.
    pub fn begin_capture(&self, pool: u64, mode: CaptureMode) -> Result<u64> {
        if self.id() == 0 {
            return Err(Error::Capture(format!(
                "capture on the default stream of openreg:{} is not supported: capture on a side \
                 stream (torch.Stream(device=\"openreg\")), whose work is not mixed with other \
                 libraries' work on the default stream",
                self.device()
            )));
        }
        let pool = if pool == 0 { new_pool() } else { pool };
        crate::stream::set_wait_check(check_not_capturing);
        self.with_sink(|sink| {
            if sink.is_some() {
                return Err(Error::Capture(format!(
                    "openreg:{} stream {} is already capturing: end that capture first",
                    self.device(),
                    self.id()
                )));
            }
            let id = NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed);
            *sink = Some(Box::new(Capture { tasks: Vec::new(), id, prologues: Vec::new(), pool, invalid: None }));
            Ok(())
        })?;
        active().push((self.device(), self.id(), mode, std::thread::current().id()));
        CAPTURING.fetch_add(1, Ordering::Relaxed);
        Ok(pool)
    }

    /// Ends the capture and returns what it recorded.
    pub fn end_capture(&self) -> Result<Graph> {
        let not_capturing = || {
            Error::Capture(format!(
                "openreg:{} stream {} is not capturing: call capture_begin first",
                self.device(),
                self.id()
            ))
        };
        let sink = self.with_sink(|sink| {
            // Only a capture's sink is taken.
            if sink.as_mut().is_some_and(|s| (&mut **s as &mut dyn Any).is::<Capture>()) { sink.take() } else { None }
        });
        let capture = (sink.ok_or_else(not_capturing)? as Box<dyn Any>).downcast::<Capture>().map_err(|_| not_capturing())?;
        let mut list = active();
        if let Some(i) = list.iter().position(|&(d, id, _, _)| d == self.device() && id == self.id()) {
            list.remove(i);
            CAPTURING.fetch_sub(1, Ordering::Relaxed);
        }
        drop(list);
        if let Some(why) = capture.invalid {
            return Err(Error::Capture(format!("the capture failed: {why}")));
        }
        Ok(Graph { stream: *self, pool: capture.pool, tasks: capture.tasks, prologues: capture.prologues })
    }
    // ANCHOR_END: capture

    /// The id of this stream's capture in progress, if any.
    pub fn capture_id(&self) -> Option<u64> {
        with_capture(self, |capture| capture.map(|c| c.id))
    }

    /// Registers `prologue` with this stream's capture: every replay of the graph queues its
    /// task first. An error if the stream is not capturing.
    pub fn add_replay_prologue(&self, prologue: Arc<dyn ReplayPrologue>) -> Result<()> {
        with_capture(self, |capture| match capture {
            Some(c) => {
                c.prologues.push(prologue);
                Ok(())
            }
            None => Err(Error::Capture(format!(
                "openreg:{} stream {} is not capturing",
                self.device(),
                self.id()
            ))),
        })
    }

    /// The memory pool of this stream's capture in progress, if any.
    pub fn capture_pool(&self) -> Option<u64> {
        with_capture(self, |capture| capture.map(|c| c.pool))
    }

    fn invalidate_capture(&self, why: &str) {
        with_capture(self, |capture| {
            if let Some(c) = capture {
                c.invalid.get_or_insert_with(|| why.to_owned());
            }
        });
    }
}

impl Graph {
    // ANCHOR: replay
    /// Queues every captured task on `stream` (the current one at replay, as CUDA does; it
    /// must be on the capture's device), in order, under one lock.
    pub fn replay(&self, stream: Stream) -> Result<()> {
        if stream.device() != self.stream.device() {
            return Err(Error::DeviceMismatch {
                what: "the replay stream",
                expected: self.stream.device(),
                found: stream.device(),
            });
        }
        let prologues = self.prologues.iter().map(|p| p.clone().prologue());
        let (device, id) = (stream.device(), stream.id());
        let tasks = self.tasks.iter().map(|t| crate::stream::observed_task(t.name(), device, id, t.task()));
        stream.enqueue_all(prologues.chain(tasks))
    }
    // ANCHOR_END: replay

    pub fn stream(&self) -> Stream {
        self.stream
    }

    pub fn pool(&self) -> u64 {
        self.pool
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// A readable listing: one line per task, named after the function that launched it.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "openreg graph: openreg:{} stream {}, memory pool {}, {} tasks\n",
            self.stream.device(),
            self.stream.id(),
            self.pool,
            self.tasks.len()
        );
        for (i, task) in self.tasks.iter().enumerate() {
            out.push_str(&format!("{i:5}  {}\n", task.name().split("::{{closure}}").next().unwrap_or("?")));
        }
        out
    }
}
