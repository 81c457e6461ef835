//! A device generator's state, as CUDA keeps it: a seed and a Philox offset
//! (`CUDAGeneratorState`), behind `c10::GeneratorImpl` (`csrc/runtime/Generator.cpp`).
//!
//! A random kernel reserves `increment` numbers per element group when it is launched; eagerly
//! it gets the current `(seed, offset)` and the offset moves on. Inside a graph capture the
//! numbers must change at every replay, so the kernel gets a *slot* instead, which a replay
//! fills with the generator's state at that time (see [`rt::ReplayPrologue`]), plus its own
//! offset within the graph; the generator then advances by the whole graph's increment. A
//! replay draws exactly what eager execution would draw from the same state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use openreg_runtime as rt;

use crate::error::{Failure, Result};
use crate::ffi::ffi::PhiloxDraw;


struct State {
    seed: u64,
    offset: u64,
    /// This generator's share of each capture in progress or kept in a graph, by capture id.
    captures: HashMap<u64, Weak<CaptureSlot>>,
}

// ANCHOR: generator
/// A generator's state, shared by the C++ generator objects that hold it (clones copy it;
/// `graphsafe_set_state` shares it, as CUDA's does).
pub(crate) struct PhiloxGenerator(Arc<Mutex<State>>);

/// What a random kernel computes its numbers from.
#[derive(Clone)]
pub(crate) enum Draw {
    /// Eager: this seed and offset.
    Eager { seed: u64, offset: u64 },
    /// Captured: the replay's seed and offset, read when the kernel runs, plus `intragraph`.
    Graph { slot: Arc<CaptureSlot>, intragraph: u64 },
}

impl Draw {
    /// The seed and offset the kernel uses (on the stream's worker, when it runs).
    pub(crate) fn resolve(&self) -> (u64, u64) {
        match self {
            Draw::Eager { seed, offset } => (*seed, *offset),
            Draw::Graph { slot, intragraph } => {
                (slot.seed.load(Ordering::Acquire), slot.offset.load(Ordering::Acquire) + intragraph)
            }
        }
    }
}
// ANCHOR_END: generator

/// One generator's part in one graph: the total it draws per replay, and the values the
/// latest replay's prologue wrote for its kernels.
pub(crate) struct CaptureSlot {
    generator: Arc<Mutex<State>>,
    increment: AtomicU64,
    seed: AtomicU64,
    offset: AtomicU64,
}

// ANCHOR: replay
impl rt::ReplayPrologue for CaptureSlot {
    fn prologue(self: Arc<Self>) -> Box<dyn FnOnce() + Send + 'static> {
        let (seed, offset) = {
            let mut state = lock(&self.generator);
            let offset = state.offset;
            state.offset += self.increment.load(Ordering::Relaxed);
            (state.seed, offset)
        };
        // Written when the stream reaches it: after the previous replay's kernels read theirs.
        Box::new(move || {
            self.seed.store(seed, Ordering::Release);
            self.offset.store(offset, Ordering::Release);
        })
    }
}
// ANCHOR_END: replay

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl PhiloxGenerator {
    fn with(seed: u64, offset: u64) -> Self {
        PhiloxGenerator(Arc::new(Mutex::new(State { seed, offset, captures: HashMap::new() })))
    }

    /// A generator for calls that are given their numbers (nothing reserves from it).
    pub(crate) fn unused() -> Self {
        Self::with(0, 0)
    }

    // ANCHOR: reserve
    /// Reserves `increment` numbers per element group for one kernel launched on `stream`.
    pub(crate) fn reserve(&self, increment: u64, stream: rt::Stream) -> Result<Draw> {
        let increment = increment.div_ceil(4) * 4; // offsets stay multiples of 4, as CUDA's
        let mut state = lock(&self.0);
        let Some(capture) = stream.capture_id() else {
            let draw = Draw::Eager { seed: state.seed, offset: state.offset };
            state.offset += increment;
            return Ok(draw);
        };
        state.captures.retain(|_, slot| slot.strong_count() > 0);
        let slot = match state.captures.get(&capture).and_then(Weak::upgrade) {
            Some(slot) => slot,
            None => {
                let slot = Arc::new(CaptureSlot {
                    generator: self.0.clone(),
                    increment: AtomicU64::new(0),
                    seed: AtomicU64::new(0),
                    offset: AtomicU64::new(0),
                });
                stream.add_replay_prologue(slot.clone())?;
                state.captures.insert(capture, Arc::downgrade(&slot));
                slot
            }
        };
        let intragraph = slot.increment.fetch_add(increment, Ordering::Relaxed);
        Ok(Draw::Graph { slot, intragraph })
    }
    // ANCHOR_END: reserve
}

pub(crate) fn generator_new(seed: u64) -> Box<PhiloxGenerator> {
    Box::new(PhiloxGenerator::with(seed, 0))
}

/// An independent copy of the state (`Generator.clone()`, `get_state`).
pub(crate) fn generator_clone(generator: &PhiloxGenerator) -> Box<PhiloxGenerator> {
    let state = lock(&generator.0);
    Box::new(PhiloxGenerator::with(state.seed, state.offset))
}

/// The same state, shared (`graphsafe_get_state` / `graphsafe_set_state`).
pub(crate) fn generator_share(generator: &PhiloxGenerator) -> Box<PhiloxGenerator> {
    Box::new(PhiloxGenerator(generator.0.clone()))
}

pub(crate) fn generator_seed(generator: &PhiloxGenerator) -> u64 {
    lock(&generator.0).seed
}

/// A new seed starts the sequence over: offset 0, as CUDA's `set_current_seed`.
pub(crate) fn generator_set_seed(generator: &PhiloxGenerator, seed: u64) {
    let mut state = lock(&generator.0);
    state.seed = seed;
    state.offset = 0;
}

pub(crate) fn generator_offset(generator: &PhiloxGenerator) -> u64 {
    lock(&generator.0).offset
}

pub(crate) fn generator_set_offset(generator: &PhiloxGenerator, offset: u64) -> Result<()> {
    if offset % 4 != 0 {
        return Err(Failure::runtime(format!("offset must be a multiple of 4, got {offset}")));
    }
    lock(&generator.0).offset = offset;
    Ok(())
}

/// Reserves `increment` numbers eagerly, for a kernel that keeps its seed and offset (fused
/// attention draws its dropout mask again in the backward). Not inside a graph capture.
pub(crate) fn generator_reserve(generator: &PhiloxGenerator, increment: u64, device: i64) -> Result<PhiloxDraw> {
    match generator.reserve(increment, rt::current_stream(device)?)? {
        Draw::Eager { seed, offset } => Ok(PhiloxDraw { seed, offset }),
        Draw::Graph { .. } => Err(Failure::runtime(
            "openreg: this operator keeps its random seed and offset for its backward and cannot be \
             captured in a graph"
                .into(),
        )),
    }
}

/// A 64-bit seed for a CPU generator, from a fresh offset (an operator run through the fallback).
pub(crate) fn generator_host_seed(generator: &PhiloxGenerator, device: i64) -> Result<u64> {
    let PhiloxDraw { seed, offset } = generator_reserve(generator, 4, device)?;
    let column = offset / 4;
    let w = crate::operators::kernels::philox::philox_block(seed, column);
    Ok(u64::from(w[0]) << 32 | u64::from(w[1]))
}
