//! Target side of a SCSI read: cutting the read data into Data-In PDUs (RFC 7143 sections
//! 11.7, 4.2.5.1), with phase collapse and residuals (section 11.4.5.1).
//!
//! A target driver, per read command, once the SCSI layer produced `data` and `status`:
//! ```text
//! let mut data_in = DataInSequence::new(cmd.itt, data, cmd.expected_data_transfer_length,
//!                                       status, &params);
//! for pdu in &mut data_in { send(stamp(pdu)) }          // S=1 on the last one if GOOD
//! if data_in.needs_response() { send(stamp(data_in.response(&sense))) }
//! ```
//! The iterator slices the one `Bytes` it was given: no data is copied.

use bytes::Bytes;

use super::{scsi_response, Residual};
use crate::params::SessionParams;
use crate::pdu::codes::ScsiStatus;
use crate::pdu::{DataIn, ScsiResponse};
use crate::seq::{Itt, Lun, Ttt};

/// An iterator over the Data-In PDUs of one read command.
#[derive(Clone, Debug)]
pub struct DataInSequence {
    itt: Itt,
    /// The data actually sent: at most EDTL bytes.
    data: Bytes,
    status: ScsiStatus,
    residual: Residual,
    max_segment_len: u32,
    max_burst_len: u32,
    /// Offset of the next PDU.
    offset: u32,
    /// Bytes already sent in the current sequence (burst).
    burst_sent: u32,
    next_data_sn: u32,
    /// Whether GOOD status may ride in the last Data-In (phase collapse). Not after an R-Data
    /// SNACK, whose answer ends with a SCSI Response carrying its SNACK Tag (section 11.16.3).
    collapse: bool,
    /// Positive acknowledgement requested with the A bit (ErrorRecoveryLevel 1 and above).
    ack: Option<AckRequests>,
}

/// When the target sets the A bit (RFC 7143 section 11.7.2): "it MAY only set the A bit to 1
/// once every MaxBurstLength bytes, or on the last Data-In PDU that concludes the entire
/// requested read data transfer ... and it MUST NOT do so more frequently".
#[derive(Clone, Copy, Debug)]
struct AckRequests {
    /// At most once per this many PDUs (the configured DataACK interval) ...
    every_pdus: u32,
    /// ... and never before MaxBurstLength bytes went out since the last one.
    ttt: Ttt,
    lun: Lun,
    pdus_since: u32,
    bytes_since: u32,
}

impl DataInSequence {
    /// Plans the Data-In PDUs for `data` (what the SCSI layer produced) against the command's
    /// `edtl`, ending with SCSI `status`.
    ///
    /// Section 11.4.5.1: data shorter than EDTL is an underflow (residual EDTL - len); data
    /// longer is an overflow (residual len - EDTL) and only EDTL bytes are sent.
    pub fn new(
        itt: Itt,
        data: Bytes,
        edtl: u32,
        status: ScsiStatus,
        params: &SessionParams,
    ) -> Self {
        let produced = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let residual = Residual::from_lengths(edtl, produced);
        let sent = produced.min(edtl) as usize;
        Self {
            itt,
            data: data.slice(..sent),
            status,
            residual,
            // Section 13.12: the initiator's MaxRecvDataSegmentLength bounds each Data-In.
            max_segment_len: params.initiator_max_recv_data_segment_length.max(1),
            // Section 13.13: MaxBurstLength bounds each Data-In sequence.
            max_burst_len: params.max_burst_length.max(1),
            offset: 0,
            burst_sent: 0,
            next_data_sn: 0,
            collapse: true,
            ack: None,
        }
    }

    /// Asks the initiator for a DataACK (the A bit, section 11.7.2) at most once every
    /// `every_pdus` Data-In PDUs and never more often than once per MaxBurstLength bytes; the
    /// A-bit PDUs carry `ttt` and `lun`, which the DataACK SNACK copies (section 11.7.4).
    #[must_use]
    pub fn with_data_ack(mut self, every_pdus: u32, ttt: Ttt, lun: Lun) -> Self {
        self.ack = Some(AckRequests {
            every_pdus: every_pdus.max(1),
            ttt,
            lun,
            pdus_since: 0,
            bytes_since: 0,
        });
        self
    }

    /// Sends the status in a separate SCSI Response even when it is GOOD (no phase collapse,
    /// RFC 7143 section 11.7.3: the S bit "MAY" be set, so it is the target's choice).
    #[must_use]
    pub fn without_phase_collapse(mut self) -> Self {
        self.collapse = false;
        self
    }

