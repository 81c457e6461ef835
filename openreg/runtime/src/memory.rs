//! Device memory: a separate address space, simulated on host memory.
//!
//! Each device owns one memory file (`memfd`) of `capacity()` bytes, mapped twice:
//!
//! * the **device view** is `PROT_NONE`. Its addresses are what `malloc` returns and what
//!   PyTorch stores in tensors, so host code that dereferences a device pointer faults, as it
//!   would on a real accelerator;
//! * the **runtime view** is read/write. Copies and kernels reach the same pages through it,
//!   after [`host_view`] translated and checked the device address.
//!
//! Nothing is ever re-protected, so there is no `mprotect` per operation and no window in which
//! another thread could see the memory unprotected. Pages cost host memory once touched; freed
//! ranges keep their pages for fast reuse until [`trim`] returns them to the host.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use crate::device::{DEVICE_COUNT, check_device};
use crate::error::{Error, Result};

/// Per-device capacity when `OPENREG_DEVICE_MEMORY` is not set.
pub const DEFAULT_CAPACITY: usize = 8 << 30;

pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    })
}

/// The per-device capacity: `OPENREG_DEVICE_MEMORY` (bytes, or with a K/M/G suffix).
pub fn capacity() -> Result<usize> {
    static CAPACITY: OnceLock<Result<usize>> = OnceLock::new();
    CAPACITY
        .get_or_init(|| match std::env::var("OPENREG_DEVICE_MEMORY") {
            Ok(text) => parse_size(&text).ok_or_else(|| {
                Error::InvalidValue(format!(
                    "OPENREG_DEVICE_MEMORY={text:?} is not a size: expected bytes, \
                     optionally with a K, M or G suffix (e.g. 4G)"
                ))
            }),
            Err(_) => Ok(DEFAULT_CAPACITY),
        })
        .clone()
}

fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 10),
        (i, 'm' | 'M') => (&text[..i], 20),
        (i, 'g' | 'G') => (&text[..i], 30),
        _ => (text, 0),
    };
    let value: usize = digits.trim().parse().ok()?;
    let bytes = value.checked_mul(1usize << shift)?;
    (bytes >= page_size()).then(|| round_up(bytes, page_size()))
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

// ANCHOR: arena
/// One device's address space.
struct Arena {
    device: usize,
    /// Start of the device view (`PROT_NONE`): the addresses handed out.
    base: usize,
    /// Start of the runtime view (read/write) of the same pages.
    shadow: usize,
    capacity: usize,
    fd: libc::c_int,
    state: Mutex<ArenaState>,
}

/// Which ranges (offsets from `base`) are free and which are allocated.
#[derive(Default)]
struct ArenaState {
    free_by_offset: BTreeMap<usize, usize>,
    free_by_size: BTreeSet<(usize, usize)>,
    live: BTreeMap<usize, usize>,
    reserved: usize,
}
// ANCHOR_END: arena

static ARENAS: [OnceLock<Result<Arena>>; DEVICE_COUNT] = [const { OnceLock::new() }; DEVICE_COUNT];

/// The arena of `device`, created on first use (so importing the backend costs nothing).
fn arena(device: usize) -> Result<&'static Arena> {
    ARENAS[device].get_or_init(|| Arena::new(device)).as_ref().map_err(Clone::clone)
}

/// The arenas that exist already, without creating any; safe to call from a signal handler.
pub(crate) fn existing_arenas() -> impl Iterator<Item = (usize, usize, usize)> {
    ARENAS
        .iter()
        .filter_map(|a| a.get())
        .filter_map(|a| a.as_ref().ok())
        .map(|a| (a.device, a.base, a.capacity))
}

