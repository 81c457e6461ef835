//! Streams: ordered queues of work, each executed by a worker thread of its own.
//!
//! Stream ids are per device: id 0 is the device's default stream, new streams get the next
//! id. Streams live as long as the process (PyTorch copies `(device, id)` pairs around freely),
//! but an idle stream's worker thread exits and is started again by the next launch.
//!
//! Streams sit under the modules that extend them: a capture (graph.rs) takes a stream's
//! launches through [`LaunchSink`], a profiler's trace (trace.rs) watches tasks through
//! [`Observer`], and calls that wait ask [`check_may_wait`]. Streams know none of them.

use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::device::{DEVICE_COUNT, check_device};
use crate::error::{Error, FailureClass, Result};

/// Priorities as CUDA numbers them: lower is more urgent.
pub const HIGHEST_PRIORITY: i32 = -1;
pub const LOWEST_PRIORITY: i32 = 0;

/// How long an idle worker waits for work before its thread exits.
const WORKER_IDLE: Duration = Duration::from_secs(2);

/// How long a thread that waits for the other side (a worker for work, `synchronize` for the
/// worker) checks again and again, yielding its core, before it sleeps. Waking a sleeping
/// thread on another core cost ~20 µs on the build machine (a virtual machine), more than
/// most kernels take, and a training step waits for its stream several times.
const POLL: Duration = Duration::from_micros(200);

pub type Task = Box<dyn FnOnce() + Send + 'static>;

// ANCHOR: stream
/// A handle to a stream. Streams live as long as the process, so a handle is a reference.
#[derive(Clone, Copy)]
pub struct Stream(&'static Inner);

struct Inner {
    device: usize,
    id: u64,
    priority: i32,
    queue: Mutex<Queue>,
    /// Signalled when work arrives (wakes the worker).
    work: Condvar,
    /// Signalled when work completes (wakes synchronize).
    done: Condvar,
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    submitted: u64,
    completed: u64,
    worker_running: bool,
    /// The worker is waiting for work; only then does a launch need to wake it.
    worker_waiting: bool,
    /// Threads in `synchronize`; only then does a completed task need to wake anyone.
    synchronizers: usize,
    /// The first failure since the last synchronize, reported by it.
    error: Option<(String, FailureClass)>,
    /// Where launches go instead of the queue while something takes them (a capture).
    sink: Option<Box<dyn LaunchSink>>,
}
// ANCHOR_END: stream

// ANCHOR: hooks
/// A launched task that can run again: a clone runs at each replay of a capture.
pub trait Replayable: Send {
    fn task(&self) -> Task;
    /// The closure's type name, which names the function that launched it.
    fn name(&self) -> &'static str;
}

impl<F: FnOnce() + Clone + Send + 'static> Replayable for F {
    fn task(&self) -> Task {
        Box::new(self.clone())
    }
    fn name(&self) -> &'static str {
        std::any::type_name::<F>()
    }
}

/// Takes a stream's launches in place of its queue while installed ([`Stream::with_sink`]):
/// a capture records them to replay later.
pub trait LaunchSink: Any + Send {
    fn take(&mut self, task: Box<dyn Replayable>);
}

/// Watches the tasks streams run, for profilers ([`set_observer`]).
pub trait Observer: Sync {
    /// On the launching thread: what to hand to [`Observer::run`] (a correlation id).
    fn launched(&self) -> u64;
    /// On the stream's worker: runs `task` (launched as `name` with `launch`), observing it.
    fn run(&self, task: &mut dyn FnMut(), name: &'static str, device: usize, stream: u64, launch: u64);
}

/// Asked by every call that waits for a stream's work ([`set_wait_check`]): an error refuses
/// the wait (a capture forbids waiting for work that has not run).
pub type WaitCheck = fn(what: &str, stream: Option<Stream>) -> Result<()>;
// ANCHOR_END: hooks

static OBSERVING: AtomicBool = AtomicBool::new(false);
static OBSERVER: RwLock<Option<&'static dyn Observer>> = RwLock::new(None);
static WAIT_CHECK: OnceLock<WaitCheck> = OnceLock::new();

/// Installs (or with `None`, removes) the observer of every stream's tasks.
pub fn set_observer(observer: Option<&'static dyn Observer>) {
    *OBSERVER.write().unwrap_or_else(|e| e.into_inner()) = observer;
    OBSERVING.store(observer.is_some(), Ordering::Release);
}

fn observer() -> Option<&'static dyn Observer> {
    // One relaxed load on every launch while nothing observes.
    if !OBSERVING.load(Ordering::Relaxed) {
        return None;
    }
    *OBSERVER.read().unwrap_or_else(|e| e.into_inner())
}

