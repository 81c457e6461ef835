//! Streams, events, kernel launch and device synchronize.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openreg_runtime::*;

#[test]
fn tasks_run_in_order_off_the_calling_thread() {
    let s = new_stream(0, 0).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let caller = std::thread::current().id();
    for i in 0..100 {
        let log = log.clone();
        s.launch(move || {
            assert_ne!(std::thread::current().id(), caller);
            log.lock().unwrap().push(i);
        })
        .unwrap();
    }
    s.synchronize().unwrap();
    assert!(s.query());
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
}

#[test]
fn query_sees_pending_work() {
    let s = new_stream(1, 0).unwrap();
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    s.launch(move || drop(g.lock().unwrap())).unwrap();
    assert!(!s.query());
    drop(held);
    s.synchronize().unwrap();
    assert!(s.query());
}

#[test]
fn streams_have_ids_priorities_and_a_current_one_per_thread() {
    let d = default_stream(0).unwrap();
    assert_eq!(d.id(), 0);
    let s = new_stream(0, -5).unwrap();
    assert_eq!(s.priority(), stream::HIGHEST_PRIORITY);
    assert_eq!(stream_by_id(0, s.id()).unwrap(), s);
    assert!(stream_by_id(0, 1 << 40).is_err());
    assert!(new_stream(2, 0).is_err());
    assert_eq!(current_stream(0).unwrap(), d);
    let previous = set_current_stream(&s);
    assert_eq!(previous, d);
    assert_eq!(current_stream(0).unwrap(), s);
    std::thread::spawn(move || assert_eq!(current_stream(0).unwrap().id(), 0)).join().unwrap();
    set_current_stream(&d);
}

#[test]
fn a_task_that_fails_by_value_is_reported_with_its_class() {
    // A compiled kernel's C++ exception arrives as a value; the task reports it with
    // fail_task, and synchronize returns it once, with its class, without a panic.
    let s = new_stream(1, 0).unwrap();
    s.launch(|| openreg_runtime::fail_task(FailureClass::Index, "index 7 out of bounds".into())).unwrap();
    s.launch(|| {}).unwrap();
    match s.synchronize().unwrap_err() {
        Error::StreamFailed { message, class, .. } => {
            assert_eq!((message.as_str(), class), ("index 7 out of bounds", FailureClass::Index));
        }
        other => panic!("expected StreamFailed, got {other}"),
    }
    s.synchronize().unwrap();
    s.launch(|| {}).unwrap();
    s.synchronize().unwrap();
}

#[test]
fn a_panicking_kernel_is_reported_by_synchronize() {
    // Device 1: a device-wide synchronize elsewhere would report (and clear) this error.
    let s = new_stream(1, 0).unwrap();
    s.launch(|| panic!("kernel exploded")).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    s.launch(move || {
        r.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let err = s.synchronize().unwrap_err();
    assert!(err.to_string().contains("kernel exploded"), "{err}");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "later work still runs");
    s.synchronize().unwrap();
}

#[test]
fn events_order_work_across_streams() {
    let (a, b) = (new_stream(0, 0).unwrap(), new_stream(0, 0).unwrap());
    let value = Arc::new(AtomicUsize::new(0));
    let v = value.clone();
    a.launch(move || {
        std::thread::sleep(Duration::from_millis(50));
        v.store(1, Ordering::SeqCst);
    })
    .unwrap();
    let e = Event::new(false);
    e.record(&a).unwrap();
    assert!(!e.query());
    b.wait_event(&e).unwrap();
    let v = value.clone();
    let seen = Arc::new(AtomicUsize::new(99));
    let s2 = seen.clone();
    b.launch(move || s2.store(v.load(Ordering::SeqCst), Ordering::SeqCst)).unwrap();
    b.synchronize().unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 1, "b ran after a's event");
    assert!(e.query());
}

