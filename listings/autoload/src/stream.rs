//! Streams: each is a queue of device work run in order by a worker thread of its own. The
//! host returns as soon as work is queued, so the device's work overlaps the host's, and work
//! on two streams may run at the same time. Stream 0 of each device is its default stream.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::device::{check_device, DEVICE_COUNT};

/// Device work: a copy or a kernel. An error is reported at the next synchronize.
pub type Task = Box<dyn FnOnce() -> Result<(), String> + Send>;

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    running: bool,
    error: Option<String>,
}

// ANCHOR: stream
#[derive(Default)]
pub struct Stream {
    queue: Mutex<Queue>,
    work: Condvar, // the worker waits here for tasks
    idle: Condvar, // synchronize waits here for an empty queue
}

impl Stream {
    fn start() -> Arc<Stream> {
        let stream = Arc::new(Stream::default());
        let worker = Arc::clone(&stream);
        std::thread::Builder::new()
            .name("openreg-stream".into())
            .spawn(move || worker.run())
            .expect("cannot start a stream's worker thread");
        stream
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `task` behind everything queued before it, and returns at once.
    pub fn launch(&self, task: Task) {
        self.lock().tasks.push_back(task);
        self.work.notify_one();
    }

    /// Waits until every task queued so far has run; the first error since the last
    /// synchronize, if any, is returned (and cleared), as CUDA reports a kernel's failure.
    pub fn synchronize(&self) -> Result<(), String> {
        let mut queue = self.lock();
        while queue.running || !queue.tasks.is_empty() {
            queue = self.idle.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
        queue.error.take().map_or(Ok(()), Err)
    }

    /// True when the stream has no work queued or running.
    pub fn query(&self) -> bool {
        let queue = self.lock();
        !queue.running && queue.tasks.is_empty()
    }

    fn run(&self) {
        loop {
            let task = {
                let mut queue = self.lock();
                while queue.tasks.is_empty() {
                    queue = self.work.wait(queue).unwrap_or_else(|e| e.into_inner());
                }
                queue.running = true;
                queue.tasks.pop_front().expect("checked above")
            };
            // A panicking task must not kill the worker (or cross into C++): it becomes the
            // stream's error.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
                .unwrap_or_else(|_| Err("openreg: a task panicked on the stream".into()));
            let mut queue = self.lock();
            queue.running = false;
            if let Err(error) = result {
                queue.error.get_or_insert(error);
            }
            if queue.tasks.is_empty() {
                self.idle.notify_all();
            }
        }
    }
}
// ANCHOR_END: stream

// ANCHOR: registry
/// Every stream of every device, by id (the index here); created on first use.
static STREAMS: Mutex<Vec<Vec<Arc<Stream>>>> = Mutex::new(Vec::new());

fn streams() -> MutexGuard<'static, Vec<Vec<Arc<Stream>>>> {
    let mut streams = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    if streams.is_empty() {
        *streams = (0..DEVICE_COUNT).map(|_| vec![Stream::start()]).collect();
    }
    streams
}

pub fn stream(device: i8, id: i64) -> Result<Arc<Stream>, String> {
    let device = check_device(device as i64)?;
    let streams = streams();
    let of_device = &streams[device as usize];
    usize::try_from(id).ok().and_then(|i| of_device.get(i)).cloned().ok_or_else(|| {
        format!("openreg: no stream {id} on openreg:{device}, expected an id in [0, {})", of_device.len())
    })
}

/// A new stream on `device` (with its own worker); its id.
pub fn new_stream(device: i8) -> Result<i64, String> {
    let device = check_device(device as i64)?;
    let mut streams = streams();
    streams[device as usize].push(Stream::start());
    Ok(streams[device as usize].len() as i64 - 1)
}

thread_local! {
    /// The current stream of each device, per host thread (as in CUDA).
    static CURRENT: RefCell<[i64; DEVICE_COUNT as usize]> = const { RefCell::new([0; DEVICE_COUNT as usize]) };
}

pub fn current_stream(device: i8) -> Result<i64, String> {
    let device = check_device(device as i64)?;
    Ok(CURRENT.with(|c| c.borrow()[device as usize]))
}

/// Makes stream `id` current on `device`; returns the previous one.
pub fn exchange_stream(device: i8, id: i64) -> Result<i64, String> {
    stream(device, id)?;
    Ok(CURRENT.with(|c| std::mem::replace(&mut c.borrow_mut()[device as usize], id)))
}

/// Queues `task` on the current stream of `device`.
pub fn launch_current(device: i8, task: Task) -> Result<(), String> {
    stream(device, current_stream(device)?)?.launch(task);
    Ok(())
}

pub fn synchronize_stream(device: i8, id: i64) -> Result<(), String> {
    stream(device, id)?.synchronize()
}

pub fn query_stream(device: i8, id: i64) -> Result<bool, String> {
    Ok(stream(device, id)?.query())
}

/// Waits for every stream of `device`.
pub fn synchronize_device(device: i8) -> Result<(), String> {
    let all: Vec<Arc<Stream>> = streams()[check_device(device as i64)? as usize].clone();
    all.iter().try_for_each(|s| s.synchronize())
}
// ANCHOR_END: registry
