//! Capture and replay on the runtime alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use openreg_runtime::{self as rt, CaptureMode};

/// A global capture forbids waiting in every thread: these tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_capture_records_and_each_replay_runs_it_again() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stream = rt::new_stream(0, 0).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let pool = stream.begin_capture(0, CaptureMode::Global).unwrap();
    assert_eq!(stream.capture_pool(), Some(pool));
    for _ in 0..3 {
        let c = count.clone();
        stream.launch(move || _ = c.fetch_add(1, Ordering::SeqCst)).unwrap();
    }
    let graph = stream.end_capture().unwrap();
    assert_eq!((graph.len(), count.load(Ordering::SeqCst)), (3, 0), "recorded, not run");
    for _ in 0..5 {
        graph.replay(stream).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 15);
    assert!(graph.describe().contains("3 tasks"));
}

#[test]
fn waiting_during_a_global_capture_fails_and_invalidates_it() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (capturing, other) = (rt::new_stream(1, 0).unwrap(), rt::new_stream(1, 0).unwrap());
    capturing.begin_capture(0, CaptureMode::Global).unwrap();
    let err = other.synchronize().unwrap_err().to_string();
    assert!(err.contains("operation not permitted when stream is capturing"), "{err}");
    let err = capturing.end_capture().err().unwrap().to_string();
    assert!(err.starts_with("the capture failed"), "{err}");
    other.synchronize().unwrap(); // usable again
}

#[test]
fn misuse_is_an_error() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(rt::default_stream(0).unwrap().begin_capture(0, CaptureMode::Global).is_err());
    let stream = rt::new_stream(0, 0).unwrap();
    assert!(stream.end_capture().is_err());
    stream.begin_capture(7, CaptureMode::Relaxed).unwrap();
    assert!(stream.begin_capture(0, CaptureMode::Relaxed).is_err());
    assert_eq!(stream.end_capture().unwrap().pool(), 7);
}