#[test]
fn unrecorded_events_and_timing() {
    let e = Event::new(false);
    assert!(e.query());
    e.synchronize();
    assert_eq!(e.elapsed_time(&e), Err(Error::TimingDisabled));
    let (start, end) = (Event::new(true), Event::new(true));
    assert_eq!(start.elapsed_time(&end), Err(Error::EventNotRecorded));
    let s = new_stream(1, 0).unwrap();
    start.record(&s).unwrap();
    s.launch(|| std::thread::sleep(Duration::from_millis(20))).unwrap();
    end.record(&s).unwrap();
    let ms = start.elapsed_time(&end).unwrap();
    assert!(ms >= 19.0, "{ms}");
    // An event belongs to the device it was first recorded on.
    let other = new_stream(0, 0).unwrap();
    assert!(matches!(start.record(&other), Err(Error::DeviceMismatch { .. })));
}

#[test]
fn async_copies_and_device_synchronize() {
    let s = new_stream(0, 0).unwrap();
    let data: Vec<u8> = (0..3 << 20).map(|i: usize| (i % 13) as u8).collect();
    let d = malloc(0, data.len()).unwrap();
    let mut back = vec![0u8; data.len()];
    unsafe {
        memcpy_async(d, data.as_ptr(), data.len(), MemcpyKind::HostToDevice, &s).unwrap();
        memcpy_async(back.as_mut_ptr(), d, data.len(), MemcpyKind::DeviceToHost, &s).unwrap();
    }
    synchronize_device(0).unwrap();
    assert_eq!(back, data);
    free(d).unwrap();
    assert!(synchronize_device(9).is_err());
}

#[test]
fn small_async_copies_on_an_idle_stream_run_at_once_and_in_order_on_a_busy_one() {
    let s = new_stream(0, 0).unwrap();
    let (a, b) = (malloc(0, 64).unwrap(), malloc(0, 64).unwrap());
    let data: Vec<u8> = (0..64).collect();
    let mut back = vec![0u8; 64];
    unsafe {
        memcpy(a, data.as_ptr(), 64, MemcpyKind::HostToDevice).unwrap();
        // Idle: done when the call returns, with nothing left for the stream.
        memcpy_async(b, a, 64, MemcpyKind::DeviceToDevice, &s).unwrap();
        assert!(s.query());
        let seen = host_view(b, 64).unwrap();
        assert_eq!(std::slice::from_raw_parts(seen, 64), &data[..]);
        // Busy: queued behind the running task, which writes `a` before the copy reads it.
        let addr = a as usize;
        s.launch(move || {
            std::thread::sleep(Duration::from_millis(30));
            let p = host_view(addr as *const u8, 64).unwrap();
            std::ptr::write_bytes(p, 7, 64);
        })
        .unwrap();
        memcpy_async(b, a, 64, MemcpyKind::DeviceToDevice, &s).unwrap();
        assert!(!s.query(), "the copy waited for the stream");
        s.synchronize().unwrap();
        memcpy(back.as_mut_ptr(), b, 64, MemcpyKind::DeviceToHost).unwrap();
    }
    assert_eq!(back, vec![7u8; 64]);
    free(a).unwrap();
    free(b).unwrap();
}

#[test]
fn sync_memcpy_waits_for_the_current_stream() {
    let s = current_stream(1).unwrap();
    let d = malloc(1, 4).unwrap();
    let addr = d as usize;
    s.launch(move || {
        std::thread::sleep(Duration::from_millis(30));
        let p = host_view(addr as *const u8, 4).unwrap();
        unsafe { std::ptr::copy_nonoverlapping([1u8, 2, 3, 4].as_ptr(), p, 4) };
    })
    .unwrap();
    let mut out = [0u8; 4];
    unsafe { memcpy(out.as_mut_ptr(), d, 4, MemcpyKind::DeviceToHost).unwrap() };
    assert_eq!(out, [1, 2, 3, 4]);
    free(d).unwrap();
}

#[test]
fn several_threads_use_several_streams_at_once() {
    let total = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let total = total.clone();
            std::thread::spawn(move || {
                let s = new_stream((t % 2) as i64, 0).unwrap();
                set_current_stream(&s);
                let e = Event::new(true);
                for _ in 0..500 {
                    let total = total.clone();
                    current_stream((t % 2) as i64)
                        .unwrap()
                        .launch(move || {
                            total.fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    e.record(&s).unwrap();
                }
                e.synchronize();
                // The event completes inside the stream's last task; the stream counts that
                // task as done a moment later, so query() may still say false here.
                s.synchronize().unwrap();
                assert!(s.query());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(total.load(Ordering::SeqCst), 3000);
}
