//! Devices, as the guard and the hooks see them.

use openreg_runtime as rt;

use crate::error::Result;

pub(crate) fn device_count() -> i8 {
    rt::device_count() as i8
}

pub(crate) fn check_device(index: i64) -> Result<i8> {
    Ok(rt::check_device(index)? as i8)
}

pub(crate) fn current_device() -> i8 {
    rt::current_device() as i8
}

pub(crate) fn set_device(index: i64) -> Result<()> {
    Ok(rt::set_device(index)?)
}

pub(crate) fn exchange_device(index: i64) -> Result<i8> {
    Ok(rt::exchange_device(index)? as i8)
}

pub(crate) fn synchronize_device(index: i64) -> Result<()> {
    Ok(rt::synchronize_device(index)?)
}
