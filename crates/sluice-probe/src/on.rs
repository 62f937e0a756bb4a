//! The probes compiled in: a per-thread stack of open spans, and global totals.
#![allow(unsafe_code)] // RDTSC; see the SAFETY comment

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Role, Stage, StageTotal, Totals};

/// Spans nested deeper than this are not timed (the data path nests three or four).
const MAX_DEPTH: usize = 16;

const STAGES: usize = Stage::ALL.len();

static TICKS: [[AtomicU64; STAGES]; 3] = [const { [const { AtomicU64::new(0) }; STAGES] }; 3];
static SPANS: [[AtomicU64; STAGES]; 3] = [const { [const { AtomicU64::new(0) }; STAGES] }; 3];

thread_local! {
    static ROLE: Cell<Role> = const { Cell::new(Role::Other) };
    /// Open spans: (stage, start, ticks of the spans closed inside it).
    static STACK: RefCell<Vec<(Stage, u64, u64)>> = const { RefCell::new(Vec::new()) };
}

fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a counter and touches no memory; every x86-64 CPU has it.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Without a TSC, nanoseconds since the first probe.
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// An open span; it closes when dropped.
#[derive(Debug)]
pub struct Span {
    timed: bool,
}

/// Opens a span of `stage` on this thread.
#[must_use]
pub fn span(stage: Stage) -> Span {
    let timed = STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= MAX_DEPTH {
            return false;
        }
        s.push((stage, now(), 0));
        true
    });
    Span { timed }
}

impl Span {
    /// Counts the span under `stage` instead (a socket call that found nothing to do).
    pub fn relabel(&mut self, stage: Stage) {
        if !self.timed {
            return;
        }
        STACK.with(|s| {
            if let Some(top) = s.borrow_mut().last_mut() {
                top.0 = stage;
            }
        });
    }
}

impl Span {
    /// Closes the span here rather than at the end of its scope.
    pub fn close(self) {}
}

impl Drop for Span {
    fn drop(&mut self) {
        if !self.timed {
            return;
        }
        let end = now();
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            let Some((stage, start, inner)) = s.pop() else {
                return;
            };
            let total = end.wrapping_sub(start);
            if let Some(parent) = s.last_mut() {
                parent.2 = parent.2.wrapping_add(total);
            }
            let role = ROLE.with(Cell::get) as usize;
            TICKS[role][stage as usize].fetch_add(total.saturating_sub(inner), Ordering::Relaxed);
            SPANS[role][stage as usize].fetch_add(1, Ordering::Relaxed);
        });
    }
}

/// Sets this thread's role.
pub fn set_role(role: Role) {
    ROLE.with(|r| r.set(role));
}

/// The totals so far.
#[must_use]
pub fn snapshot() -> Totals {
    let mut t = Totals::default();
    for r in 0..3 {
        for s in 0..STAGES {
            t.by[r][s] = StageTotal {
                ticks: TICKS[r][s].load(Ordering::Relaxed),
                spans: SPANS[r][s].load(Ordering::Relaxed),
            };
        }
    }
    t
}

/// Zeroes the totals.
pub fn reset() {
    for r in 0..3 {
        for s in 0..STAGES {
            TICKS[r][s].store(0, Ordering::Relaxed);
            SPANS[r][s].store(0, Ordering::Relaxed);
        }
    }
}
