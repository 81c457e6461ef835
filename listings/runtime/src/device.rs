//! Devices and the current device per thread: what the device guard asks of the runtime.

use std::cell::Cell;

pub const DEVICE_COUNT: i8 = 2;

thread_local! {
    static CURRENT: Cell<i8> = const { Cell::new(0) };
}

pub fn check_device(index: i64) -> Result<i8, String> {
    if (0..DEVICE_COUNT as i64).contains(&index) {
        Ok(index as i8)
    } else {
        Err(format!(
            "OpenReg error: invalid device ordinal: index {index} for openreg, expected an index in [0, {DEVICE_COUNT})"
        ))
    }
}

pub fn current_device() -> i8 {
    CURRENT.with(Cell::get)
}

pub fn exchange_device(index: i64) -> Result<i8, String> {
    let device = check_device(index)?;
    Ok(CURRENT.with(|c| c.replace(device)))
}
