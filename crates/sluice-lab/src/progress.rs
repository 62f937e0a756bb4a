//! Live counters: each worker owns a cache-line-aligned slot that only it writes, so the hot
//! path never contends; readers sum the slots.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One worker's counters.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Slot {
    ios: AtomicU64,
    bytes: AtomicU64,
    latency_ns: AtomicU64,
    errors: AtomicU64,
}

impl Slot {
    /// A completed command.
    pub(crate) fn done(&self, bytes: u64, latency_ns: u64) {
        // Single writer: load + store is enough and avoids locked instructions.
        let add = |a: &AtomicU64, v: u64| a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
        add(&self.ios, 1);
        add(&self.bytes, bytes);
        add(&self.latency_ns, latency_ns);
    }

    /// A failed command.
    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Live progress of a run, shared between the runner and whoever displays it; also the stop
/// switch.
#[derive(Debug, Default)]
pub struct Progress {
    slots: std::sync::Mutex<Vec<std::sync::Arc<Slot>>>,
    stop: AtomicBool,
    stop_notify: tokio::sync::Notify,
}

/// Totals at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgressSnapshot {
    /// Commands completed.
    pub ios: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Sum of their latencies in nanoseconds.
    pub latency_ns: u64,
    /// Commands failed.
    pub errors: u64,
}

impl Progress {
    /// A new, running progress.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn slot(&self) -> std::sync::Arc<Slot> {
        let s = std::sync::Arc::new(Slot::default());
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s.clone());
        s
    }

    /// Sums every worker's counters.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut t = ProgressSnapshot::default();
        for s in slots.iter() {
            t.ios += s.ios.load(Ordering::Relaxed);
            t.bytes += s.bytes.load(Ordering::Relaxed);
            t.latency_ns += s.latency_ns.load(Ordering::Relaxed);
            t.errors += s.errors.load(Ordering::Relaxed);
        }
        t
    }

    /// Asks the run to stop: workers finish the command they have in flight and return.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stop_notify.notify_waiters();
    }

    /// Completes once [`stop`](Self::stop) has been called (at once if it already was).
    pub async fn wait_stop(&self) {
        let notified = self.stop_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.stopped() {
            return;
        }
        notified.await;
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_slots() {
        let p = Progress::new();
        let (a, b) = (p.slot(), p.slot());
        a.done(4096, 100);
        b.done(8192, 300);
        b.error();
        assert_eq!(
            p.snapshot(),
            ProgressSnapshot {
                ios: 2,
                bytes: 12288,
                latency_ns: 400,
                errors: 1
            }
        );
        assert!(!p.stopped());
        p.stop();
        assert!(p.stopped());
    }

    #[tokio::test]
    async fn wait_stop_wakes_sleepers_and_returns_at_once_after() {
        let p = std::sync::Arc::new(Progress::new());
        let q = std::sync::Arc::clone(&p);
        let waiter = tokio::spawn(async move { q.wait_stop().await });
        tokio::task::yield_now().await;
        p.stop();
        waiter.await.unwrap();
        p.wait_stop().await;
    }
}