    /// The TTT the A-bit PDUs carry, when acknowledgements are requested.
    pub fn ack_ttt(&self) -> Option<Ttt> {
        self.ack.map(|a| a.ttt)
    }

    /// The same read sent again from DataSN `data_sn` of this (unstarted) sequence, cut to the
    /// initiator's current MaxRecvDataSegmentLength in `params` (resegmentation, section
    /// 11.16.3: "Their DataSN starts with the BegRun of the last DataACK received by the
    /// target if any was received; otherwise, it starts with 0"). The status goes in a SCSI
    /// Response, not in the last Data-In, and no acknowledgement is requested. `None` when
    /// `data_sn` is past the last PDU.
    pub fn resume(&self, data_sn: u32, params: &SessionParams) -> Option<Self> {
        let offset = self.offset_of(data_sn)?;
        let mut next = self.clone();
        next.max_segment_len = params.initiator_max_recv_data_segment_length.max(1);
        next.offset = offset;
        // Sequences keep their MaxBurstLength boundaries from offset 0.
        next.burst_sent = offset % self.max_burst_len;
        next.next_data_sn = data_sn;
        next.collapse = false;
        next.ack = None;
        Some(next)
    }

    /// Buffer Offset of the PDU with `data_sn` in this sequence as cut from its start;
    /// `Some(len)` for the DataSN just after the last.
    fn offset_of(&self, data_sn: u32) -> Option<u32> {
        let mut plan = self.clone();
        plan.offset = 0;
        plan.burst_sent = 0;
        plan.next_data_sn = 0;
        plan.ack = None;
        while plan.next_data_sn < data_sn {
            plan.next()?;
        }
        Some(plan.offset)
    }

    /// The PDUs DataSN `from` to `to` (exclusive) of this (unstarted) sequence, exactly as
    /// first sent (a Data SNACK, section 11.16: "exact replicas").
    pub fn replay(&self, from: u32, to: u32) -> impl Iterator<Item = DataIn> {
        let mut plan = self.clone();
        plan.offset = 0;
        plan.burst_sent = 0;
        plan.next_data_sn = 0;
        if let Some(a) = plan.ack.as_mut() {
            a.pdus_since = 0;
            a.bytes_since = 0;
        }
        plan.skip_while(move |p| p.data_sn < from)
            .take_while(move |p| p.data_sn < to)
    }

    /// Whether the status goes in the last Data-In (phase collapse, S bit, section 11.7.3).
    ///
    /// Only GOOD status may travel in a Data-In (no sense data can), and only if there is at
    /// least one Data-In to carry it.
    pub fn collapses_status(&self) -> bool {
        self.collapse && self.status == ScsiStatus::Good && !self.data.is_empty()
    }

    /// Whether a separate SCSI Response must follow the Data-In PDUs.
    pub fn needs_response(&self) -> bool {
        !self.collapses_status()
    }

    /// The SCSI Response to send after the Data-In PDUs when [`Self::needs_response`]:
    /// ExpDataSN counts the Data-In PDUs (section 11.4.8). Call it after the iterator is done.
    pub fn response(&self, sense: &[u8]) -> ScsiResponse {
        scsi_response(
            self.itt,
            self.status,
            self.residual,
            self.next_data_sn,
            sense,
        )
    }

    /// Bytes of data the sequence carries (at most the EDTL).
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// The residual reported to the initiator.
    pub fn residual(&self) -> Residual {
        self.residual
    }

    /// Number of Data-In PDUs yielded so far.
    pub fn data_in_count(&self) -> u32 {
        self.next_data_sn
    }

    /// Number of Data-In PDUs the whole command takes.
    pub fn total_pdus(&self) -> u32 {
        let len = self.data.len() as u32;
        let full = len / self.max_burst_len;
        let tail = len % self.max_burst_len;
        full * self.max_burst_len.div_ceil(self.max_segment_len)
            + tail.div_ceil(self.max_segment_len)
    }
}

impl Iterator for DataInSequence {
    type Item = DataIn;

