//! The time series a traced run keeps, as two CSV files beside the results: the monitor's
//! samples and the PDU log. The figures read them back, so a report can be redrawn.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::monitor::Sample;
use super::pdulog::{PduEvent, PduKind};

/// The files of one run: `traces/EXPERIMENT-CONFIG-RTTms-runN-{samples,pdus}.csv`.
pub fn paths(
    dir: &Path,
    experiment: &str,
    config: &str,
    rtt_ms: f64,
    run: u32,
) -> (PathBuf, PathBuf) {
    let slug: String = config
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let base = format!("{experiment}-{slug}-{rtt_ms}ms-run{run}");
    let d = dir.join("traces");
    (
        d.join(format!("{base}-samples.csv")),
        d.join(format!("{base}-pdus.csv")),
    )
}

const SAMPLE_HEADER: &str = "t_us,cwnd,mss,ssthresh,srtt_us,min_rtt_us,unacked,total_retrans,\
delivery_rate,pacing_rate,snd_wnd,busy_us,rwnd_limited_us,sndbuf_limited_us,acked,queued,unsent,sndbuf";

/// Writes both files (creating the directory).
pub fn write(
    samples_path: &Path,
    pdus_path: &Path,
    samples: &[Sample],
    pdus: &[PduEvent],
) -> std::io::Result<()> {
    if let Some(d) = samples_path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut s = String::with_capacity(samples.len() * 100);
    s.push_str(SAMPLE_HEADER);
    s.push('\n');
    for x in samples {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.t_us,
            x.cwnd,
            x.mss,
            x.ssthresh,
            x.srtt_us,
            x.min_rtt_us,
            x.unacked,
            x.total_retrans,
            x.delivery_rate,
            x.pacing_rate,
            x.snd_wnd,
            x.busy_us,
            x.rwnd_limited_us,
            x.sndbuf_limited_us,
            x.acked,
            x.queued,
            x.unsent,
            x.sndbuf
        );
    }
    std::fs::write(samples_path, s)?;
    let mut p = String::from("t_us,sent,kind,itt,offset,wire_len\n");
    for e in pdus {
        let _ = writeln!(
            p,
            "{},{},{},{},{},{}",
            e.t_us,
            e.sent,
            kind_name(e.kind),
            e.itt,
            e.offset,
            e.wire_len
        );
    }
    std::fs::write(pdus_path, p)
}

fn kind_name(k: PduKind) -> &'static str {
    match k {
        PduKind::Command => "command",
        PduKind::DataOut => "data-out",
        PduKind::R2t => "r2t",
        PduKind::Response => "response",
        PduKind::Other => "other",
    }
}

fn fields<'a>(line: &'a str, n: usize, path: &Path) -> Result<Vec<&'a str>, String> {
    let f: Vec<&str> = line.split(',').collect();
    if f.len() != n {
        return Err(format!(
            "{}: a line of {} fields, not {n}",
            path.display(),
            f.len()
        ));
    }
    Ok(f)
}

fn num<T: std::str::FromStr>(s: &str, path: &Path) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{}: {s:?} is not a number", path.display()))
}

/// Reads both files back.
pub fn read(samples_path: &Path, pdus_path: &Path) -> Result<(Vec<Sample>, Vec<PduEvent>), String> {
    let text = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut samples = Vec::new();
    for line in text(samples_path)?
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
    {
        let f = fields(line, 18, samples_path)?;
        let n = |i: usize| num::<u64>(f[i], samples_path);
        let m = |i: usize| num::<u32>(f[i], samples_path);
        samples.push(Sample {
            t_us: n(0)?,
            cwnd: m(1)?,
            mss: m(2)?,
            ssthresh: m(3)?,
            srtt_us: m(4)?,
            min_rtt_us: m(5)?,
            unacked: m(6)?,
            total_retrans: m(7)?,
            delivery_rate: n(8)?,
            pacing_rate: n(9)?,
            snd_wnd: m(10)?,
            busy_us: n(11)?,
            rwnd_limited_us: n(12)?,
            sndbuf_limited_us: n(13)?,
            acked: n(14)?,
            queued: m(15)?,
            unsent: m(16)?,
            sndbuf: m(17)?,
        });
    }
    let mut pdus = Vec::new();
    for line in text(pdus_path)?.lines().skip(1).filter(|l| !l.is_empty()) {
        let f = fields(line, 6, pdus_path)?;
        let kind = match f[2] {
            "command" => PduKind::Command,
            "data-out" => PduKind::DataOut,
            "r2t" => PduKind::R2t,
            "response" => PduKind::Response,
            _ => PduKind::Other,
        };
        pdus.push(PduEvent {
            t_us: num(f[0], pdus_path)?,
            sent: f[1] == "true",
            kind,
            itt: num(f[3], pdus_path)?,
            offset: num(f[4], pdus_path)?,
            wire_len: num(f[5], pdus_path)?,
        });
    }
    Ok((samples, pdus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (sp, pp) = paths(dir.path(), "fig14", "iSCSI kernel buffers", 20.0, 0);
        assert!(
            sp.ends_with("traces/fig14-iscsi-kernel-buffers-20ms-run0-samples.csv"),
            "{sp:?}"
        );
        let samples = vec![
            Sample {
                t_us: 5,
                cwnd: 10,
                acked: 7,
                sndbuf: 4 << 20,
                ..Sample::default()
            };
            3
        ];
        let pdus = vec![PduEvent {
            t_us: 9,
            sent: true,
            kind: PduKind::DataOut,
            itt: 3,
            offset: 48,
            wire_len: 1000,
        }];
        write(&sp, &pp, &samples, &pdus).unwrap();
        let (s, p) = read(&sp, &pp).unwrap();
        assert_eq!(s, samples);
        assert_eq!(p, pdus);
    }
}
