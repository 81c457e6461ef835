//! A forked child must not use the runtime its parent initialised: the child has none of
//! the parent's stream threads, and device memory is a shared mapping, so the child's
//! writes would land in the parent's tensors. Like CUDA, the runtime refuses, with an error
//! that says what to do.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

static INITIALISED: AtomicBool = AtomicBool::new(false);
static IN_BAD_FORK: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    if INITIALISED.load(Ordering::Relaxed) {
        IN_BAD_FORK.store(true, Ordering::Relaxed);
    }
}

// ANCHOR: fork
/// Called when the runtime creates state (device memory, a stream thread, pinned memory).
pub(crate) fn mark_initialised() {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    INITIALISED.store(true, Ordering::Relaxed);
}

/// True in a child forked after the runtime was initialised.
pub fn is_in_bad_fork() -> bool {
    IN_BAD_FORK.load(Ordering::Relaxed)
}

/// Every runtime entry point that touches state starts with this.
pub(crate) fn check_not_forked() -> Result<()> {
    if is_in_bad_fork() { Err(Error::BadFork) } else { Ok(()) }
}
// ANCHOR_END: fork
