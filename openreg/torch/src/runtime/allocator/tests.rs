//! The caching allocator on the real runtime. Tests share the process-wide caches, so they
//! take turns.

use std::sync::{Arc, Mutex};

use super::*;
use crate::error::{ErrorKind, last_error_kind};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn stats(device: i64) -> DeviceStats {
    device_stats(device).unwrap()
}

#[test]
fn freed_blocks_are_reused_without_asking_the_runtime() {
    let _g = serial();
    let a = device_malloc(1, 1000).unwrap();
    let before = stats(1);
    device_free(a);
    let b = device_malloc(1, 1000).unwrap();
    assert_eq!(a, b, "the cached block comes back");
    assert_eq!(stats(1).num_device_alloc, before.num_device_alloc);
    device_free(b);
}

#[test]
fn small_blocks_share_a_segment_and_merge_back() {
    let _g = serial();
    empty_cache();
    let before = stats(1);
    let a = device_malloc(1, 1000).unwrap();
    let b = device_malloc(1, 3000).unwrap();
    assert_eq!(b, a + 1024, "rounded to 512 bytes, carved from the same segment");
    let s = stats(1);
    assert_eq!(s.segment[0].current - before.segment[0].current, 1);
    assert_eq!(s.reserved_bytes[0].current - before.reserved_bytes[0].current, 2 << 20);
    assert_eq!(s.allocated_bytes[0].current - before.allocated_bytes[0].current, 1024 + 3072);
    assert_eq!(s.requested_bytes[0].current - before.requested_bytes[0].current, 4000);
    assert_eq!(s.inactive_split[0].current, 1, "the rest of the segment");
    device_free(a);
    device_free(b);
    let s = stats(1);
    assert_eq!(s.inactive_split[0].current, 0, "merged back into one free segment");
    assert_eq!(s.allocated_bytes[0].current, before.allocated_bytes[0].current);
    empty_cache();
    assert_eq!(stats(1).reserved_bytes[0].current, before.reserved_bytes[0].current - 0);
}

#[test]
fn large_requests_use_large_segments() {
    let _g = serial();
    empty_cache();
    let before = stats(0);
    let a = device_malloc(0, 3 << 20).unwrap(); // a 20 MiB segment, split
    let b = device_malloc(0, 18 << 20).unwrap(); // does not fit the 17 MiB rest: a segment of its own
    let c = device_malloc(0, 12 << 20).unwrap(); // fits the rest
    assert_eq!(c, a + (3 << 20));
    let s = stats(0);
    assert_eq!(s.reserved_bytes[2].current - before.reserved_bytes[2].current, (20 << 20) + (18 << 20));
    assert_eq!(s.segment[2].current - before.segment[2].current, 2);
    for p in [a, b, c] {
        device_free(p);
    }
    empty_cache();
    let s = stats(0);
    assert_eq!(s.reserved_bytes[0].current, before.reserved_bytes[0].current);
    assert!(s.num_device_free >= before.num_device_free + 2);
}

#[test]
fn blocks_are_not_reused_on_another_stream() {
    let _g = serial();
    let a = device_malloc(1, 5000).unwrap();
    device_free(a);
    let other = rt::new_stream(1, 0).unwrap();
    let previous = rt::set_current_stream(&other);
    let b = device_malloc(1, 5000).unwrap();
    assert_ne!(a, b, "a block cached for the default stream is not handed to another one");
    device_free(b);
    rt::set_current_stream(&previous);
}

// ANCHOR: record_stream_test
#[test]
fn record_stream_delays_reuse_until_the_other_stream_is_done() {
    let _g = serial();
    let side = rt::new_stream(1, 0).unwrap();
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    side.launch(move || drop(g.lock().unwrap())).unwrap(); // the side stream is busy

    let a = device_malloc(1, 8192).unwrap();
    record_stream(a, 1, side.id() as i64).unwrap();
    device_free(a);
    let b = device_malloc(1, 8192).unwrap();
    assert_ne!(a, b, "still in use by the side stream");
    device_free(b);

    drop(held);
    side.synchronize().unwrap();
    let c = device_malloc(1, 8192).unwrap();
    assert!(c == a || c == b, "reusable once the side stream caught up");
    device_free(c);
}
// ANCHOR_END: record_stream_test