    fn next(&mut self) -> Option<DataIn> {
        let total = self.data.len() as u32;
        if self.offset >= total {
            return None;
        }
        let burst_left = self.max_burst_len - self.burst_sent;
        let len = (total - self.offset)
            .min(self.max_segment_len)
            .min(burst_left);
        let start = self.offset as usize;
        let chunk = self.data.slice(start..start + len as usize);
        let last = self.offset + len == total;
        // Section 11.7.1: F is set on the last PDU of each sequence.
        let final_bit = last || len == burst_left;
        let status_present = last && self.collapses_status();
        // Section 11.7.2: the A bit at most once per MaxBurstLength bytes (and the configured
        // number of PDUs), or on the PDU that concludes the read.
        let max_burst = self.max_burst_len;
        let ack = self.ack.as_mut().is_some_and(|a| {
            a.pdus_since += 1;
            a.bytes_since = a.bytes_since.saturating_add(len);
            let due = a.pdus_since >= a.every_pdus && (a.bytes_since >= max_burst || last);
            if due {
                a.pdus_since = 0;
                a.bytes_since = 0;
            }
            due
        });
        let (lun, ttt) = match self.ack {
            Some(a) if ack => (a.lun, a.ttt),
            _ => (Lun::default(), Ttt::RESERVED),
        };
        let (overflow, underflow, residual) = if status_present {
            self.residual.to_flags()
        } else {
            (false, false, 0)
        };
        let pdu = DataIn {
            final_bit,
            ack,
            overflow,
            underflow,
            status_present,
            // Without S the status field is reserved: zero, the code of GOOD.
            status: if status_present {
                self.status
            } else {
                ScsiStatus::Good
            },
            // Section 11.7.4: LUN and TTT are reserved unless the A bit is set.
            lun,
            itt: self.itt,
            ttt,
            stat_sn: Default::default(),
            exp_cmd_sn: Default::default(),
            max_cmd_sn: Default::default(),
            // Section 11.7.5: DataSN counts the Data-In PDUs of the command from 0.
            data_sn: self.next_data_sn,
            buffer_offset: self.offset,
            residual,
            data: chunk,
        };
        self.offset += len;
        self.burst_sent = if final_bit { 0 } else { self.burst_sent + len };
        self.next_data_sn += 1;
        Some(pdu)
    }
}

