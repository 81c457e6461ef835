//! The cxx bridge: the Rust functions the C++ glue calls, and the C++ function Rust calls.

use crate::fallback::record_fallback;
use crate::device::{check_device, current_device, exchange_device};
use crate::memory::{copy_device_to_device, copy_device_to_host, copy_host_to_device};
use crate::memory::{free as device_free, malloc as device_malloc};
use crate::kernels::{abs_f32, add_f32, mul_f32};

fn device_count() -> i8 {
    crate::device::DEVICE_COUNT
}

#[cxx::bridge(namespace = "openreg")]
pub mod ffi {
    extern "Rust" {
        fn device_count() -> i8;
        fn check_device(index: i64) -> Result<i8>;
        fn current_device() -> i8;
        fn exchange_device(index: i64) -> Result<i8>;
        fn device_malloc(size: usize) -> Result<usize>;
        fn device_free(ptr: usize);
        fn copy_host_to_device(dst: usize, src: &[u8]) -> Result<()>;
        fn copy_device_to_host(dst: &mut [u8], src: usize) -> Result<()>;
        fn copy_device_to_device(dst: usize, src: usize, len: usize) -> Result<()>;
        fn record_fallback(name: &str) -> bool;

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
