//! OCCL's collectives between ranks that are threads of one process (each with a stream of
//! its own); the multi-process tests are in openreg/python/tests/test_distributed.py.

use std::sync::Arc;
use std::time::Duration;

use openreg_runtime::comm::{Buf, Communicator, DataType, Listener, Op, ReduceOp};
use openreg_runtime::{Stream, new_stream};

/// Connects `n` communicators through loopback, one per thread, with shared memory.
fn group(n: usize, timeout: Duration) -> Vec<Arc<Communicator>> {
    group_over(n, timeout, true)
}

fn group_over(n: usize, timeout: Duration, shared_memory: bool) -> Vec<Arc<Communicator>> {
    let listeners: Vec<Listener> = (0..n).map(|_| Listener::bind().unwrap()).collect();
    let addresses: Vec<String> = listeners.iter().map(|l| format!("127.0.0.1:{}", l.port())).collect();
    let threads: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let addresses = addresses.clone();
            std::thread::spawn(move || Communicator::connect(l, rank, n, &addresses, timeout, shared_memory).unwrap())
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn buf(v: &mut [f32]) -> Buf {
    Buf { ptr: v.as_mut_ptr().cast(), len: std::mem::size_of_val(v) }
}

/// Runs `op(rank)` on every rank at once and waits for all.
fn run_all(comms: &[Arc<Communicator>], streams: &[Stream], op: impl Fn(usize) -> Op) -> Vec<Result<(), String>> {
    let works: Vec<_> = comms.iter().zip(streams).enumerate().map(|(r, (c, s))| c.launch(s, op(r)).unwrap()).collect();
    works.iter().map(|w| w.wait(Some(Duration::from_secs(20))).expect("completes")).collect()
}

#[test]
fn all_reduce_small_and_large_on_four_ranks() {
    all_reduce_on_four_ranks(true);
}

#[test]
fn all_reduce_small_and_large_on_four_ranks_over_tcp() {
    all_reduce_on_four_ranks(false);
}

fn all_reduce_on_four_ranks(shared_memory: bool) {
    let comms = group_over(4, Duration::from_secs(20), shared_memory);
    let streams: Vec<Stream> = (0..4).map(|_| new_stream(0, 0).unwrap()).collect();
    for len in [0usize, 1, 7, 100_003] {
        for (op, base, per) in [
            (ReduceOp::Sum, (0..4).map(|r| r as f32 * 10.0).sum::<f32>(), 4.0),
            (ReduceOp::Max, 30.0, 1.0),
            (ReduceOp::Avg, (0..4).map(|r| r as f32 * 10.0).sum::<f32>() / 4.0, 1.0),
        ] {
                        let expect = |i: usize| base + per * (i % 5) as f32;
            let mut data: Vec<Vec<f32>> = (0..4).map(|r| (0..len).map(|i| (r * 10 + i % 5) as f32).collect()).collect();
            let bufs: Vec<Buf> = data.iter_mut().map(|d| buf(d)).collect();
            for outcome in run_all(&comms, &streams, |r| Op::AllReduce { buf: bufs[r], dtype: DataType::Float32, op }) {
                outcome.unwrap();
            }
            for d in &data {
                assert!(d.iter().enumerate().all(|(i, &x)| x == expect(i)), "{op:?} len {len}");
            }
        }
    }
}

#[test]
fn gather_scatter_reduce_scatter_all_to_all_broadcast() {
    let n = 3;
    let comms = group(n, Duration::from_secs(20));
    let streams: Vec<Stream> = (0..n).map(|_| new_stream(1, 0).unwrap()).collect();
    let len = 3 * 1000 + 1; // odd: chunks of unequal sizes inside the ring
    // reduce_scatter: rank i gets block i summed
    let mut inputs: Vec<Vec<f32>> = (0..n).map(|r| (0..n * len).map(|i| (i + r) as f32).collect()).collect();
    let mut outputs = vec![vec![0f32; len]; n];
    let (ib, ob): (Vec<Buf>, Vec<Buf>) = (inputs.iter_mut().map(|v| buf(v)).collect(), outputs.iter_mut().map(|v| buf(v)).collect());
    run_all(&comms, &streams, |r| Op::ReduceScatter { input: ib[r], output: ob[r], dtype: DataType::Float32, op: ReduceOp::Sum })
        .into_iter()
        .for_each(|o| o.unwrap());
    for (r, out) in outputs.iter().enumerate() {
        assert!(out.iter().enumerate().all(|(i, &x)| x == (0..n).map(|q| (r * len + i + q) as f32).sum::<f32>()));
    }
    // broadcast from rank 2, 3 MiB (pieces) and empty
    for size in [3 << 18, 0] {
        let mut data: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32; size]).collect();
        let bufs: Vec<Buf> = data.iter_mut().map(|v| buf(v)).collect();
        run_all(&comms, &streams, |r| Op::Broadcast { buf: bufs[r], dtype: DataType::Float32, root: 2 }).into_iter().for_each(|o| o.unwrap());
        assert!(data.iter().all(|d| d.iter().all(|&x| x == 2.0)));
    }
    // all_to_all with uneven splits: rank r sends (j + 1) elements to rank j
    let mut ins: Vec<Vec<f32>> = (0..n).map(|r| (0..6).map(|i| (r * 100 + i) as f32).collect()).collect();
    let mut outs: Vec<Vec<f32>> = (0..n).map(|r| vec![0.0; n * (r + 1)]).collect();
    let (ib, ob): (Vec<Buf>, Vec<Buf>) = (ins.iter_mut().map(|v| buf(v)).collect(), outs.iter_mut().map(|v| buf(v)).collect());
    run_all(&comms, &streams, |r| Op::AllToAll {
        input: ib[r],
        input_splits: (0..n).map(|j| (j + 1) * 4).collect(),
        output: ob[r],
        output_splits: vec![(r + 1) * 4; n],
        dtype: DataType::Float32,
    })
    .into_iter()
    .for_each(|o| o.unwrap());
    for (r, out) in outs.iter().enumerate() {
        let start = (0..r).map(|j| j + 1).sum::<usize>();
        let expect: Vec<f32> = (0..n).flat_map(|q| (start..start + r + 1).map(move |i| (q * 100 + i) as f32)).collect();
        assert_eq!(out, &expect, "rank {r}");
    }
}

