//! The device runtime, reduced to what this stage needs: devices, the current device per
//! thread, and memory. Device memory is plain host memory here; the full backend
//! (`openreg/runtime`) makes it a separate, protected address space.

use std::alloc::Layout;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;

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

/// Live allocations and their layouts, so `free` can give them back.
static LIVE: Mutex<Option<HashMap<usize, Layout>>> = Mutex::new(None);

pub fn malloc(size: usize) -> Result<usize, String> {
    if size == 0 {
        return Ok(0);
    }
    let layout = Layout::from_size_align(size, 64).map_err(|e| e.to_string())?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc(layout) } as usize;
    if ptr == 0 {
        return Err(format!("openreg out of memory allocating {size} bytes"));
    }
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(ptr, layout);
    Ok(ptr)
}

/// Called from a C++ deleter: never fails, never panics.
pub fn free(ptr: usize) {
    let layout = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|m| m.remove(&ptr));
    if let Some(layout) = layout {
        // SAFETY: `ptr` was allocated with this layout and is freed once (removed above).
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
    }
}
