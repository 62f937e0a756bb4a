//! The process metrics Prometheus clients conventionally export (`process_*`), read from
//! `/proc` (proc(5)) at scrape time.

/// What `/proc` says about this process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: usize,
    /// The soft limit on open file descriptors, when there is one.
    pub max_fds: Option<u64>,
    /// Threads.
    pub threads: u64,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// Reads them now; `None` when `/proc` cannot be read (not Linux, or restricted).
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<u64>()
            .ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| parse_max_open_files(&l));
        parse_stat(
            &stat,
            rustix::param::clock_ticks_per_second(),
            rustix::param::page_size() as u64,
            boot_time,
        )
        .map(|mut s| {
            s.open_fds = open_fds;
            s.max_fds = max_fds;
            s
        })
    }
}

/// The fields of `/proc/self/stat` (proc(5)): the command name may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str, ticks: u64, page: u64, boot_time: u64) -> Option<ProcessStats> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let ticks = ticks.max(1) as f64;
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        threads: field(20)?,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)?.saturating_mul(page),
        open_fds: 0,
        max_fds: None,
    })
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let stat = "4242 (sluice (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    7 0 12345 1000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0";
        let s = parse_stat(stat, 100, 4096, 1_700_000_000).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 7);
        assert_eq!(s.start_time_seconds, 1_700_000_000.0 + 123.45);
        assert_eq!(s.virtual_bytes, 1_000_000);
        assert_eq!(s.resident_bytes, 300 * 4096);
        assert_eq!(parse_stat("garbage", 100, 4096, 0), None);
    }

    #[test]
    fn open_file_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        assert_eq!(
            parse_max_open_files("Max open files unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn this_process_reads() {
        let s = ProcessStats::read().expect("/proc is readable");
        assert!(s.threads >= 1 && s.resident_bytes > 0 && s.open_fds > 0);
    }
}
