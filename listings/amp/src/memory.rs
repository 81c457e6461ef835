//! Device memory, which the host cannot touch.
//!
//! On an accelerator, a tensor's `data_ptr()` is an address in the device's memory: host code
//! that dereferences it reads garbage or faults, and only the driver's copies and the device's
//! kernels reach the bytes. This simulated device keeps that rule. Each allocation is a memory
//! file mapped twice: the *device address* handed to PyTorch is mapped with no access, so a
//! host read or write through it is a segmentation fault, and the runtime keeps a second,
//! read-write mapping of the same pages (`device_view`) for the work the device itself does.
//! This is the driver's memory; the caching allocator (`allocator.rs`) sits on top of it. The
//! full backend (`openreg/runtime/src/memory.rs`) maps one arena per device instead.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One allocation: its device address maps to `len` bytes at the runtime's `view`.
struct Allocation {
    len: usize,
    view: usize,
    device: i8,
}

static ALLOCATIONS: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());

fn allocations() -> std::sync::MutexGuard<'static, BTreeMap<usize, Allocation>> {
    ALLOCATIONS.lock().unwrap_or_else(|e| e.into_inner())
}

fn os_error(call: &str) -> String {
    format!("{call} failed: {}", std::io::Error::last_os_error())
}

// ANCHOR: malloc
/// `size` bytes of memory on `device` (address 0 for 0 bytes, as CUDA's allocator gives).
pub fn malloc(size: usize, device: i8) -> Result<usize, String> {
    if size == 0 {
        return Ok(0);
    }
    let oom = |why: String| format!("openreg out of memory: cannot allocate {size} bytes ({why})");
    // SAFETY: plain system calls; every mapping made here is recorded or unmapped on failure.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let len = size.next_multiple_of(page);
        let fd = libc::memfd_create(c"openreg".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return Err(oom(os_error("memfd_create")));
        }
        let map = |protection| libc::mmap(std::ptr::null_mut(), len, protection, libc::MAP_SHARED, fd, 0);
        let resized = libc::ftruncate(fd, len as libc::off_t) == 0;
        let mapped = if resized { map(libc::PROT_NONE) } else { libc::MAP_FAILED };
        let view = if mapped != libc::MAP_FAILED { map(libc::PROT_READ | libc::PROT_WRITE) } else { libc::MAP_FAILED };
        let error = os_error("mmap");
        libc::close(fd); // the mappings keep the memory
        if view == libc::MAP_FAILED {
            if mapped != libc::MAP_FAILED {
                libc::munmap(mapped, len);
            }
            return Err(oom(error));
        }
        allocations().insert(mapped as usize, Allocation { len, view: view as usize, device });
        Ok(mapped as usize)
    }
}

/// Called from a C++ deleter: never fails, never panics.
pub fn free(ptr: usize) {
    if let Some(allocation) = allocations().remove(&ptr) {
        // SAFETY: both mappings were made by `malloc` with this length and are unmapped once.
        unsafe {
            libc::munmap(ptr as *mut libc::c_void, allocation.len);
            libc::munmap(allocation.view as *mut libc::c_void, allocation.len);
        }
    }
}
// ANCHOR_END: malloc

// ANCHOR: device_view
/// The runtime's read-write address of `len` bytes at device address `ptr`: what copies and
/// kernels (the device's own work) use. An error if the range is not inside one allocation.
pub fn device_view(ptr: usize, len: usize) -> Result<*mut u8, String> {
    let allocations = allocations();
    let found = allocations.range(..=ptr).next_back();
    match found {
        Some((&start, a)) if ptr.checked_add(len).is_some_and(|end| end <= start + a.len) => {
            Ok((a.view + (ptr - start)) as *mut u8)
        }
        _ => Err(format!("openreg: {len} bytes at {ptr:#x} are not inside one device allocation")),
    }
}
// ANCHOR_END: device_view

/// The device whose memory holds `ptr`.
pub fn device_of(ptr: usize) -> Result<i8, String> {
    let allocations = allocations();
    match allocations.range(..=ptr).next_back() {
        Some((&start, a)) if ptr < start + a.len => Ok(a.device),
        _ => Err(format!("openreg: {ptr:#x} is not device memory")),
    }
}
