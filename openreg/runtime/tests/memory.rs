//! Device memory, host memory, pointer attributes and copies.

use openreg_runtime::*;
use std::sync::{Mutex, MutexGuard};

/// The tests of this file take turns. Several of them check what a freed address does (a
/// double free, attributes after free), and a test running beside them may be handed that
/// address by its next malloc: its own free would then fail, and the double free succeed.
/// No allocator can tell those apart. `many_threads_allocate_copy_and_free_at_once` keeps
/// the concurrency under test.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn to_device(bytes: &[u8], device: i64) -> *mut u8 {
    let d = malloc(device, bytes.len()).unwrap();
    unsafe { memcpy(d, bytes.as_ptr(), bytes.len(), MemcpyKind::HostToDevice).unwrap() };
    d
}

fn to_host(d: *const u8, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    unsafe { memcpy(out.as_mut_ptr(), d, len, MemcpyKind::DeviceToHost).unwrap() };
    out
}

#[test]
fn allocations_are_page_aligned_and_distinct() {
    let _turn = one_at_a_time();
    let a = malloc(0, 10).unwrap();
    let b = malloc(0, 10).unwrap();
    assert_ne!(a, b);
    assert_eq!(a as usize % 4096, 0);
    assert_eq!(b as usize % 4096, 0);
    assert!(malloc(0, 0).unwrap().is_null());
    free(a).unwrap();
    free(b).unwrap();
}

#[test]
fn round_trip_in_every_direction() {
    let _turn = one_at_a_time();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let d0 = to_device(&data, 0);
    let d1 = malloc(1, data.len()).unwrap();
    unsafe { memcpy(d1, d0, data.len(), MemcpyKind::DeviceToDevice).unwrap() };
    let d1b = malloc(1, data.len()).unwrap();
    unsafe { memcpy(d1b, d1, data.len(), MemcpyKind::Default).unwrap() };
    assert_eq!(to_host(d1b, data.len()), data);
    for p in [d0, d1, d1b] {
        free(p).unwrap();
    }
}

#[test]
fn large_copies_use_several_threads_and_stay_correct() {
    let _turn = one_at_a_time();
    let data: Vec<u8> = (0..(9 << 20)).map(|i: usize| (i % 251) as u8).collect();
    let d = to_device(&data, 1);
    assert_eq!(to_host(d, data.len()), data);
    free(d).unwrap();
}

#[test]
fn bad_pointers_are_errors_not_crashes() {
    let _turn = one_at_a_time();
    let d = malloc(0, 4096).unwrap();
    // Out of bounds of the allocation.
    let mut big = vec![0u8; 8192];
    let err = unsafe { memcpy(big.as_mut_ptr(), d, 8192, MemcpyKind::DeviceToHost) }.unwrap_err();
    assert!(matches!(err, Error::InvalidPointer { .. }), "{err}");
    // Host memory where device memory was promised.
    let err = unsafe { memcpy(big.as_mut_ptr(), big.as_ptr(), 16, MemcpyKind::DeviceToHost) }.unwrap_err();
    assert!(matches!(err, Error::InvalidPointer { .. }), "{err}");
    // Device memory where host memory was promised.
    let err = unsafe { memcpy(d, big.as_ptr(), 16, MemcpyKind::HostToHost) }.unwrap_err();
    assert!(matches!(err, Error::InvalidValue(_)), "{err}");
    free(d).unwrap();
    // Double free and use after free.
    assert!(matches!(free(d), Err(Error::InvalidPointer { .. })));
    assert!(host_view(d, 1).is_err());
    // Not a device pointer at all.
    assert!(free(big.as_mut_ptr()).is_err());
    assert!(matches!(malloc(3, 16), Err(Error::InvalidDevice { index: 3, count: 2 })));
}

#[test]
fn host_view_within_checks_the_range_against_the_given_allocation() {
    let _turn = one_at_a_time();
    let d = malloc(0, 256).unwrap();
    let inner = unsafe { d.add(64) };
    let view = host_view_within(inner, 64, d, 256).unwrap();
    assert_eq!(view as usize, host_view(d, 256).unwrap() as usize + 64);
    assert!(matches!(host_view_within(inner, 256, d, 256), Err(Error::InvalidPointer { .. })));
    assert!(matches!(host_view_within(d, 8, inner, 64), Err(Error::InvalidPointer { .. })));
    let host = [0u8; 64];
    assert!(host_view_within(host.as_ptr(), 8, host.as_ptr(), 64).is_err()); // not device memory
    free(d).unwrap();
}

#[test]
fn host_view_checks_bounds() {
    let _turn = one_at_a_time();
    let d = malloc(0, 100).unwrap();
    assert!(host_view(d, 4096).is_ok()); // the page-rounded allocation
    assert!(host_view(unsafe { d.add(4000) }, 96).is_ok());
    assert!(host_view(unsafe { d.add(4000) }, 97).is_err());
    free(d).unwrap();
}

#[test]
fn pointer_attributes_tell_memory_apart() {
    let _turn = one_at_a_time();
    let d = malloc(1, 64).unwrap();
    let h = host_malloc(64).unwrap();
    let local = 5u8;
    let a = pointer_attributes(unsafe { d.add(10) });
    assert_eq!((a.memory_type, a.device, a.base), (MemoryType::Device, Some(1), d as usize));
    let a = pointer_attributes(h);
    assert_eq!((a.memory_type, a.device), (MemoryType::Host, None));
    assert_eq!(pointer_attributes(&local).memory_type, MemoryType::Unmanaged);
    free(d).unwrap();
    assert_eq!(pointer_attributes(d).memory_type, MemoryType::Unmanaged);
    host_free(h).unwrap();
    assert!(host_free(h).is_err());
}

#[test]
fn freed_memory_is_reused_and_accounted() {
    let _turn = one_at_a_time();
    let (free0, total) = memory_info(0).unwrap();
    assert!(free0 <= total);
    let p = malloc(0, 1 << 20).unwrap();
    let (free1, _) = memory_info(0).unwrap();
    assert!(free1 <= free0 - (1 << 20) + (1 << 20)); // other tests may run concurrently
    free(p).unwrap();
}

#[test]
fn many_threads_allocate_copy_and_free_at_once() {
    let _turn = one_at_a_time();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..200usize {
                    let len = 1 + (i * 37 + t * 101) % 20_000;
                    let data: Vec<u8> = (0..len).map(|k| (k + t + i) as u8).collect();
                    let d = to_device(&data, (t % 2) as i64);
                    assert_eq!(to_host(d, len), data);
                    free(d).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn trim_returns_freed_pages_to_the_host() {
    let _turn = one_at_a_time();
    let len = 3 << 20;
    let p = to_device(&vec![7u8; len], 1);
    free(p).unwrap();
    trim(1).unwrap();
    // Pages that were given back read as zeros when reused.
    let q = malloc(1, len).unwrap();
    let back = to_host(q, len);
    free(q).unwrap();
    if q == p {
        assert!(back.iter().all(|&b| b == 0));
    }
    assert!(trim(5).is_err());
}
