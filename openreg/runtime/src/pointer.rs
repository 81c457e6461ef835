//! What kind of memory an address points to, like `cudaPointerGetAttributes`.

use crate::host::host_allocation_of;
use crate::memory::device_allocation_of;

// ANCHOR: attributes
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryType {
    /// Host memory the runtime did not allocate (ordinary `malloc`, the stack, ...).
    Unmanaged,
    /// Pinned host memory from `host_malloc`.
    Host,
    /// Device memory from `malloc`.
    Device,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerAttributes {
    pub memory_type: MemoryType,
    /// The device of device memory; `None` otherwise.
    pub device: Option<usize>,
    /// Start and length of the allocation that contains the pointer (0 if unmanaged).
    pub base: usize,
    pub len: usize,
}

pub fn pointer_attributes(ptr: *const u8) -> PointerAttributes {
    let addr = ptr as usize;
    if let Some((device, base, len)) = device_allocation_of(addr) {
        return PointerAttributes { memory_type: MemoryType::Device, device: Some(device), base, len };
    }
    if let Some((base, len)) = host_allocation_of(addr) {
        return PointerAttributes { memory_type: MemoryType::Host, device: None, base, len };
    }
    PointerAttributes { memory_type: MemoryType::Unmanaged, device: None, base: 0, len: 0 }
}
// ANCHOR_END: attributes
