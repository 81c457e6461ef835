//! Counts of the operators that ran on the CPU through the fallback: the kernels to write
//! next. `torch.openreg.fallback_counts()` reads them.

use std::collections::BTreeMap;
use std::sync::Mutex;

static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// Counts one CPU run of `name`; true the first time (the fallback then warns, if asked to).
pub fn record_fallback(name: &str) -> bool {
    // A panic in another thread leaves the map as it was: keep counting, never panic into C++.
    let mut counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let count = counts.entry(name.to_owned()).or_insert(0);
    *count += 1;
    *count == 1
}

/// Every operator that ran on the CPU, with how often.
pub fn fallback_counts() -> Vec<(String, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    counts.iter().map(|(name, n)| (name.clone(), *n)).collect()
}

pub fn reset_fallback_counts() {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
