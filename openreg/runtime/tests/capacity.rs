//! The per-device capacity and out-of-memory errors. Its own test binary, because the
//! capacity is read from the environment once per process.

use openreg_runtime::*;

#[test]
fn allocation_beyond_capacity_is_an_out_of_memory_error() {
    // SAFETY: set before any runtime call in this process; the only test in this binary.
    unsafe { std::env::set_var("OPENREG_DEVICE_MEMORY", "1M") };
    let a = malloc(0, 768 << 10).unwrap();
    let err = malloc(0, 512 << 10).unwrap_err();
    assert_eq!(
        err,
        Error::OutOfMemory { device: 0, requested: 512 << 10, reserved: 768 << 10, capacity: 1 << 20 }
    );
    let msg = err.to_string();
    assert!(msg.contains("openreg:0 out of memory") && msg.contains("512.00 KiB"), "{msg}");
    assert_eq!(memory_info(0).unwrap(), (256 << 10, 1 << 20));
    // Device 1 has its own capacity.
    let b = malloc(1, 768 << 10).unwrap();
    free(a).unwrap();
    // After freeing, the space is whole again.
    let c = malloc(0, 1 << 20).unwrap();
    free(c).unwrap();
    free(b).unwrap();
}