/// `task`, wrapped so that `observer` sees it run; the wrapper stays `Clone` (capturable).
pub(crate) fn observed<F: FnOnce() + Clone + Send + 'static>(
    observer: &'static dyn Observer,
    device: usize,
    stream: u64,
    task: F,
) -> impl FnOnce() + Clone + Send + 'static {
    let (name, launch) = (std::any::type_name::<F>(), observer.launched());
    move || {
        let mut task = Some(task);
        observer.run(&mut || task.take().into_iter().for_each(|t| t()), name, device, stream, launch)
    }
}

/// A replayed task (`name`: its [`Replayable::name`]), wrapped for the observer if one is on.
pub(crate) fn observed_task(name: &'static str, device: usize, stream: u64, task: Task) -> Task {
    let Some(observer) = observer() else { return task };
    Box::new(move || {
        let mut task = Some(task);
        observer.run(&mut || task.take().into_iter().for_each(|t| t()), name, device, stream, 0)
    })
}

/// Runs `task` on the calling thread as work of `(device, stream)`, observed if one observes
/// (a blocking copy, which runs where CUDA's run: on the current stream).
pub(crate) fn run_observed<F: FnOnce() + Clone + Send + 'static>(device: usize, stream: u64, task: F) {
    match observer() {
        Some(observer) => observed(observer, device, stream, task)(),
        None => task(),
    }
}

/// Installs the check every waiting call makes; the first one installed stays.
pub fn set_wait_check(check: WaitCheck) {
    WAIT_CHECK.get_or_init(|| check);
}

/// Asks the installed [`WaitCheck`] whether `what` may wait (for `stream`'s work, if given).
pub fn check_may_wait(what: &str, stream: Option<Stream>) -> Result<()> {
    WAIT_CHECK.get().map_or(Ok(()), |check| check(what, stream))
}

static STREAMS: [RwLock<Vec<Stream>>; DEVICE_COUNT] = [const { RwLock::new(Vec::new()) }; DEVICE_COUNT];
/// Each device's default stream, also reachable without the registry's lock.
static DEFAULT: [OnceLock<Stream>; DEVICE_COUNT] = [const { OnceLock::new() }; DEVICE_COUNT];

thread_local! {
    // The current stream of each device, per thread; None is the default stream. Every kernel
    // launch reads it, so it holds the stream itself, not an id to look up under a lock.
    static CURRENT: Cell<[Option<Stream>; DEVICE_COUNT]> = const { Cell::new([None; DEVICE_COUNT]) };
}

fn registry(device: usize) -> &'static RwLock<Vec<Stream>> {
    &STREAMS[device]
}

fn default_of(device: usize) -> Stream {
    *DEFAULT[device].get_or_init(|| {
        let mut streams = registry(device).write().unwrap_or_else(|e| e.into_inner());
        if streams.is_empty() {
            streams.push(Stream::new(device, 0, LOWEST_PRIORITY));
        }
        streams[0]
    })
}

fn create(device: usize, priority: i32) -> Stream {
    default_of(device); // id 0 first
    let mut streams = registry(device).write().unwrap_or_else(|e| e.into_inner());
    let stream = Stream::new(device, streams.len() as u64, priority);
    streams.push(stream);
    stream
}

// ANCHOR: streams_api
/// The default stream (id 0) of `device`.
pub fn default_stream(device: i64) -> Result<Stream> {
    stream_by_id(device, 0)
}

/// A new stream on `device`; `priority` is clamped to `[HIGHEST_PRIORITY, LOWEST_PRIORITY]`.
pub fn new_stream(device: i64, priority: i32) -> Result<Stream> {
    let device = check_device(device)?;
    Ok(create(device, priority.clamp(HIGHEST_PRIORITY, LOWEST_PRIORITY)))
}

/// Looks a stream up by `(device, id)`, the pair PyTorch stores in a `c10::Stream`.
pub fn stream_by_id(device: i64, id: u64) -> Result<Stream> {
    let device = check_device(device)?;
    if id == 0 {
        return Ok(default_of(device));
    }
    let streams = registry(device).read().unwrap_or_else(|e| e.into_inner());
    streams.get(id as usize).copied().ok_or_else(|| {
        Error::InvalidValue(format!(
            "openreg:{device} has no stream with id {id} ({} streams exist)",
            streams.len().max(1)
        ))
    })
}