/// Reorders the Data-In PDUs of one read as DataPDUInOrder=No and DataSequenceInOrder=No
/// allow (RFC 7143 sections 13.18, 13.19): with sequences out of order the last sequence goes
/// first, with PDUs out of order each sequence's PDUs go last to first. DataSN is renumbered
/// in sending order (section 11.7.5: it counts the PDUs as sent), F marks the last PDU sent of
/// each sequence (section 11.7.1) and the status, if any, moves to the last PDU sent (section
/// 11.7.3). `pdus` are one read's PDUs as [`DataInSequence`] cut them, in order, without the
/// A bit (acknowledgement needs ErrorRecoveryLevel 1, whose SNACKs the target answers from
/// the in-order plan, so reordering is for level 0 only).
pub fn reorder(pdus: Vec<DataIn>, pdu_in_order: bool, sequence_in_order: bool) -> Vec<DataIn> {
    if (pdu_in_order && sequence_in_order) || pdus.len() < 2 {
        return pdus;
    }
    let status = pdus.last().map(|p| {
        (
            p.status_present,
            p.status,
            p.overflow,
            p.underflow,
            p.residual,
        )
    });
    let mut sequences: Vec<Vec<DataIn>> = Vec::new();
    let mut current = Vec::new();
    for p in pdus {
        let end = p.final_bit;
        current.push(p);
        if end {
            sequences.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        sequences.push(current);
    }
    if !sequence_in_order {
        sequences.reverse();
    }
    let mut out = Vec::new();
    for mut seq in sequences {
        if !pdu_in_order {
            seq.reverse();
        }
        let n = seq.len();
        for (i, mut p) in seq.into_iter().enumerate() {
            p.final_bit = i + 1 == n;
            p.status_present = false;
            p.status = ScsiStatus::Good;
            p.overflow = false;
            p.underflow = false;
            p.residual = 0;
            p.data_sn = out.len() as u32;
            out.push(p);
        }
    }
    if let (Some(last), Some((present, status, over, under, residual))) = (out.last_mut(), status) {
        last.status_present = present;
        last.status = status;
        last.overflow = over;
        last.underflow = under;
        last.residual = residual;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mrdsl: u32, mbl: u32) -> SessionParams {
        SessionParams {
            initiator_max_recv_data_segment_length: mrdsl,
            max_burst_length: mbl,
            ..SessionParams::default()
        }
    }

    fn data(len: usize) -> Bytes {
        (0..len).map(|i| i as u8).collect::<Vec<u8>>().into()
    }

    #[test]
    fn segments_by_mrdsl_and_bursts_by_max_burst_length() {
        let mut seq = DataInSequence::new(
            Itt(7),
            data(10_000),
            10_000,
            ScsiStatus::Good,
            &params(1024, 4096),
        );
        assert_eq!(seq.total_pdus(), 10);
        let pdus: Vec<DataIn> = seq.by_ref().collect();
        assert_eq!(pdus.len(), 10);
        let finals: Vec<u32> = pdus
            .iter()
            .filter(|p| p.final_bit)
            .map(|p| p.data_sn)
            .collect();
        // Bursts of 4096 bytes = 4 PDUs each, then 1808 bytes in 2 PDUs.
        assert_eq!(finals, vec![3, 7, 9]);
        assert_eq!(pdus[4].buffer_offset, 4096);
        assert_eq!(pdus[9].data.len(), 784);
        assert!(pdus.iter().enumerate().all(|(i, p)| p.data_sn == i as u32));
        let last = &pdus[9];
        assert!(last.status_present && !last.underflow && last.status == ScsiStatus::Good);
        assert!(pdus[..9].iter().all(|p| !p.status_present));
        assert!(!seq.needs_response());
        assert_eq!(seq.data_in_count(), 10);
    }

    #[test]
    fn reorder_reverses_sequences_and_pdus_and_moves_the_status() {
        let cut = |pdu, seq| {
            let seq_pdus: Vec<DataIn> = DataInSequence::new(
                Itt(7),
                data(8192),
                8192,
                ScsiStatus::Good,
                &params(1024, 4096),
            )
            .collect();
            reorder(seq_pdus, pdu, seq)
        };
        let offsets = |v: &[DataIn]| v.iter().map(|p| p.buffer_offset).collect::<Vec<u32>>();
        assert_eq!(
            offsets(&cut(true, true)),
            vec![0, 1024, 2048, 3072, 4096, 5120, 6144, 7168]
        );
        let pdus = cut(false, true);
        assert_eq!(
            offsets(&pdus),
            vec![3072, 2048, 1024, 0, 7168, 6144, 5120, 4096]
        );
        let seqs = cut(true, false);
        assert_eq!(
            offsets(&seqs),
            vec![4096, 5120, 6144, 7168, 0, 1024, 2048, 3072]
        );
        for v in [pdus, seqs, cut(false, false)] {
            assert!(v.iter().enumerate().all(|(i, p)| p.data_sn == i as u32));
            let finals: Vec<usize> = (0..v.len()).filter(|&i| v[i].final_bit).collect();
            assert_eq!(finals, vec![3, 7]);
            assert!(v[7].status_present && v[..7].iter().all(|p| !p.status_present));
            // Every byte exactly once.
            let mut covered = offsets(&v);
            covered.sort_unstable();
            assert_eq!(covered, (0..8).map(|i| i * 1024).collect::<Vec<u32>>());
        }
    }

    #[test]
    fn without_phase_collapse_good_status_goes_in_a_response() {
        let mut seq = DataInSequence::new(
            Itt(7),
            data(4096),
            4096,
            ScsiStatus::Good,
            &params(1024, 4096),
        )
        .without_phase_collapse();
        let pdus: Vec<DataIn> = seq.by_ref().collect();
        assert_eq!(pdus.len(), 4);
        assert!(pdus.iter().all(|p| !p.status_present));
        assert!(seq.needs_response());
        let rsp = seq.response(&[]);
        assert_eq!(rsp.status, ScsiStatus::Good);
        assert_eq!(rsp.exp_data_sn, 4);
    }

    #[test]
    fn burst_boundary_inside_a_segment_shortens_the_pdu() {
        let seq = DataInSequence::new(
            Itt(1),
            data(3000),
            3000,
            ScsiStatus::Good,
            &params(1000, 1500),
        );
        let lens: Vec<(usize, bool)> = seq.map(|p| (p.data.len(), p.final_bit)).collect();
        assert_eq!(
            lens,
            vec![(1000, false), (500, true), (1000, false), (500, true)]
        );
    }

    #[test]
    fn short_data_is_an_underflow_in_the_last_data_in() {
        let seq = DataInSequence::new(
            Itt(1),
            data(1000),
            4096,
            ScsiStatus::Good,
            &params(8192, 8192),
        );
        let pdus: Vec<DataIn> = seq.collect();
        assert_eq!(pdus.len(), 1);
        assert!(pdus[0].underflow && pdus[0].residual == 3096 && pdus[0].status_present);
    }

    #[test]
    fn long_data_is_an_overflow_and_only_edtl_is_sent() {
        let seq = DataInSequence::new(
            Itt(1),
            data(5000),
            4096,
            ScsiStatus::Good,
            &params(8192, 8192),
        );
        let pdus: Vec<DataIn> = seq.collect();
        assert_eq!(pdus[0].data.len(), 4096);
        assert!(pdus[0].overflow && pdus[0].residual == 904);
    }

    #[test]
    fn check_condition_needs_a_response_with_exp_data_sn() {
        let mut seq = DataInSequence::new(
            Itt(1),
            data(3000),
            3000,
            ScsiStatus::CheckCondition,
            &params(1024, 8192),
        );
        assert!(seq.by_ref().all(|p| !p.status_present));
        assert!(seq.needs_response());
        let rsp = seq.response(&[0x70]);
        assert_eq!(rsp.exp_data_sn, 3);
        assert_eq!(rsp.status, ScsiStatus::CheckCondition);
    }

    #[test]
    fn no_data_means_no_data_in_and_a_response() {
        let mut seq = DataInSequence::new(
            Itt(1),
            Bytes::new(),
            512,
            ScsiStatus::Good,
            &params(1024, 8192),
        );
        assert!(seq.next().is_none());
        assert!(seq.needs_response());
        let rsp = seq.response(&[]);
        assert!(rsp.underflow && rsp.residual == 512 && rsp.exp_data_sn == 0);
    }

    #[test]
    fn a_bit_once_per_interval_and_never_more_often_than_max_burst_length() {
        // Four PDUs per burst: the dissertation's "DataACK every 4 Data-In PDUs".
        let p = params(1024, 4096);
        let seq = DataInSequence::new(Itt(1), data(17 * 1024), 17 * 1024, ScsiStatus::Good, &p)
            .with_data_ack(4, Ttt(77), Lun(5));
        let acks: Vec<u32> = seq.clone().filter(|d| d.ack).map(|d| d.data_sn).collect();
        assert_eq!(acks, vec![3, 7, 11, 15]);
        assert!(seq
            .clone()
            .filter(|d| d.ack)
            .all(|d| d.ttt == Ttt(77) && d.lun == Lun(5)));
        assert!(seq.filter(|d| !d.ack).all(|d| d.ttt == Ttt::RESERVED));
        // Asked for every PDU, the A bit still waits for MaxBurstLength bytes.
        let every = DataInSequence::new(Itt(1), data(8192), 8192, ScsiStatus::Good, &p)
            .with_data_ack(1, Ttt(1), Lun(0));
        let acks: Vec<u32> = every.filter(|d| d.ack).map(|d| d.data_sn).collect();
        assert_eq!(acks, vec![3, 7]);
    }

    #[test]
    fn replay_gives_exact_replicas_and_resume_resegments() {
        let p = params(1024, 4096);
        let seq = DataInSequence::new(Itt(3), data(10_000), 10_000, ScsiStatus::Good, &p)
            .with_data_ack(4, Ttt(9), Lun(0));
        let sent: Vec<DataIn> = seq.clone().collect();
        let again: Vec<DataIn> = seq.replay(4, 7).collect();
        assert_eq!(again, sent[4..7].to_vec());
        // The initiator now takes 3000-byte segments: from DataSN 4 (offset 4096) on, cut
        // anew, DataSN counting on from 4, status left for a SCSI Response.
        let mut resumed = seq.resume(4, &params(3000, 4096)).expect("DataSN 4 exists");
        let pdus: Vec<DataIn> = resumed.by_ref().collect();
        let shape: Vec<(u32, u32, usize, bool)> = pdus
            .iter()
            .map(|d| (d.data_sn, d.buffer_offset, d.data.len(), d.final_bit))
            .collect();
        assert_eq!(
            shape,
            vec![
                (4, 4096, 3000, false),
                (5, 7096, 1096, true),
                (6, 8192, 1808, true)
            ]
        );
        assert!(pdus.iter().all(|d| !d.status_present && !d.ack));
        assert!(resumed.needs_response());
        assert_eq!(resumed.response(&[]).exp_data_sn, 7);
        assert_eq!(&pdus[0].data[..], &data(10_000)[4096..7096]);
        assert!(seq.resume(11, &p).is_none());
        assert!(
            seq.resume(10, &p).is_some(),
            "just past the end: nothing left to send"
        );
    }

    #[test]
    fn slices_share_the_buffer() {
        let source = data(4096);
        let seq = DataInSequence::new(
            Itt(1),
            source.clone(),
            4096,
            ScsiStatus::Good,
            &params(1024, 8192),
        );
        for pdu in seq {
            let at = pdu.buffer_offset as usize;
            assert_eq!(pdu.data.as_ptr(), source[at..].as_ptr());
        }
    }
}
