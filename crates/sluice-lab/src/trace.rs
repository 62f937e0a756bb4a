//! SPC trace files (section 4.7.2, "Records of a trace file", of Sajid Hussain, "Performance
//! Evaluation of iSCSI for IP Storage and Transport Protocols", PhD dissertation, University of
//! Manitoba, 2004): one record per line,
//! `ASU,LBA,SIZE,OPCODE,TIMESTAMP[,optional fields...]`, e.g. `0,20941264,8192,W,0.551706`.
//! The LBA counts 512-byte sectors, the size is in bytes, the opcode is `R` or `W` (either
//! case) and the timestamp is seconds since the start of the trace.

use crate::error::LabError;

/// The unit of a trace's LBA field (SPC traces count 512-byte sectors).
pub const TRACE_SECTOR: u64 = 512;

/// One I/O of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    /// Application Specific Unit (0 to n - 1 for n logical units).
    pub asu: u32,
    /// Logical block address, in [`TRACE_SECTOR`] units.
    pub lba: u64,
    /// Bytes transferred.
    pub size: u32,
    /// A write (`W`) rather than a read (`R`).
    pub write: bool,
    /// Seconds since the start of the trace.
    pub time: f64,
}

impl TraceRecord {
    /// The byte address of the record.
    pub fn byte_offset(&self) -> u64 {
        self.lba.saturating_mul(TRACE_SECTOR)
    }
}

/// Parses a trace. Blank lines and lines starting with `#` are skipped; the records come back
/// ordered by timestamp (stable, so ties keep the file's order).
pub fn parse_trace(text: &str) -> Result<Vec<TraceRecord>, LabError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|why| LabError::Trace { line: i + 1, why })?);
    }
    out.sort_by(|a, b| a.time.total_cmp(&b.time));
    Ok(out)
}

fn parse_line(line: &str) -> Result<TraceRecord, String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 5 {
        return Err(format!(
            "{line:?}: expected ASU,LBA,SIZE,OPCODE,TIMESTAMP (got {} fields)",
            f.len()
        ));
    }
    let num = |name: &str, s: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("{name} {s:?} is not a non-negative integer"))
    };
    let asu = u32::try_from(num("ASU", f[0])?).map_err(|_| format!("ASU {} too large", f[0]))?;
    let lba = num("LBA", f[1])?;
    let size = match u32::try_from(num("size", f[2])?) {
        Ok(0) => return Err("size 0".into()),
        Ok(s) => s,
        Err(_) => return Err(format!("size {} too large", f[2])),
    };
    let write = match f[3] {
        "W" | "w" => true,
        "R" | "r" => false,
        op => return Err(format!("opcode {op:?} is neither R nor W")),
    };
    let time: f64 = f[4]
        .parse()
        .map_err(|_| format!("timestamp {:?} is not a number", f[4]))?;
    if !(time.is_finite() && time >= 0.0) {
        return Err(format!("timestamp {time} is negative or not finite"));
    }
    Ok(TraceRecord {
        asu,
        lba,
        size,
        write,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figure 4.9 of Hussain's dissertation (see the module documentation), verbatim.
    const FIGURE_4_9: &str = "\
0,20941264,8192,W,0.551706,Alpha/NT
0,20939840,8192,W,0.554041
0,20939808,8192,W,0.556202
1,3436288,15872,W,1.250720,0x123,5.99,test
1,3435888,512,W,1.609859
1,3435889,512,W,1.634761
0,7695360,4096,R,2.346628
";

    #[test]
    fn parses_the_seed_figure() {
        let t = parse_trace(FIGURE_4_9).unwrap();
        assert_eq!(t.len(), 7);
        assert_eq!(
            t[0],
            TraceRecord {
                asu: 0,
                lba: 20941264,
                size: 8192,
                write: true,
                time: 0.551706
            }
        );
        assert_eq!(t[3].asu, 1);
        assert_eq!(t[3].size, 15872);
        assert!(!t[6].write);
        assert_eq!(t[6].byte_offset(), 7695360 * 512);
    }

    #[test]
    fn sorts_skips_comments_and_accepts_lowercase() {
        let t = parse_trace("# comment\n\n0,1,512,r,2.0\n0,2,512,w,1.0\n0,3,512,R,1.0\n").unwrap();
        assert_eq!(t.iter().map(|r| r.lba).collect::<Vec<_>>(), [2, 3, 1]);
    }

    #[test]
    fn rejects_with_line_numbers() {
        for (text, line) in [
            ("0,1,512,W\n", 1),
            ("0,1,512,W,0.1\n0,1,512,X,0.2\n", 2),
            ("0,1,0,W,0.1\n", 1),
            ("0,-1,512,W,0.1\n", 1),
            ("\n0,1,512,W,abc\n", 2),
            ("0,1,512,W,-1\n", 1),
            ("a,1,512,W,1\n", 1),
        ] {
            match parse_trace(text) {
                Err(LabError::Trace { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
