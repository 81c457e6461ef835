//! Errors crossing into C++. cxx turns an `Err` into a `rust::Error` that keeps only the
//! message; the exception *class* travels beside it in a thread-local, which the C++ side reads
//! to throw the matching c10 error (and so the matching Python exception).

use std::cell::Cell;
use std::fmt;

use openreg_runtime::{Error, FailureClass};

pub use crate::ffi::ffi::ErrorKind;

thread_local! {
    static LAST_KIND: Cell<ErrorKind> = const { Cell::new(ErrorKind::Runtime) };
}

// ANCHOR: kind
/// The Python exception class for a runtime error.
pub fn kind_of(error: &Error) -> ErrorKind {
    match error {
        Error::OutOfMemory { .. } => ErrorKind::OutOfMemory,
        Error::InvalidValue(_) => ErrorKind::Value,
        Error::StreamFailed { class: FailureClass::Index, .. } => ErrorKind::Index,
        _ => ErrorKind::Runtime,
    }
}

/// The error type of every bridge function.
#[derive(Debug)]
pub struct Failure(String);

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        LAST_KIND.with(|k| k.set(kind_of(&error)));
        Failure(error.to_string())
    }
}
// ANCHOR_END: kind

impl Failure {
    /// An `IndexError`, such as a class index outside the classes.
    pub(crate) fn index(message: String) -> Self {
        LAST_KIND.with(|k| k.set(ErrorKind::Index));
        Failure(message)
    }

    /// A `RuntimeError` with this message (what CPU raises for a bad argument to most operators).
    pub(crate) fn runtime(message: String) -> Self {
        LAST_KIND.with(|k| k.set(ErrorKind::Runtime));
        Failure(message)
    }

    /// An out-of-memory error composed above the runtime (it knows the allocator's numbers).
    pub(crate) fn out_of_memory(message: String) -> Self {
        LAST_KIND.with(|k| k.set(ErrorKind::OutOfMemory));
        Failure(message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn last_error_kind() -> ErrorKind {
    LAST_KIND.with(Cell::get)
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;
