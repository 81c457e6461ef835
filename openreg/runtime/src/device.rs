//! Devices and the current device of each thread.

use std::cell::Cell;

use crate::error::{Error, Result};

// ANCHOR: device
/// The simulated machine has two OpenReg devices, like the reference backend.
pub const DEVICE_COUNT: usize = 2;

thread_local! {
    // Like CUDA, the current device is per host thread and starts at 0.
    static CURRENT_DEVICE: Cell<usize> = const { Cell::new(0) };
}

pub fn device_count() -> usize {
    DEVICE_COUNT
}

/// Validates a device index coming from outside (Python, PyTorch) and returns it as `usize`.
pub fn check_device(index: i64) -> Result<usize> {
    if (0..DEVICE_COUNT as i64).contains(&index) {
        Ok(index as usize)
    } else {
        Err(Error::InvalidDevice { index, count: DEVICE_COUNT })
    }
}

pub fn current_device() -> usize {
    CURRENT_DEVICE.with(Cell::get)
}

pub fn set_device(index: i64) -> Result<()> {
    let device = check_device(index)?;
    CURRENT_DEVICE.with(|c| c.set(device));
    Ok(())
}

/// Sets the current device and returns the previous one.
pub fn exchange_device(index: i64) -> Result<usize> {
    let device = check_device(index)?;
    Ok(CURRENT_DEVICE.with(|c| c.replace(device)))
}
// ANCHOR_END: device

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_device_is_per_thread() {
        set_device(1).unwrap();
        assert_eq!(current_device(), 1);
        std::thread::spawn(|| assert_eq!(current_device(), 0)).join().unwrap();
        assert_eq!(exchange_device(0).unwrap(), 1);
        assert_eq!(current_device(), 0);
    }

    #[test]
    fn bad_indices_are_errors() {
        assert_eq!(set_device(2), Err(Error::InvalidDevice { index: 2, count: 2 }));
        assert!(exchange_device(-1).is_err());
        let msg = check_device(7).unwrap_err().to_string();
        assert!(msg.contains('7') && msg.contains("[0, 2)"), "{msg}");
    }
}
