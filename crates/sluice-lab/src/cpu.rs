//! CPU time of this process (getrusage(RUSAGE_SELF)): user and system time over a run.
#![allow(unsafe_code)] // getrusage; see the SAFETY comments

use std::time::Duration;

/// User and system CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel on the process's behalf.
    pub system: Duration,
}

impl CpuTime {
    /// The process's CPU time so far (zeros if getrusage fails, which it does not on Linux).
    pub fn now() -> Self {
        // SAFETY: `rusage` is a C struct of integers (and timevals of integers), for which
        // all-zero bytes are a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `&mut ru` points to a live, writable `rusage` on our stack for the whole
        // call, and getrusage writes nothing but that one struct.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Self::default();
        }
        let d = |tv: libc::timeval| {
            Duration::from_secs(tv.tv_sec.max(0) as u64)
                + Duration::from_micros(tv.tv_usec.max(0) as u64)
        };
        Self {
            user: d(ru.ru_utime),
            system: d(ru.ru_stime),
        }
    }

    /// The time spent since `earlier`.
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    /// User plus system.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// CPU seconds (user + system) another process on this machine has used, from
/// `/proc/PID/stat` (fields 14 and 15, in clock ticks); `None` when it is gone.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces: count fields after its closing ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value; it has no pointer arguments.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_work() {
        let a = CpuTime::now();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = CpuTime::now();
        assert!(b.since(&a).total() > Duration::ZERO, "{x}");
        let own = process_cpu_seconds(std::process::id()).unwrap();
        assert!(own > 0.0);
        assert!(process_cpu_seconds(u32::MAX).is_none());
    }
}