/// This thread's current stream on `device`.
pub fn current_stream(device: i64) -> Result<Stream> {
    let d = check_device(device)?;
    Ok(CURRENT.with(|c| c.get()[d]).unwrap_or_else(|| default_of(d)))
}

/// Makes `stream` this thread's current stream on its device; returns the previous one.
pub fn set_current_stream(stream: &Stream) -> Stream {
    let d = stream.0.device;
    let previous = CURRENT.with(|c| {
        let mut all = c.get();
        let previous = all[d].replace(*stream);
        c.set(all);
        previous
    });
    previous.unwrap_or_else(|| default_of(d))
}
// ANCHOR_END: streams_api

/// Waits until every stream of `device` has finished its work.
pub fn synchronize_device(index: i64) -> Result<()> {
    let device = check_device(index)?;
    let streams: Vec<Stream> = registry(device).read().unwrap_or_else(|e| e.into_inner()).clone();
    let mut first_error = Ok(());
    for s in &streams {
        if let Err(e) = s.synchronize() {
            first_error = first_error.and(Err(e));
        }
    }
    first_error
}

impl Stream {
    fn new(device: usize, id: u64, priority: i32) -> Stream {
        Stream(Box::leak(Box::new(Inner {
            device,
            id,
            priority,
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        })))
    }

