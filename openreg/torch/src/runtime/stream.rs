//! Streams and events for the device guard. PyTorch names a stream by `(device, id)`; the
//! runtime keeps the stream objects.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use openreg_runtime as rt;

use crate::error::Result;

fn stream(device: i64, id: i64) -> Result<rt::Stream> {
    Ok(rt::stream_by_id(device, id as u64)?)
}

pub(crate) fn current_stream(device: i64) -> Result<i64> {
    Ok(rt::current_stream(device)?.id() as i64)
}

/// Makes `(device, id)` current on its device; returns the previous stream's id.
pub(crate) fn exchange_stream(device: i64, id: i64) -> Result<i64> {
    Ok(rt::set_current_stream(&stream(device, id)?).id() as i64)
}

pub(crate) fn new_stream(device: i64, priority: i32) -> Result<i64> {
    Ok(rt::new_stream(device, priority)?.id() as i64)
}

/// Streams handed out by `getStreamFromGlobalPool`: a few per device and priority, reused
/// round-robin, so asking for a stream never creates threads without bound (as in CUDA).
const POOL_SIZE: usize = 4;

pub(crate) fn stream_from_pool(device: i64, high_priority: bool) -> Result<i64> {
    static POOLS: Mutex<Vec<Vec<rt::Stream>>> = Mutex::new(Vec::new());
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let index = rt::check_device(device)? * 2 + usize::from(high_priority);
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    pools.resize_with(rt::DEVICE_COUNT * 2, Vec::new);
    let pool = &mut pools[index];
    if pool.is_empty() {
        let priority = if high_priority { rt::stream::HIGHEST_PRIORITY } else { rt::stream::LOWEST_PRIORITY };
        for _ in 0..POOL_SIZE {
            pool.push(rt::new_stream(device, priority)?);
        }
    }
    Ok(pool[NEXT.fetch_add(1, Ordering::Relaxed) % POOL_SIZE].id() as i64)
}

pub(crate) fn stream_handle(device: i64, id: i64) -> Result<usize> {
    Ok(stream(device, id)?.handle())
}

pub(crate) fn stream_priority(device: i64, id: i64) -> Result<i32> {
    Ok(stream(device, id)?.priority())
}

pub(crate) fn query_stream(device: i64, id: i64) -> Result<bool> {
    Ok(stream(device, id)?.query())
}

/// True while the stream records a graph (`isStreamCapturing`, `torch.Stream.is_capturing()`).
pub(crate) fn stream_is_capturing(device: i64, id: i64) -> Result<bool> {
    Ok(stream(device, id)?.capture_id().is_some())
}

pub(crate) fn synchronize_stream(device: i64, id: i64) -> Result<()> {
    Ok(stream(device, id)?.synchronize()?)
}

/// An event as C++ holds it (boxed, behind PyTorch's `void*`).
pub struct Event(rt::Event);

pub(crate) fn event_create(timing: bool) -> Box<Event> {
    Box::new(Event(rt::Event::new(timing)))
}

pub(crate) fn event_record(event: &Event, device: i64, id: i64) -> Result<()> {
    Ok(event.0.record(&stream(device, id)?)?)
}

/// Makes the stream wait for the event's latest record (no-op if never recorded).
pub(crate) fn event_block(event: &Event, device: i64, id: i64) -> Result<()> {
    Ok(stream(device, id)?.wait_event(&event.0)?)
}

pub(crate) fn event_query(event: &Event) -> bool {
    event.0.query()
}

/// Waits for the event's latest record; an error during a capture that forbids waiting
/// (a record captured in a graph completes only when the graph is replayed).
pub(crate) fn event_synchronize(event: &Event) -> Result<()> {
    rt::graph::check_not_capturing("event synchronize", None)?;
    event.0.synchronize();
    Ok(())
}

pub(crate) fn event_device(event: &Event) -> i8 {
    event.0.device().map_or(-1, |d| d as i8)
}

pub(crate) fn event_elapsed_time(start: &Event, end: &Event) -> Result<f64> {
    Ok(start.0.elapsed_time(&end.0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_hands_out_a_few_streams_round_robin() {
        let ids: Vec<i64> = (0..2 * POOL_SIZE).map(|_| stream_from_pool(1, true).unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), POOL_SIZE, "{ids:?}");
        assert_eq!(stream_priority(1, ids[0]).unwrap(), rt::stream::HIGHEST_PRIORITY);
        let low = stream_from_pool(1, false).unwrap();
        assert!(!distinct.contains(&low));
        assert_eq!(stream_priority(1, low).unwrap(), rt::stream::LOWEST_PRIORITY);
        assert!(stream_from_pool(5, false).is_err());
    }
}