#[test]
fn out_of_memory_says_what_was_asked_and_what_is_held() {
    let _g = serial();
    let ooms = stats(0).num_ooms;
    let err = device_malloc(0, 1 << 40).unwrap_err().to_string();
    assert_eq!(last_error_kind(), ErrorKind::OutOfMemory);
    assert!(err.starts_with("openreg:0 out of memory: tried to allocate 1.00 TiB;"), "{err}");
    assert!(err.contains("allocated and") && err.contains("reserved by PyTorch, of a capacity of 8.00 GiB"), "{err}");
    assert_eq!(stats(0).num_ooms, ooms + 1);
    assert!(device_malloc(9, 8).is_err());
    assert_eq!(last_error_kind(), ErrorKind::Runtime);
    device_free(0x1234); // reported on stderr, nothing else
}

#[test]
fn peaks_and_resets() {
    let _g = serial();
    let a = device_malloc(1, 4 << 20).unwrap();
    device_free(a);
    let s = stats(1);
    assert!(s.allocated_bytes[0].peak >= s.allocated_bytes[0].current + (4 << 20));
    reset_peak_stats(1).unwrap();
    let s = stats(1);
    assert_eq!(s.allocated_bytes[0].peak, s.allocated_bytes[0].current);
    reset_accumulated_stats(1).unwrap();
    assert_eq!(stats(1).allocated_bytes[0].allocated, 0);
}

#[test]
fn many_threads_allocate_and_free_with_every_byte_accounted_for() {
    let _g = serial();
    let before = stats(0).allocated_bytes[0].current;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..300usize {
                    let size = 1 + (i * 7919 + t * 104_729) % (3 << 20);
                    held.push(device_malloc(0, size).unwrap());
                    if i % 3 == 0 {
                        device_free(held.swap_remove((i * 31) % held.len()));
                    }
                }
                for p in held {
                    device_free(p);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = stats(0);
    assert_eq!(s.allocated_bytes[0].current, before);
    assert_eq!(s.allocation[0].current, 0);
}

#[test]
fn parked_blocks_merge_when_a_request_needs_the_room() {
    let _g = serial();
    empty_cache();
    let quarters: Vec<usize> = (0..4).map(|_| device_malloc(1, 512 << 10).unwrap()).collect();
    let before = stats(1);
    for &q in &quarters {
        device_free(q); // parked, unmerged
    }
    let half = device_malloc(1, 1 << 20).unwrap();
    assert_eq!(half, quarters[0], "the four parked quarters merged into the segment again");
    assert_eq!(stats(1).num_device_alloc, before.num_device_alloc, "no new segment");
    device_free(half);
    empty_cache();
}

#[test]
fn requests_round_to_512_bytes_or_to_power_of_two_divisions() {
    let mut s = settings::DEFAULT;
    assert_eq!(s.round_size(1), 512);
    assert_eq!(s.round_size(1_300_000), 1_300_480);
    s.divisions[20] = 4; // [1 MiB, 2 MiB) in steps of 256 KiB
    assert_eq!(s.round_size(1_300_000), 1_310_720);
    assert_eq!(s.round_size(1 << 20), 1 << 20, "a power of two stays");
    assert_eq!(s.round_size(3000), 3072, "other intervals are unchanged");
}

#[test]
fn a_pool_block_serves_only_allocations_routed_to_the_pool() {
    let _g = serial();
    let pool = pools::mem_pool_create(1).unwrap();
    pools::begin_allocate_to_pool(1, pool).unwrap();
    let inside = device_malloc(1, 2000).unwrap();
    pools::end_allocate_to_pool(1, pool).unwrap();
    device_free(inside);
    let outside = device_malloc(1, 2000).unwrap();
    assert_ne!(outside, inside);
    pools::begin_allocate_to_pool(1, pool).unwrap();
    let again = device_malloc(1, 2000).unwrap();
    pools::end_allocate_to_pool(1, pool).unwrap();
    assert_eq!(again, inside);
    assert_eq!(pool_stats(pool).unwrap().allocated_blocks, 1);
    assert!(pools::begin_allocate_to_pool(0, pool).is_err(), "a pool of another device");
    device_free(again);
    device_free(outside);
    pools::mem_pool_release(pool);
    assert!(pool_stats(pool).is_err(), "released with its last reference");
}