#[test]
fn mismatched_sizes_fail_on_every_rank_and_abort() {
    let comms = group(2, Duration::from_secs(20));
    let streams: Vec<Stream> = (0..2).map(|_| new_stream(0, 0).unwrap()).collect();
    let mut data: Vec<Vec<f32>> = vec![vec![1.0; 10], vec![1.0; 12]];
    let bufs: Vec<Buf> = data.iter_mut().map(|v| buf(v)).collect();
    let outcomes = run_all(&comms, &streams, |r| Op::AllReduce { buf: bufs[r], dtype: DataType::Float32, op: ReduceOp::Sum });
    for o in &outcomes {
        let e = o.as_ref().unwrap_err();
        assert!(e.contains("differ across ranks") || e.contains("aborted"), "{e}");
    }
    // The communicator stays aborted: the next launch fails at once.
    let e = comms[0].launch(&streams[0], Op::Barrier).err().unwrap().to_string();
    assert!(e.contains("aborted by an earlier failure"), "{e}");
}

#[test]
fn a_silent_peer_times_out_and_a_closed_peer_is_named() {
    silent_and_closed_peers(true);
}

#[test]
fn a_silent_peer_times_out_and_a_closed_peer_is_named_over_tcp() {
    silent_and_closed_peers(false);
}

fn silent_and_closed_peers(shared_memory: bool) {
    let comms = group_over(2, Duration::from_millis(500), shared_memory);
    let stream = new_stream(0, 0).unwrap();
    let mut data = vec![1.0f32; 4];
    let work = comms[0].launch(&stream, Op::AllReduce { buf: buf(&mut data), dtype: DataType::Float32, op: ReduceOp::Sum }).unwrap();
    let e = work.wait(Some(Duration::from_secs(10))).unwrap().unwrap_err();
    assert!(e.contains("timed out after 0.5 s") && e.contains("rank 1"), "{e}");

    let comms = group_over(2, Duration::from_secs(20), shared_memory);
    let mut comms = comms.into_iter();
    let (first, second) = (comms.next().unwrap(), comms.next().unwrap());
    drop(second); // rank 1 "exits": its connections close
    let work = first.launch(&stream, Op::AllReduce { buf: buf(&mut data), dtype: DataType::Float32, op: ReduceOp::Sum }).unwrap();
    let e = work.wait(Some(Duration::from_secs(10))).unwrap().unwrap_err();
    assert!(e.contains("rank 1 closed its connection"), "{e}");
}

#[test]
fn bad_arguments_are_refused_at_launch() {
    let comms = group(2, Duration::from_secs(5));
    let stream = new_stream(0, 0).unwrap();
    let mut data = vec![1.0f32; 4];
    let b = buf(&mut data);
    let e = |op| comms[0].launch(&stream, op).err().unwrap().to_string();
    assert!(e(Op::Broadcast { buf: b, dtype: DataType::Float32, root: 5 }).contains("root 5 is out of range for a group of size 2"));
    assert!(e(Op::Send { buf: b, dtype: DataType::Float32, peer: 0 }).contains("cannot exchange messages with itself"));
    assert!(e(Op::AllGather { input: b, output: b, dtype: DataType::Float32 }).contains("expected 2 x 16 bytes"));
    assert!(e(Op::AllReduce { buf: b, dtype: DataType::Bool, op: ReduceOp::Avg }).contains("Avg is not defined for Bool"));
    let e = Communicator::connect(Listener::bind().unwrap(), 3, 2, &[], Duration::from_secs(1), true).err().unwrap().to_string();
    assert!(e.contains("rank 3 is out of range for a world of size 2"), "{e}");
}
