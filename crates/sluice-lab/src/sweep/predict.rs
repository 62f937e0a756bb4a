//! What RFC 7143 says one command of a point costs in PDUs and how its write data travels,
//! to check the initiator's counters against.

use super::point::{Direction, Point};

/// PDUs and bytes per command.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerCommand {
    /// Data-In PDUs received.
    pub data_in: f64,
    /// Data-Out PDUs sent.
    pub data_out: f64,
    /// R2T PDUs received.
    pub r2t: f64,
    /// SCSI Response PDUs received.
    pub responses: f64,
    /// Write bytes sent as immediate data.
    pub immediate_bytes: f64,
    /// Write bytes sent in unsolicited Data-Out.
    pub unsolicited_bytes: f64,
    /// Write bytes sent in solicited Data-Out.
    pub solicited_bytes: f64,
}

/// PDUs needed for `len` bytes cut into segments of at most `segment`, in sequences of at
/// most `burst` (a segment never crosses a sequence boundary, section 11.7.1/11.8.4).
fn pdus(len: u32, segment: u32, burst: u32) -> u32 {
    let (segment, burst) = (segment.max(1), burst.max(1));
    (len / burst) * burst.div_ceil(segment) + (len % burst).div_ceil(segment)
}

/// What one command of `p` costs when the negotiation gave exactly `p`'s values.
pub fn per_command(p: &Point) -> PerCommand {
    let edtl = p.command_bytes;
    match p.direction {
        // Section 11.7: Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength in
        // sequences of at most MaxBurstLength; a separate SCSI Response unless the status
        // rides in the last Data-In (phase collapse, section 11.7.3).
        Direction::Read => PerCommand {
            data_in: pdus(edtl, p.initiator_mrdsl, p.max_burst).into(),
            responses: if p.phase_collapse { 0.0 } else { 1.0 },
            ..PerCommand::default()
        },
        Direction::Write => {
            // Section 13.11: immediate data up to FirstBurstLength and the target's
            // MaxRecvDataSegmentLength; section 13.10: with InitialR2T=No the unsolicited
            // total (immediate included) is min(FirstBurstLength, EDTL) (section 11.4.7.2).
            let immediate = if p.immediate_data {
                p.first_burst.min(p.target_mrdsl).min(edtl)
            } else {
                0
            };
            let unsolicited_end = if p.initial_r2t {
                immediate
            } else {
                p.first_burst.min(edtl).max(immediate)
            };
            let unsolicited = unsolicited_end - immediate;
            let solicited = edtl - unsolicited_end;
            // Section 11.8.4: each R2T asks for at most MaxBurstLength bytes.
            let r2ts = solicited.div_ceil(p.max_burst);
            let data_out = pdus(unsolicited, p.target_mrdsl, u32::MAX)
                + pdus(solicited, p.target_mrdsl, p.max_burst);
            PerCommand {
                data_out: data_out.into(),
                r2t: r2ts.into(),
                responses: 1.0,
                immediate_bytes: immediate.into(),
                unsolicited_bytes: unsolicited.into(),
                solicited_bytes: solicited.into(),
                ..PerCommand::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_cuts_by_segment_within_bursts() {
        let p = Point {
            command_bytes: 10_000,
            ..Point::default().mrdsl(1024)
        }
        .bursts(4096);
        // Bursts of 4096 bytes = 4 PDUs, twice, then 1808 bytes in 2 PDUs.
        assert_eq!(per_command(&p).data_in, 10.0);
        assert_eq!(per_command(&p).responses, 0.0);
    }

    #[test]
    fn write_with_immediate_and_unsolicited_data() {
        // 512 KiB, MRDSL 8 KiB, FirstBurst 64 KiB, MaxBurst 256 KiB, ImmediateData=Yes,
        // InitialR2T=No: 8 KiB immediate, 56 KiB unsolicited in 7 PDUs, 448 KiB solicited
        // by two R2Ts (256 + 192 KiB) in 56 PDUs.
        let p = Point {
            direction: Direction::Write,
            initial_r2t: false,
            ..Point::default()
        };
        let c = per_command(&p);
        assert_eq!(c.immediate_bytes, 8192.0);
        assert_eq!(c.unsolicited_bytes, 57_344.0);
        assert_eq!(c.solicited_bytes, 458_752.0);
        assert_eq!((c.r2t, c.data_out, c.responses), (2.0, 63.0, 1.0));
    }

    #[test]
    fn write_all_solicited() {
        let p = Point {
            direction: Direction::Write,
            immediate_data: false,
            initial_r2t: true,
            command_bytes: 65_536,
            ..Point::default().mrdsl(512)
        }
        .bursts(512);
        let c = per_command(&p);
        assert_eq!((c.r2t, c.data_out), (128.0, 128.0));
        assert_eq!(c.immediate_bytes + c.unsolicited_bytes, 0.0);
    }
}
