//! Every failure of the runtime is a value of [`Error`]: the runtime never panics on bad input,
//! because its callers sit behind an FFI boundary that a panic must not cross.

use std::fmt;

// ANCHOR: error
/// What went wrong in a runtime call. The layers above map each variant to a Python
/// exception type (see `openreg/torch/src/error.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A device index outside `0..count`.
    InvalidDevice { index: i64, count: usize },
    /// The device has no room left for `requested` bytes.
    OutOfMemory { device: usize, requested: usize, reserved: usize, capacity: usize },
    /// An address (and length) that is not inside a live allocation of the kind expected.
    InvalidPointer { addr: usize, len: usize, expected: &'static str },
    /// An argument that is wrong for a reason the message explains.
    InvalidValue(String),
    /// An event used where it must have been recorded first.
    EventNotRecorded,
    /// `elapsed_time` on an event created without timing.
    TimingDisabled,
    /// A stream and an event (or two events) that belong to different devices.
    DeviceMismatch { what: &'static str, expected: usize, found: usize },
    /// Work enqueued on a stream failed; reported by the next synchronize.
    StreamFailed { stream: u64, device: usize, message: String, class: FailureClass },
    /// A system call failed.
    System { call: &'static str, errno: i32 },
    /// Used in a child process forked after the runtime was initialised.
    BadFork,
    /// Graph capture misuse (graph.rs): a RuntimeError in Python, as for CUDA.
    Capture(String),
}
// ANCHOR_END: error

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn last_os(call: &'static str) -> Self {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Error::System { call, errno }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidDevice { index, count } => write!(
                f,
                "OpenReg error: invalid device ordinal: index {index} for openreg, expected an \
                 index in [0, {count}) ({count} devices available)"
            ),
            Error::OutOfMemory { device, requested, reserved, capacity } => write!(
                f,
                "openreg:{device} out of memory: tried to allocate {} ({requested} bytes); \
                 {} of {} already reserved. Set OPENREG_DEVICE_MEMORY to change the capacity.",
                human(*requested),
                human(*reserved),
                human(*capacity)
            ),
            Error::InvalidPointer { addr, len, expected } => write!(
                f,
                "invalid pointer {addr:#x} (length {len}): expected {expected}"
            ),
            Error::InvalidValue(msg) => f.write_str(msg),
            Error::EventNotRecorded => f.write_str(
                "the event has not been recorded: call record() on a stream before this",
            ),
            Error::TimingDisabled => f.write_str(
                "elapsed time needs both events created with timing enabled (enable_timing=True)",
            ),
            Error::DeviceMismatch { what, expected, found } => write!(
                f,
                "{what} is on openreg:{found} but openreg:{expected} was expected"
            ),
            Error::StreamFailed { stream, device, message, .. } => write!(
                f,
                "work on stream {stream} of openreg:{device} failed: {message}"
            ),
            Error::Capture(msg) => f.write_str(msg),
            Error::BadFork => f.write_str(
                "Cannot re-initialize OpenReg in forked subprocess. To use OpenReg with \
                 multiprocessing, you must use the 'spawn' start method (the device was used in \
                 the parent before fork())",
            ),
            Error::System { call, errno } => write!(
                f,
                "{call} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for Error {}

/// What kind of failure a stream task reported, so that the synchronize that reports it can
/// raise what eager code would have raised (an out-of-range index is an `IndexError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// A panic, or an error of no particular class.
    Runtime,
    /// An index outside its dimension.
    Index,
}

/// Bytes as a short human-readable size, as PyTorch prints them in OOM messages.
pub fn human(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}
