//! The allocator's settings from `PYTORCH_ALLOC_CONF`, pushed by the C++ hook
//! (`csrc/runtime/DeviceAllocator.cpp`) at registration and whenever the setting changes
//! (`torch._C._accelerator_setAllocatorSettings`).

use std::sync::Mutex;

use crate::error::Result;
use crate::ffi::ffi::AllocatorSettings;

use super::{ALIGNMENT, LARGE_SEGMENT};

// ANCHOR: settings
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// Blocks of this size or more are not split, and serve only requests that fill them
    /// to within `max_non_split_rounding` (`max_split_size_mb`).
    pub max_split_size: usize,
    pub max_non_split_rounding: usize,
    /// Above this fraction of the device's capacity reserved, wholly free segments go back to
    /// the device before a new one is taken (`garbage_collection_threshold`; 0: never).
    pub garbage_collection_threshold: f64,
    /// The segment size of the large pool (`large_segment_size_mb`).
    pub large_segment_size: usize,
    /// Divisions of each power-of-two interval that requests are rounded to, by the interval's
    /// exponent (`roundup_power2_divisions`; 0 or 1: round to 512 bytes only).
    pub divisions: [usize; 64],
    /// Freed small blocks kept unmerged for reuse at the same size (`openreg_parked_blocks`).
    pub parked_blocks: usize,
}
// ANCHOR_END: settings

pub(crate) const DEFAULT: Settings = Settings {
    max_split_size: usize::MAX,
    max_non_split_rounding: 20 << 20,
    garbage_collection_threshold: 0.0,
    large_segment_size: LARGE_SEGMENT,
    divisions: [0; 64],
    parked_blocks: 64,
};

/// The settings caches created from now on start with (the existing ones are updated too).
pub(super) static CURRENT: Mutex<Settings> = Mutex::new(DEFAULT);

pub(crate) fn current() -> Settings {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called by the C++ hook with what c10 parsed and what the hook parsed itself.
pub(crate) fn set_allocator_settings(s: AllocatorSettings) -> Result<()> {
    let mut divisions = [0; 64];
    for (d, &from) in divisions.iter_mut().zip(&s.roundup_power2_divisions) {
        *d = from;
    }
    let settings = Settings {
        max_split_size: s.max_split_size,
        max_non_split_rounding: s.max_non_split_rounding,
        garbage_collection_threshold: s.garbage_collection_threshold,
        large_segment_size: if s.large_segment_size == 0 { LARGE_SEGMENT } else { s.large_segment_size },
        divisions,
        parked_blocks: s.parked_blocks,
    };
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = settings;
    super::apply_settings(settings);
    Ok(())
}

// ANCHOR: round_size
impl Settings {
    /// The block size for a request of `n` bytes: a multiple of 512, or with
    /// `roundup_power2_divisions`, the next of the divisions of its power-of-two interval
    /// (fewer distinct sizes, so freed blocks fit later requests more often).
    pub fn round_size(&self, n: usize) -> usize {
        let n = n.max(1);
        let divisions = self.divisions[n.ilog2() as usize];
        if divisions > 1 && n > ALIGNMENT * divisions {
            let floor = 1usize << n.ilog2();
            if floor == n {
                return n;
            }
            let step = floor >> divisions.ilog2();
            return n.div_ceil(step) * step;
        }
        n.div_ceil(ALIGNMENT) * ALIGNMENT
    }
}
// ANCHOR_END: round_size