impl Arena {
    fn new(device: usize) -> Result<Arena> {
        let capacity = capacity()?;
        let name = CString::new(format!("openreg-device-{device}")).expect("no NUL in name");
        // SAFETY: plain system calls on values we own; every result is checked.
        unsafe {
            let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(Error::last_os("memfd_create"));
            }
            if libc::ftruncate(fd, capacity as libc::off_t) != 0 {
                let err = Error::last_os("ftruncate");
                libc::close(fd);
                return Err(err);
            }
            let map = |prot| {
                libc::mmap(
                    std::ptr::null_mut(),
                    capacity,
                    prot,
                    libc::MAP_SHARED | libc::MAP_NORESERVE,
                    fd,
                    0,
                )
            };
            let base = map(libc::PROT_NONE);
            if base == libc::MAP_FAILED {
                let err = Error::last_os("mmap");
                libc::close(fd);
                return Err(err);
            }
            let shadow = map(libc::PROT_READ | libc::PROT_WRITE);
            if shadow == libc::MAP_FAILED {
                let err = Error::last_os("mmap");
                libc::munmap(base, capacity);
                libc::close(fd);
                return Err(err);
            }
            let mut state = ArenaState::default();
            state.insert_free(0, capacity);
            crate::fault::install(describe_for_fault);
            crate::fork::mark_initialised();
            Ok(Arena {
                device,
                base: base as usize,
                shadow: shadow as usize,
                capacity,
                fd,
                state: Mutex::new(state),
            })
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ArenaState> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters more than losing the process, so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn alloc(&self, size: usize) -> Result<usize> {
        let len = round_up(size, page_size());
        let mut s = self.lock();
        // Best fit: the smallest free range that is large enough.
        let Some(&(free_len, offset)) = s.free_by_size.range((len, 0)..).next() else {
            return Err(Error::OutOfMemory {
                device: self.device,
                requested: size,
                reserved: s.reserved,
                capacity: self.capacity,
            });
        };
        s.remove_free(offset, free_len);
        if free_len > len {
            s.insert_free(offset + len, free_len - len);
        }
        s.live.insert(offset, len);
        s.reserved += len;
        Ok(self.base + offset)
    }

    fn free(&self, addr: usize) -> Result<()> {
        let offset = addr - self.base;
        let mut s = self.lock();
        let len = s.live.remove(&offset).ok_or(Error::InvalidPointer {
            addr,
            len: 0,
            expected: "the start of a live device allocation (was it freed already?)",
        })?;
        s.reserved -= len;
        // The pages stay committed, like a real device's memory: reusing them costs no page
        // faults. `trim` gives them back to the host.
        s.insert_free(offset, len);
        Ok(())
    }

    /// Returns the pages of every free range to the host.
    fn trim(&self) {
        let s = self.lock();
        for (&offset, &len) in &s.free_by_offset {
            // SAFETY: the range lies inside our memory file and is not allocated (we hold the
            // lock, so it cannot be handed out meanwhile). Failure only leaves pages committed.
            unsafe {
                libc::fallocate(
                    self.fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                );
            }
        }
    }

    /// The live allocation `(offset, len)` that contains `offset`.
    fn find_live(s: &ArenaState, offset: usize) -> Option<(usize, usize)> {
        let (&start, &len) = s.live.range(..=offset).next_back()?;
        (offset < start + len).then_some((start, len))
    }
}

impl ArenaState {
    /// Adds a free range, merging it with free neighbours.
    fn insert_free(&mut self, mut offset: usize, mut len: usize) {
        if let Some((&prev, &prev_len)) = self.free_by_offset.range(..offset).next_back()
            && prev + prev_len == offset
        {
            self.remove_free(prev, prev_len);
            offset = prev;
            len += prev_len;
        }
        if let Some(&next_len) = self.free_by_offset.get(&(offset + len)) {
            self.remove_free(offset + len, next_len);
            len += next_len;
        }
        self.free_by_offset.insert(offset, len);
        self.free_by_size.insert((len, offset));
    }

    fn remove_free(&mut self, offset: usize, len: usize) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(len, offset));
    }
}

// ANCHOR: api
/// Allocates `size` bytes on `device`, page-aligned. A size of 0 gives a null pointer.
pub fn malloc(device: i64, size: usize) -> Result<*mut u8> {
    crate::fork::check_not_forked()?;
    let device = check_device(device)?;
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    Ok(arena(device)?.alloc(size)? as *mut u8)
}

/// Frees memory returned by [`malloc`]. Freeing twice is an error, not a crash.
pub fn free(ptr: *mut u8) -> Result<()> {
    crate::fork::check_not_forked()?;
    if ptr.is_null() {
        return Ok(());
    }
    let (device, _, _) = device_range_of(ptr as usize).ok_or(Error::InvalidPointer {
        addr: ptr as usize,
        len: 0,
        expected: "a pointer returned by openreg's device malloc",
    })?;
    arena(device)?.free(ptr as usize)
}

