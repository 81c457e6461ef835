//! The cxx bridge: the Rust functions the C++ glue calls, and the C++ function Rust calls.

use crate::allocator::{empty_cache, record_stream, reset_accumulated_stats, reset_peak_stats};
use crate::allocator::{free as allocator_free, malloc as allocator_malloc};
use crate::copy::{copy_device_to_device, copy_device_to_host, copy_host_to_device};
use crate::device::{check_device, current_device, exchange_device};
use crate::event::{new_event, Event};
use crate::fallback::record_fallback;
use crate::kernels::{abs_f32, add_f32, mul_f32};
use crate::stream::{current_stream, exchange_stream, new_stream, query_stream, synchronize_device, synchronize_stream};

fn device_count() -> i8 {
    crate::device::DEVICE_COUNT
}

/// The allocator's statistics in the bridge's types.
fn memory_stats(device: i8) -> Result<ffi::MemoryStats, String> {
    let device = check_device(device as i64)?;
    let stats = crate::allocator::stats(device);
    let stat = |s: crate::allocator::Stat| ffi::StatValues { current: s.current, peak: s.peak, allocated: s.allocated, freed: s.freed };
    Ok(ffi::MemoryStats {
        allocated_bytes: stat(stats.allocated_bytes),
        reserved_bytes: stat(stats.reserved_bytes),
        allocations: stat(stats.allocations),
        segments: stat(stats.segments),
    })
}

#[cxx::bridge(namespace = "openreg")]
pub mod ffi {
    struct StatValues {
        current: i64,
        peak: i64,
        allocated: i64,
        freed: i64,
    }

    struct MemoryStats {
        allocated_bytes: StatValues,
        reserved_bytes: StatValues,
        allocations: StatValues,
        segments: StatValues,
    }

    extern "Rust" {
        fn device_count() -> i8;
        fn check_device(index: i64) -> Result<i8>;
        fn current_device() -> i8;
        fn exchange_device(index: i64) -> Result<i8>;
        fn record_fallback(name: &str) -> bool;

        // The caching allocator (src/allocator.rs).
        fn allocator_malloc(size: usize, device: i8, stream: i64) -> Result<usize>;
        fn allocator_free(ptr: usize);
        fn record_stream(ptr: usize, stream: i64);
        fn empty_cache(device: i8) -> Result<()>;
        fn memory_stats(device: i8) -> Result<MemoryStats>;
        fn reset_peak_stats(device: i8);
        fn reset_accumulated_stats(device: i8);

        // Copies, queued on the current stream (src/copy.rs).
        fn copy_host_to_device(dst: usize, src: &[u8]) -> Result<()>;
        fn copy_device_to_host(dst: &mut [u8], src: usize) -> Result<()>;
        fn copy_device_to_device(dst: usize, src: usize, len: usize) -> Result<()>;

        // Streams (src/stream.rs) and events (src/event.rs).
        fn new_stream(device: i8) -> Result<i64>;
        fn current_stream(device: i8) -> Result<i64>;
        fn exchange_stream(device: i8, id: i64) -> Result<i64>;
        fn synchronize_stream(device: i8, id: i64) -> Result<()>;
        fn query_stream(device: i8, id: i64) -> Result<bool>;
        fn synchronize_device(device: i8) -> Result<()>;
        type Event;
        fn new_event() -> Box<Event>;
        fn record(self: &Event, device: i8, stream: i64) -> Result<()>;
        fn block(self: &Event, device: i8, stream: i64) -> Result<()>;
        fn query(self: &Event) -> bool;
        fn synchronize(self: &Event);
        fn elapsed_ms(self: &Event, end: &Event) -> Result<f64>;

        // Kernels (src/kernels.rs): one function per operation, so C++ cannot call a kernel
        // that Rust does not have (a missing one fails to compile).
        fn abs_f32(data: &[usize], shape: &[i64], strides: &[i64]) -> Result<()>;
        fn add_f32(alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) -> Result<()>;
        fn mul_f32(alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) -> Result<()>;
    }

    unsafe extern "C++" {
        include!("Register.h");
        fn register_backend() -> Result<()>;
    }
}
