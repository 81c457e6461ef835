//! The kernels' worker threads. A kernel split into parts runs part 0 on the calling thread
//! and the others on helpers, which poll briefly after each kernel before they sleep: back to
//! back kernels (the common case) then start within a microsecond, where waking a sleeping
//! thread costs tens. OpenMP, under PyTorch's CPU kernels, does the same.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle helper spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

type Part<'a> = &'a (dyn Fn(usize) + Sync);

/// The kernel being run: its parts and the next unclaimed one.
struct Job {
    epoch: u64,
    part: Option<Part<'static>>,
    parts: usize,
    next: usize,
}

struct Pool {
    helpers: usize,
    /// One kernel at a time; a second caller meanwhile runs its parts itself.
    busy: AtomicBool,
    /// Bumped for each kernel; idle helpers watch it.
    epoch: AtomicU64,
    /// Parts are claimed under this lock, so a part of a finished kernel is never claimed.
    job: Mutex<Job>,
    done: AtomicUsize,
    failed: AtomicBool,
    sleeping: Mutex<usize>,
    wake: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1);
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            helpers,
            busy: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            job: Mutex::new(Job { epoch: 0, part: None, parts: 0, next: 0 }),
            done: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            sleeping: Mutex::new(0),
            wake: Condvar::new(),
        }));
        for i in 0..helpers {
            let spawned = std::thread::Builder::new().name(format!("openreg-kernel-{i}")).spawn(move || pool.helper());
            if spawned.is_err() {
                // No helper: `run` still completes every part on the calling thread.
                break;
            }
        }
        pool
    })
}

/// The number of threads a kernel can use.
pub(crate) fn threads() -> usize {
    pool().helpers + 1
}

// ANCHOR: run
/// Runs `part(0)` .. `part(parts - 1)`, spread over the calling thread and the helpers, and
/// returns when all are done. Panics (after all parts ended) if one of them panicked.
pub(crate) fn run(parts: usize, part: impl Fn(usize) + Sync) {
    let pool = pool();
    if parts <= 1 || pool.helpers == 0 || pool.busy.swap(true, Ordering::Acquire) {
        // Alone (the pool is in use elsewhere): the same contract, every part before a panic.
        let failed = (0..parts).fold(false, |failed, p| catch_unwind(AssertUnwindSafe(|| part(p))).is_err() || failed);
        if failed {
            panic!("a kernel part panicked");
        }
        return;
    }
    let part: Part<'_> = &part;
    // SAFETY: parts are claimed under `job`'s lock, and this function clears `job.part` (and
    // so returns, ending `part`'s borrow) only after every claimed part has finished.
    let part: Part<'static> = unsafe { std::mem::transmute(part) };
    pool.done.store(0, Ordering::Release);
    let epoch = pool.epoch.load(Ordering::Acquire) + 1;
    *pool.lock_job() = Job { epoch, part: Some(part), parts, next: 1 };
    pool.epoch.store(epoch, Ordering::Release);
    if *pool.sleeping.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
        pool.wake.notify_all();
    }
    let mine = catch_unwind(AssertUnwindSafe(|| part(0)));
    pool.work(epoch); // parts the helpers have not claimed
    while pool.done.load(Ordering::Acquire) < parts - 1 {
        std::thread::yield_now(); // a helper still on its part may be waiting for a core
    }
    pool.lock_job().part = None;
    let failed = pool.failed.swap(false, Ordering::AcqRel);
    pool.busy.store(false, Ordering::Release);
    if mine.is_err() || failed {
        panic!("a kernel part panicked");
    }
}

/// Part `p`'s share of `items` items split into `parts` parts: a contiguous range, so that
/// two threads never write the same cache line (as every other item's result would: a row's
/// mean beside the next row's) and each reads its memory in order, as prefetchers expect.
pub(crate) fn share(p: usize, parts: usize, items: usize) -> std::ops::Range<usize> {
    p * items / parts..(p + 1) * items / parts
}
// ANCHOR_END: run

impl Pool {
    fn lock_job(&self) -> std::sync::MutexGuard<'_, Job> {
        self.job.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims and runs parts of kernel `epoch` until none is left.
    fn work(&self, epoch: u64) {
        loop {
            let (part, p) = {
                let mut job = self.lock_job();
                match job.part {
                    Some(part) if job.epoch == epoch && job.next < job.parts => {
                        job.next += 1;
                        (part, job.next - 1)
                    }
                    _ => return,
                }
            };
            if catch_unwind(AssertUnwindSafe(|| part(p))).is_err() {
                self.failed.store(true, Ordering::Release);
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn helper(&self) {
        let mut seen = self.epoch.load(Ordering::Acquire);
        loop {
            // Spin for a new kernel, then sleep until one is announced.
            let start = Instant::now();
            while self.epoch.load(Ordering::Acquire) == seen {
                if start.elapsed() > SPIN {
                    let mut sleeping = self.sleeping.lock().unwrap_or_else(|e| e.into_inner());
                    *sleeping += 1;
                    while self.epoch.load(Ordering::Acquire) == seen {
                        sleeping = self.wake.wait(sleeping).unwrap_or_else(|e| e.into_inner());
                    }
                    *sleeping -= 1;
                    break;
                }
                // Yield, not just spin: with more runnable threads than cores (the stream
                // worker, autograd's device thread, Python), a helper that keeps its core
                // delays them; yielding costs this loop a system call per check.
                std::thread::yield_now();
            }
            seen = self.epoch.load(Ordering::Acquire);
            self.work(seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once_from_many_threads() {
        let counts: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        run(64, |p| {
                            counts[p].fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 800));
    }

    #[test]
    fn shares_cover_every_item_once_in_order() {
        for items in 0..40 {
            for parts in 1..6 {
                let all: Vec<usize> = (0..parts).flat_map(|p| share(p, parts, items)).collect();
                assert_eq!(all, (0..items).collect::<Vec<_>>(), "{items} items in {parts} parts");
                let sizes: Vec<usize> = (0..parts).map(|p| share(p, parts, items).len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
            }
        }
    }

    #[test]
    fn a_panicking_part_is_reported_after_all_parts_ran() {
        let ran = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run(8, |p| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(p != 3, "part 3 fails");
            })
        }));
        assert!(result.is_err());
        assert_eq!(ran.load(Ordering::Relaxed), 8);
        run(4, |_| {}); // and the pool still works
    }
}