/// Gives the host memory behind `device`'s free ranges back to the host (freed device memory
/// otherwise stays committed for fast reuse).
pub fn trim(device: i64) -> Result<()> {
    let device = check_device(device)?;
    if let Some(Ok(arena)) = ARENAS[device].get() {
        arena.trim();
    }
    Ok(())
}

/// "Unprotects" `len` bytes of device memory at `ptr` for the runtime: checks that they lie in
/// one live allocation and returns the same bytes' address in the read/write runtime view.
pub fn host_view(ptr: *const u8, len: usize) -> Result<*mut u8> {
    crate::fork::check_not_forked()?;
    let addr = ptr as usize;
    let invalid = Error::InvalidPointer { addr, len, expected: "a range inside one live device allocation" };
    let (device, base, _) = device_range_of(addr).ok_or(invalid.clone())?;
    let arena = arena(device)?;
    let offset = addr - base;
    let (start, alloc_len) = Arena::find_live(&arena.lock(), offset).ok_or(invalid.clone())?;
    if offset + len > start + alloc_len {
        return Err(invalid);
    }
    Ok((arena.shadow + offset) as *mut u8)
}

/// Like [`host_view`], for a caller that holds the allocation `[base, base + base_len)` alive
/// (a tensor's storage): checks that `[ptr, ptr + len)` lies inside it and inside one device's
/// memory, without taking the allocator's lock. Kernels translate their operands this way.
pub fn host_view_within(ptr: *const u8, len: usize, base: *const u8, base_len: usize) -> Result<*mut u8> {
    let (addr, start) = (ptr as usize, base as usize);
    let invalid = || Error::InvalidPointer { addr, len, expected: "a range inside its tensor's storage" };
    let inside = addr >= start && addr.checked_add(len).is_some_and(|end| end <= start + base_len);
    if !inside {
        return Err(invalid());
    }
    let arena = existing_arenas_full()
        .find(|a| (a.base..a.base + a.capacity).contains(&start) && start + base_len <= a.base + a.capacity)
        .ok_or_else(invalid)?;
    Ok((arena.shadow + (addr - arena.base)) as *mut u8)
}

fn existing_arenas_full() -> impl Iterator<Item = &'static Arena> {
    ARENAS.iter().filter_map(|a| a.get()).filter_map(|a| a.as_ref().ok())
}

/// `(free, total)` bytes of `device`, as `torch.accelerator.get_memory_info` reports them.
pub fn memory_info(device: i64) -> Result<(usize, usize)> {
    let arena = arena(check_device(device)?)?;
    let reserved = arena.lock().reserved;
    Ok((arena.capacity - reserved, arena.capacity))
}
// ANCHOR_END: api

/// The device whose address space contains `ptr` (live or not); no lock taken.
pub fn device_of(ptr: *const u8) -> Option<usize> {
    device_range_of(ptr as usize).map(|(device, _, _)| device)
}

/// `(device, base, capacity)` of the device address space that contains `addr`, if any.
pub(crate) fn device_range_of(addr: usize) -> Option<(usize, usize, usize)> {
    existing_arenas().find(|&(_, base, cap)| (base..base + cap).contains(&addr))
}

/// The live allocation `(base address, len)` containing `addr`, if `addr` is device memory.
pub(crate) fn device_allocation_of(addr: usize) -> Option<(usize, usize, usize)> {
    let (device, base, _) = device_range_of(addr)?;
    let arena = arena(device).ok()?;
    let (start, len) = Arena::find_live(&arena.lock(), addr - base)?;
    Some((device, base + start, len))
}

/// Like [`device_allocation_of`] but never blocks: for the fault handler (fault.rs), which
/// gets the device even when the allocation cannot be looked up.
fn describe_for_fault(addr: usize) -> Option<(usize, Option<(usize, usize)>)> {
    let (device, base, _) = device_range_of(addr)?;
    let allocation = (|| {
        let arena = ARENAS[device].get()?.as_ref().ok()?;
        let state = arena.state.try_lock().ok()?;
        let (start, len) = Arena::find_live(&state, addr - base)?;
        Some((base + start, len))
    })();
    Some((device, allocation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_sizes() {
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("1"), None);
    }

    #[test]
    fn free_ranges_merge() {
        let mut s = ArenaState::default();
        s.insert_free(0, 4096);
        s.insert_free(8192, 4096);
        s.insert_free(4096, 4096);
        assert_eq!(s.free_by_offset.len(), 1);
        assert_eq!(s.free_by_size.iter().next(), Some(&(12288, 0)));
    }
}