    pub fn device(&self) -> usize {
        self.0.device
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    pub fn priority(&self) -> i32 {
        self.0.priority
    }

    /// A stable address identifying the stream, for PyTorch's "native handle".
    pub fn handle(&self) -> usize {
        std::ptr::from_ref(self.0) as usize
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ANCHOR: launch
    /// Enqueues `task`; it runs on this stream's worker after everything enqueued before it.
    /// A panic inside `task` is caught and reported by the next [`Stream::synchronize`].
    /// While a [`LaunchSink`] is installed the sink takes the task instead: it must be
    /// `Clone` so that a replay can run it again.
    pub fn launch(&self, task: impl FnOnce() + Clone + Send + 'static) -> Result<()> {
        if let Some(observer) = observer() {
            return self.submit(observed(observer, self.0.device, self.0.id, task));
        }
        self.submit(task)
    }

    fn submit<F: FnOnce() + Clone + Send + 'static>(&self, task: F) -> Result<()> {
        crate::fork::check_not_forked()?;
        crate::fork::mark_initialised();
        let mut q = self.lock();
        if let Some(sink) = q.sink.as_mut() {
            sink.take(Box::new(task));
            return Ok(());
        }
        self.push(q, std::iter::once(Box::new(task) as Task))
    }

    /// Enqueues `tasks` in order, under one lock (a graph's replay). Not while a sink takes
    /// the stream's launches.
    pub fn enqueue_all(&self, tasks: impl Iterator<Item = Task>) -> Result<()> {
        crate::fork::check_not_forked()?;
        let q = self.lock();
        if q.sink.is_some() {
            return Err(Error::Capture(format!(
                "openreg:{} stream {} is capturing: a graph cannot be replayed into a capture",
                self.0.device, self.0.id
            )));
        }
        self.push(q, tasks)
    }

    fn push(&self, mut q: MutexGuard<'_, Queue>, tasks: impl Iterator<Item = Task>) -> Result<()> {
        let before = q.tasks.len();
        q.tasks.extend(tasks);
        let added = (q.tasks.len() - before) as u64;
        q.submitted += added;
        if !q.worker_running {
            q.worker_running = true;
            let inner = self.0;
            let spawned = std::thread::Builder::new()
                .name(format!("openreg:{}/stream {}", inner.device, inner.id))
                .spawn(move || worker(inner));
            if let Err(e) = spawned {
                q.worker_running = false;
                q.tasks.truncate(before);
                q.submitted -= added;
                return Err(Error::System { call: "spawn", errno: e.raw_os_error().unwrap_or(0) });
            }
        }
        // A notification is a system call; skip it when the worker is busy (it takes the next
        // task without sleeping), which is the common case for back-to-back kernels.
        let wake = q.worker_waiting;
        drop(q);
        if wake {
            self.0.work.notify_one();
        }
        Ok(())
    }
    // ANCHOR_END: launch

    /// Runs `f` on the stream's sink slot, under the queue's lock: install, inspect or remove.
    pub fn with_sink<R>(&self, f: impl FnOnce(&mut Option<Box<dyn LaunchSink>>) -> R) -> R {
        f(&mut self.lock().sink)
    }

    /// Runs `task` on the calling thread at once if the stream is idle, else enqueues it.
    /// Used for markers (event records) and small kernels, which need no thread hop when
    /// nothing is pending: running now, under the queue lock, keeps the stream's order.
    pub fn run_or_launch(&self, task: impl FnOnce() + Clone + Send + 'static) -> Result<()> {
        if let Some(observer) = observer() {
            return self.run_or_enqueue(observed(observer, self.0.device, self.0.id, task));
        }
        self.run_or_enqueue(task)
    }

    fn run_or_enqueue(&self, task: impl FnOnce() + Clone + Send + 'static) -> Result<()> {
        let q = self.lock();
        if q.submitted == q.completed && q.sink.is_none() {
            // A panic must not unwind into the caller (C++): report it like a worker would.
            return run_task(task).map_err(|(message, class)| Error::StreamFailed {
                stream: self.0.id,
                device: self.0.device,
                message,
                class,
            });
        }
        drop(q);
        self.submit(task)
    }

    /// True when all work enqueued so far has completed.
    pub fn query(&self) -> bool {
        let q = self.lock();
        q.submitted == q.completed
    }

    /// Blocks until all work enqueued before this call has completed.
    pub fn synchronize(&self) -> Result<()> {
        crate::fork::check_not_forked()?;
        check_may_wait("synchronize", Some(*self))?;
        let mut q = self.lock();
        let target = q.submitted;
        q = poll(self.0, q, |q| q.completed >= target);
        q.synchronizers += 1;
        while q.completed < target {
            q = self.0.done.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.synchronizers -= 1;
        match q.error.take() {
            None => Ok(()),
            Some((message, class)) => {
                Err(Error::StreamFailed { stream: self.0.id, device: self.0.device, message, class })
            }
        }
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream(openreg:{}, id={}, priority={})", self.0.device, self.0.id, self.0.priority)
    }
}

// ANCHOR: worker
/// Releases the queue and looks again, yielding the core in between, until `ready` or for
/// [`POLL`] at most; returns the queue locked.
fn poll<'a>(inner: &'a Inner, mut q: MutexGuard<'a, Queue>, ready: impl Fn(&Queue) -> bool) -> MutexGuard<'a, Queue> {
    let start = Instant::now();
    while !ready(&q) && start.elapsed() < POLL {
        drop(q);
        std::thread::yield_now();
        q = inner.queue.lock().unwrap_or_else(|e| e.into_inner());
    }
    q
}

fn worker(inner: &Inner) {
    let mut q = inner.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let Some(task) = q.tasks.pop_front() else {
            // Back-to-back kernels are the common case: look again for a while before sleeping.
            q = poll(inner, q, |q| !q.tasks.is_empty());
            if !q.tasks.is_empty() {
                continue;
            }
            q.worker_waiting = true;
            let (guard, timeout) =
                inner.work.wait_timeout(q, WORKER_IDLE).unwrap_or_else(|e| e.into_inner());
            q = guard;
            q.worker_waiting = false;
            if timeout.timed_out() && q.tasks.is_empty() {
                q.worker_running = false;
                return;
            }
            continue;
        };
        drop(q);
        let outcome = run_task(task);
        q = inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(failure) = outcome {
            q.error.get_or_insert(failure);
        }
        q.completed += 1;
        if q.synchronizers > 0 {
            inner.done.notify_all();
        }
    }
}
// ANCHOR_END: worker

thread_local! {
    /// A failure the running task reported without panicking (`fail_task`).
    static TASK_FAILURE: std::cell::RefCell<Option<(String, FailureClass)>> = const { std::cell::RefCell::new(None) };
}

/// Marks the task running on this thread as failed: its stream reports `message` at the next
/// synchronize, as the exception class `class`. For tasks whose code reports errors by value
/// (a compiled kernel's C++ exception, caught at the C boundary), where a panic would be noise.
pub fn fail_task(class: FailureClass, message: String) {
    TASK_FAILURE.with(|f| *f.borrow_mut() = Some((message, class)));
}

/// Runs one task, turning a panic or a `fail_task` into the failure its stream reports.
fn run_task(task: impl FnOnce()) -> std::result::Result<(), (String, FailureClass)> {
    TASK_FAILURE.with(|f| f.borrow_mut().take());
    match catch_unwind(AssertUnwindSafe(task)) {
        Err(panic) => Err((panic_message(&*panic), FailureClass::Runtime)),
        Ok(()) => TASK_FAILURE.with(|f| f.borrow_mut().take()).map_or(Ok(()), Err),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a task panicked".into())
}
