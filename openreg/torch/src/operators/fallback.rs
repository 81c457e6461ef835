//! Counts of operators that ran on the CPU instead of in an openreg kernel: through the
//! boxed fallback, or through a kernel's host path for a dtype it does not compute in.
//! `torch.openreg.fallback_counts()` shows them; the first of each kind is also a warning.

use std::collections::BTreeMap;
use std::sync::Mutex;

static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// Counts one CPU run of `name`; true the first time (the caller then warns, if it should).
pub(crate) fn record_fallback(name: &str) -> bool {
    let mut counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let count = counts.entry(name.to_owned()).or_insert(0);
    *count += 1;
    *count == 1
}

/// Every operator (and dtype, for host paths) that ran on the CPU, with how often.
pub fn fallback_counts() -> Vec<(String, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

/// Forgets the counts (warnings already given are not repeated).
pub fn reset_fallback_counts() {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
