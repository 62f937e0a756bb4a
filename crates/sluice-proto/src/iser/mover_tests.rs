//! Both datamovers against each other, with a fake protection domain: what each PDU becomes
//! and that the bytes land where the buffers were advertised.

use std::collections::HashMap;

use bytes::Bytes;

use super::{
    BufferAdvertisement, InitiatorDatamover, InitiatorOut, IserHeader, MoverError, Regions,
    TargetDatamover, TargetOp,
};
use crate::iser::encode_send;
use crate::pdu::codes::ScsiStatus;
use crate::pdu::{Cdb, DataIn, DataOut, Pdu, R2t, ScsiCommand, TaskAttr};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Regions at made-up base addresses, as a provider without zero-based addressing has them.
/// A gathered region keeps its chunks as they were handed over, so that a test can tell
/// they are the core's own buffers.
#[derive(Default)]
struct FakeRegions {
    next: u32,
    regions: HashMap<u32, (u64, Vec<u8>, bool)>,
    gathered: HashMap<u32, Vec<Bytes>>,
}

impl FakeRegions {
    fn insert(&mut self, bytes: Vec<u8>, remote_write: bool) -> BufferAdvertisement {
        self.next += 1;
        let base = 0x1000_0000 * u64::from(self.next);
        self.regions.insert(self.next, (base, bytes, remote_write));
        BufferAdvertisement {
            stag: self.next,
            base_offset: base,
        }
    }
}

impl Regions for FakeRegions {
    fn register(&mut self, len: u32) -> Result<BufferAdvertisement, String> {
        Ok(self.insert(vec![0; len as usize], true))
    }
    fn register_gathered(&mut self, chunks: Vec<Bytes>) -> Result<BufferAdvertisement, String> {
        let adv = self.insert(chunks.concat(), false);
        self.gathered.insert(adv.stag, chunks);
        Ok(adv)
    }
    fn contents(&mut self, buf: BufferAdvertisement, len: u32) -> Result<Bytes, String> {
        let (base, bytes, _) = self.regions.get(&buf.stag).ok_or("stag")?;
        let at = (buf.base_offset - *base) as usize;
        Ok(Bytes::copy_from_slice(&bytes[at..at + len as usize]))
    }
    fn release(&mut self, buf: BufferAdvertisement) {
        self.regions.remove(&buf.stag);
        self.gathered.remove(&buf.stag);
    }
}

impl FakeRegions {
    /// What the peer's RDMA Write does: checked against the region.
    fn remote_write(&mut self, stag: u32, va: u64, data: &[u8]) -> Result<(), &'static str> {
        let (base, bytes, remote_write) = self.regions.get_mut(&stag).ok_or("stag")?;
        if !*remote_write {
            return Err("right");
        }
        let at = va.checked_sub(*base).ok_or("bounds")? as usize;
        bytes
            .get_mut(at..at + data.len())
            .ok_or("bounds")?
            .copy_from_slice(data);
        Ok(())
    }

    fn remote_read(&self, stag: u32, va: u64, len: u32) -> Bytes {
        let (base, bytes, _) = &self.regions[&stag];
        let at = (va - base) as usize;
        Bytes::copy_from_slice(&bytes[at..at + len as usize])
    }
}

fn command(itt: u32, read: bool, edtl: u32, data: Bytes) -> ScsiCommand {
    ScsiCommand {
        immediate: false,
        final_bit: true,
        read,
        write: !read,
        attr: TaskAttr::Simple,
        lun: Lun(0),
        itt: Itt(itt),
        expected_data_transfer_length: edtl,
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        cdb: Cdb::new(&[0x88; 16]),
        bidi_read_length: None,
        data,
    }
}

fn pattern(len: usize) -> Bytes {
    (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into()
}

/// The Send bytes of the initiator's output.
fn sends(out: &mut InitiatorOut) -> Vec<(IserHeader, Vec<u8>)> {
    out.sends
        .drain(..)
        .map(|(h, pdu)| {
            let mut buf = bytes::BytesMut::new();
            encode_send(&h, &pdu, &mut buf);
            (h, buf.to_vec())
        })
        .collect()
}

#[test]
fn a_read_is_placed_by_rdma_write_and_handed_to_the_core_as_data_in() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 262_144, 65536);
    let mut tgt = TargetDatamover::new(16384, 65536, true, 65536);
    let mut out = InitiatorOut::default();
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(7, true, 10_000, Bytes::new())),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let adv = sent[0].0.read.expect("RSV");
    assert!(sent[0].0.write.is_none());
    assert!(matches!(
        tgt.handle_send(&sent[0].1).unwrap(),
        Pdu::ScsiCommand(_)
    ));

    // The target's core answers with two Data-In, status in the last.
    let data = pattern(10_000);
    let mut ops = Vec::new();
    for (i, (start, end)) in [(0usize, 6000usize), (6000, 10_000)]
        .into_iter()
        .enumerate()
    {
        let last = i == 1;
        tgt.handle_core_pdu(
            Pdu::DataIn(DataIn {
                final_bit: last,
                ack: false,
                overflow: false,
                underflow: false,
                status_present: last,
                status: ScsiStatus::Good,
                lun: Lun(0),
                itt: Itt(7),
                ttt: Ttt::RESERVED,
                stat_sn: SeqNum::new(5),
                exp_cmd_sn: SeqNum::new(2),
                max_cmd_sn: SeqNum::new(9),
                data_sn: i as u32,
                buffer_offset: start as u32,
                residual: 0,
                data: data.slice(start..end),
            }),
            &mut ops,
        )
        .unwrap();
    }
    // Two RDMA Writes at the advertised base plus each buffer offset, then the status in a
    // SCSI Response Send that invalidates the read buffer's STag.
    assert_eq!(ops.len(), 3, "{ops:?}");
    let mut response = None;
    for op in ops {
        match op {
            TargetOp::Write { stag, va, data } => {
                assert_eq!(stag, adv.stag);
                regions.remote_write(stag, va, &data).unwrap();
            }
            TargetOp::Send {
                header,
                pdu,
                invalidate,
            } => {
                assert_eq!(invalidate, Some(adv.stag));
                let Pdu::ScsiResponse(r) = &pdu else {
                    panic!("{pdu:?}")
                };
                assert_eq!((r.stat_sn, r.status), (SeqNum::new(5), ScsiStatus::Good));
                let mut buf = bytes::BytesMut::new();
                encode_send(&header, &pdu, &mut buf);
                response = Some(buf);
            }
            TargetOp::Read { .. } => panic!("no RDMA Read for a read"),
        }
    }
    assert_eq!(tgt.stats.rdma_writes, 2);
    ini.handle_send(&response.unwrap(), &mut regions, &mut out)
        .unwrap();
    // The core gets the whole read in one Data-In (the buffer the target placed it in, for
    // the core to complete the read with as it is), then the response, whose ExpDataSN
    // counts that one Data-In rather than the target's two.
    let got: Vec<Pdu> = out.to_core.drain(..).collect();
    let [Pdu::DataIn(d), Pdu::ScsiResponse(r)] = &got[..] else {
        panic!("{got:?}")
    };
    assert_eq!((d.buffer_offset, d.data_sn, d.final_bit), (0, 0, true));
    assert!(!d.status_present);
    assert_eq!(d.data, data);
    assert_eq!(r.exp_data_sn, 1);
    assert!(regions.regions.is_empty(), "the read buffer was released");
}

#[test]
fn a_write_beyond_its_immediate_data_is_fetched_by_rdma_read() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, 65536);
    let mut tgt = TargetDatamover::new(16384, 4096, false, 65536);
    let mut out = InitiatorOut::default();
    let data = pattern(20_000);
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(9, false, 20_000, data.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    // The command is held; the core is asked for the rest, a MaxBurstLength at a time.
    let mut offset = 4096u32;
    while let Some(Pdu::R2t(r2t)) = out.to_core.pop() {
        assert!(
            out.sends.is_empty(),
            "command sent before its buffer is full"
        );
        assert_eq!(r2t.buffer_offset, offset);
        let len = r2t.desired_data_transfer_length;
        assert!(len <= 8192);
        ini.handle_core_pdu(
            Pdu::DataOut(DataOut {
                final_bit: true,
                lun: Lun(0),
                itt: r2t.itt,
                ttt: r2t.ttt,
                exp_stat_sn: SeqNum::new(1),
                data_sn: 0,
                buffer_offset: offset,
                data: data.slice(offset as usize..(offset + len) as usize),
            }),
            &mut regions,
            &mut out,
        )
        .unwrap();
        offset += len;
    }
    assert_eq!(offset, 20_000);
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let adv = sent[0].0.write.expect("WSV");
    let Pdu::ScsiCommand(cmd) = tgt.handle_send(&sent[0].1).unwrap() else {
        panic!()
    };
    assert_eq!(cmd.data.len(), 4096, "immediate data travels in the Send");
    // The target's core asks for the rest; the datamover reads it and answers with Data-Out
    // of at most the core's 4096 bytes.
    let mut ops = Vec::new();
    tgt.handle_core_pdu(
        Pdu::R2t(R2t {
            lun: Lun(0),
            itt: Itt(9),
            ttt: Ttt(0x42),
            stat_sn: SeqNum::new(3),
            exp_cmd_sn: SeqNum::new(2),
            max_cmd_sn: SeqNum::new(9),
            r2t_sn: 0,
            buffer_offset: 4096,
            desired_data_transfer_length: 15_904,
        }),
        &mut ops,
    )
    .unwrap();
    let [TargetOp::Read { id, stag, va, len }] = ops[..] else {
        panic!("{ops:?}")
    };
    // The Write Base Offset addresses the first solicited byte (RFC 7145 section 9.2), so
    // the R2T at offset 4096, just past the immediate data, reads from the base itself.
    assert_eq!((stag, va, len), (adv.stag, adv.base_offset, 15_904));
    let fetched = regions.remote_read(stag, va, len);
    let outs = tgt.handle_read_done(id, fetched).unwrap();
    assert_eq!(outs.len(), 4);
    let mut got = data.slice(..4096).to_vec();
    for (i, pdu) in outs.iter().enumerate() {
        let Pdu::DataOut(d) = pdu else { panic!() };
        assert_eq!(
            (d.ttt, d.data_sn, d.final_bit),
            (Ttt(0x42), i as u32, i == 3)
        );
        assert_eq!(d.buffer_offset as usize, got.len());
        got.extend_from_slice(&d.data);
    }
    assert_eq!(got, data.to_vec());
    assert!(matches!(
        tgt.handle_read_done(id, Bytes::new()),
        Err(MoverError::UnknownRead(_))
    ));
}

#[test]
fn commands_without_their_buffers_and_data_for_unknown_tasks_are_errors() {
    let mut tgt = TargetDatamover::new(16384, 4096, false, 65536);
    let mut buf = bytes::BytesMut::new();
    encode_send(
        &IserHeader::default(),
        &Pdu::ScsiCommand(command(1, true, 512, Bytes::new())),
        &mut buf,
    );
    assert_eq!(
        tgt.handle_send(&buf),
        Err(MoverError::NoBuffer {
            itt: 1,
            what: "read"
        })
    );
    let mut ops = Vec::new();
    let r2t = R2t {
        lun: Lun(0),
        itt: Itt(5),
        ttt: Ttt(1),
        stat_sn: SeqNum::new(0),
        exp_cmd_sn: SeqNum::new(0),
        max_cmd_sn: SeqNum::new(0),
        r2t_sn: 0,
        buffer_offset: 0,
        desired_data_transfer_length: 512,
    };
    assert_eq!(
        tgt.handle_core_pdu(Pdu::R2t(r2t), &mut ops),
        Err(MoverError::UnknownTask(5))
    );
    assert!(matches!(
        tgt.handle_send(&[0x10; 10]),
        Err(MoverError::Malformed(_))
    ));
    assert!(matches!(
        tgt.handle_send(&buf[..40]),
        Err(MoverError::Malformed(_))
    ));
}

/// The datamover's own R2Ts number from 0 after the immediate data, even when that is a whole
/// MaxBurstLength (RFC 7143 section 11.8.5), and before the target sent any window they carry
/// one the core ignores (MaxCmdSN below ExpCmdSN - 1, section 4.2.2.1).
#[test]
fn own_r2ts_count_from_zero_and_move_no_window() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 4096, 65536);
    let mut out = InitiatorOut::default();
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(3, false, 12_288, pattern(4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let Some(Pdu::R2t(r2t)) = out.to_core.pop() else {
        panic!("{:?}", out.to_core)
    };
    assert_eq!((r2t.r2t_sn, r2t.buffer_offset), (0, 4096));
    let ignored = r2t
        .max_cmd_sn
        .lt(SeqNum::new(r2t.exp_cmd_sn.get().wrapping_sub(1)));
    assert!(ignored, "{r2t:?}");
    ini.handle_core_pdu(
        Pdu::DataOut(DataOut {
            final_bit: true,
            lun: Lun(0),
            itt: r2t.itt,
            ttt: r2t.ttt,
            exp_stat_sn: SeqNum::new(1),
            data_sn: 0,
            buffer_offset: 4096,
            data: pattern(4096),
        }),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let Some(Pdu::R2t(second)) = out.to_core.pop() else {
        panic!("{:?}", out.to_core)
    };
    assert_eq!((second.r2t_sn, second.buffer_offset), (1, 8192));
    assert_ne!(second.ttt, r2t.ttt);
}

fn data_out(itt: u32, ttt: Ttt, offset: u32, data: Bytes, final_bit: bool) -> DataOut {
    DataOut {
        final_bit,
        lun: Lun(0),
        itt: Itt(itt),
        ttt,
        exp_stat_sn: SeqNum::new(1),
        data_sn: 0,
        buffer_offset: offset,
        data,
    }
}

/// InitialR2T=No (RFC 7145 section 7.3.4): immediate data in the command's Send, unsolicited
/// Data-Out in Sends right behind it up to FirstBurstLength, and only the rest fetched by
/// RDMA Read from a buffer whose base offset is the first solicited byte.
#[test]
fn unsolicited_data_travels_in_sends_and_only_the_rest_by_rdma_read() {
    const FIRST_BURST: u32 = 16_384;
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, FIRST_BURST);
    let mut tgt = TargetDatamover::new(16384, 4096, false, FIRST_BURST);
    let mut out = InitiatorOut::default();
    let data = pattern(40_000);
    let mut cmd = command(11, false, 40_000, data.slice(..8192));
    cmd.final_bit = false; // unsolicited Data-Out follows
    ini.handle_core_pdu(Pdu::ScsiCommand(cmd), &mut regions, &mut out)
        .unwrap();
    // The core queues its unsolicited Data-Out behind the command: held with it.
    for (start, last) in [(8192u32, false), (12_288, true)] {
        let d = data.slice(start as usize..start as usize + 4096);
        ini.handle_core_pdu(
            Pdu::DataOut(data_out(11, Ttt::RESERVED, start, d, last)),
            &mut regions,
            &mut out,
        )
        .unwrap();
    }
    assert!(out.sends.is_empty(), "sent before the write buffer is full");
    // The datamover asks the core for the solicited part only, numbered from R2TSN 0.
    let mut offset = FIRST_BURST;
    while let Some(Pdu::R2t(r2t)) = out.to_core.pop() {
        assert_eq!(r2t.buffer_offset, offset);
        assert_eq!(r2t.r2t_sn, (offset - FIRST_BURST) / 8192);
        let len = r2t.desired_data_transfer_length;
        let d = data.slice(offset as usize..(offset + len) as usize);
        ini.handle_core_pdu(
            Pdu::DataOut(data_out(11, r2t.ttt, offset, d, true)),
            &mut regions,
            &mut out,
        )
        .unwrap();
        offset += len;
    }
    assert_eq!(offset, 40_000);
    let sent = sends(&mut out);
    assert_eq!(
        sent.len(),
        3,
        "the command, then its two unsolicited Data-Out"
    );
    let adv = sent[0].0.write.expect("WSV");
    assert!(sent[1..].iter().all(|(h, _)| *h == IserHeader::default()));
    assert_eq!(ini.stats.unsolicited_bytes, u64::from(FIRST_BURST));
    assert_eq!(ini.stats.unsolicited_data_outs, 2);
    assert_eq!(ini.stats.readable_bytes, 40_000 - u64::from(FIRST_BURST));
    // The target hands all three to its core as over TCP.
    let mut got = Vec::new();
    for (_, bytes) in &sent {
        match tgt.handle_send(bytes).unwrap() {
            Pdu::ScsiCommand(c) => got.extend_from_slice(&c.data),
            Pdu::DataOut(d) => {
                assert_eq!(d.ttt, Ttt::RESERVED);
                assert_eq!(d.buffer_offset as usize, got.len());
                got.extend_from_slice(&d.data);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tgt.stats.unsolicited_bytes, u64::from(FIRST_BURST));
    // An R2T inside the unsolicited part is refused; the first solicited byte is at the base.
    let r2t = |offset: u32, len: u32| R2t {
        lun: Lun(0),
        itt: Itt(11),
        ttt: Ttt(0x77),
        stat_sn: SeqNum::new(3),
        exp_cmd_sn: SeqNum::new(2),
        max_cmd_sn: SeqNum::new(9),
        r2t_sn: 0,
        buffer_offset: offset,
        desired_data_transfer_length: len,
    };
    let mut ops = Vec::new();
    assert_eq!(
        tgt.handle_core_pdu(Pdu::R2t(r2t(8192, 4096)), &mut ops),
        Err(MoverError::InsideUnsolicited {
            itt: 11,
            offset: 8192,
            unsolicited: FIRST_BURST
        })
    );
    tgt.handle_core_pdu(Pdu::R2t(r2t(FIRST_BURST, 40_000 - FIRST_BURST)), &mut ops)
        .unwrap();
    let [TargetOp::Read { id, stag, va, len }] = ops[..] else {
        panic!("{ops:?}")
    };
    assert_eq!((stag, va), (adv.stag, adv.base_offset));
    let fetched = regions.remote_read(stag, va, len);
    for pdu in tgt.handle_read_done(id, fetched).unwrap() {
        let Pdu::DataOut(d) = pdu else { panic!() };
        assert_eq!(d.buffer_offset as usize, got.len());
        got.extend_from_slice(&d.data);
    }
    assert_eq!(got, data.to_vec());
    assert_eq!(tgt.stats.rdma_read_bytes, 40_000 - u64::from(FIRST_BURST));
}

/// A write no longer than the first burst is all in Sends: no buffer, nothing held.
#[test]
fn a_write_within_the_first_burst_advertises_no_buffer() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, 65536);
    let mut tgt = TargetDatamover::new(16384, 4096, false, 65536);
    let mut out = InitiatorOut::default();
    let mut cmd = command(12, false, 8192, pattern(4096));
    cmd.final_bit = false;
    ini.handle_core_pdu(Pdu::ScsiCommand(cmd), &mut regions, &mut out)
        .unwrap();
    ini.handle_core_pdu(
        Pdu::DataOut(data_out(12, Ttt::RESERVED, 4096, pattern(4096), true)),
        &mut regions,
        &mut out,
    )
    .unwrap();
    assert!(out.to_core.is_empty());
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 2);
    assert!(sent[0].0.write.is_none() && regions.regions.is_empty());
    for (_, bytes) in &sent {
        tgt.handle_send(bytes).unwrap();
    }
    assert_eq!(tgt.tasks_in_flight(), 0);
}

/// Solicited data never travels in a Send (RFC 7145 section 7.3.4): a Data-Out with a
/// target transfer tag in one ends the connection.
#[test]
fn a_solicited_data_out_in_a_send_is_a_protocol_error() {
    let mut tgt = TargetDatamover::new(16384, 4096, false, 65536);
    let mut buf = bytes::BytesMut::new();
    encode_send(
        &IserHeader::default(),
        &Pdu::DataOut(data_out(3, Ttt(5), 0, pattern(512), true)),
        &mut buf,
    );
    assert_eq!(tgt.handle_send(&buf), Err(MoverError::SolicitedDataOut(3)));
    // And a Send's data segment is bounded by TargetRecvDataSegmentLength.
    let mut big = bytes::BytesMut::new();
    encode_send(
        &IserHeader::default(),
        &Pdu::DataOut(data_out(3, Ttt::RESERVED, 0, pattern(16_896), true)),
        &mut big,
    );
    assert!(matches!(
        tgt.handle_send(&big),
        Err(MoverError::Malformed(_))
    ));
}

fn ping(itt: u32) -> Pdu {
    Pdu::NopOut(crate::pdu::NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt::RESERVED,
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        data: Bytes::new(),
    })
}

fn ping_answer(itt: u32) -> Vec<u8> {
    let pdu = Pdu::NopIn(crate::pdu::NopIn {
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(64),
        data: Bytes::new(),
    });
    let mut buf = bytes::BytesMut::new();
    encode_send(&IserHeader::default(), &pdu, &mut buf);
    buf.to_vec()
}

fn sent_itts(out: &mut InitiatorOut) -> Vec<u32> {
    out.sends.drain(..).map(|(_, p)| p.itt().0).collect()
}

#[test]
fn the_initiator_holds_back_unexpected_pdus_beyond_the_targets_limit() {
    // RFC 7145 section 6.3.4: the target declared room for 2 unexpected PDUs.
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 262_144, 65536).with_unexpected_limit(2);
    let mut out = InitiatorOut::default();
    for itt in 1..=3 {
        ini.handle_core_pdu(ping(itt), &mut regions, &mut out)
            .unwrap();
    }
    assert_eq!(sent_itts(&mut out), [1, 2], "the third ping waits");
    assert_eq!(ini.unexpected_outstanding(), 2);
    assert_eq!(ini.held_back(), 1);
    // A non-immediate command is expected: it goes at once (the target takes commands in
    // CmdSN order and must not wait behind a held request), and so does the echo of a
    // target's ping.
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(10, true, 512, Bytes::new())),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let echo = Pdu::NopOut(crate::pdu::NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt: Ttt(77),
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        data: Bytes::new(),
    });
    ini.handle_core_pdu(echo, &mut regions, &mut out).unwrap();
    assert_eq!(sent_itts(&mut out), [10, Itt::RESERVED.0]);
    // A fourth ping waits behind the third.
    ini.handle_core_pdu(ping(4), &mut regions, &mut out)
        .unwrap();
    assert!(out.sends.is_empty());
    // The answer to ping 1 makes room for ping 3 only.
    ini.handle_send(&ping_answer(1), &mut regions, &mut out)
        .unwrap();
    assert_eq!(sent_itts(&mut out), [3]);
    assert_eq!(ini.unexpected_outstanding(), 2);
    assert_eq!(ini.held_back(), 1);
    assert_eq!(ini.stats.held_back, 2);
    // Nothing was lost on the way: the core got the answer.
    assert!(matches!(out.to_core.as_slice(), [Pdu::NopIn(_)]));
}

#[test]
fn without_a_limit_nothing_is_held_back() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 262_144, 65536);
    let mut out = InitiatorOut::default();
    for itt in 1..=100 {
        ini.handle_core_pdu(ping(itt), &mut regions, &mut out)
            .unwrap();
    }
    assert_eq!(out.sends.len(), 100);
    assert_eq!(ini.stats.held_back, 0);
}

fn target_ping(ttt: u32) -> Pdu {
    Pdu::NopIn(crate::pdu::NopIn {
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt: Ttt(ttt),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(64),
        data: Bytes::new(),
    })
}

fn sent_pdus(ops: &mut Vec<TargetOp>) -> Vec<Pdu> {
    ops.drain(..)
        .filter_map(|op| match op {
            TargetOp::Send { pdu, .. } => Some(pdu),
            _ => None,
        })
        .collect()
}

#[test]
fn the_target_holds_back_pings_beyond_the_initiators_limit() {
    let mut tgt = TargetDatamover::new(16384, 65536, true, 65536).with_unexpected_limit(2);
    let mut ops = Vec::new();
    for ttt in 1..=3 {
        tgt.handle_core_pdu(target_ping(ttt), &mut ops).unwrap();
    }
    // A response behind the held ping keeps its place (StatSN order).
    let rsp = crate::pdu::ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: crate::pdu::codes::ScsiResponseCode::Completed,
        status: ScsiStatus::Good,
        itt: Itt(5),
        snack_tag: 0,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(64),
        exp_data_sn: 0,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    };
    tgt.handle_core_pdu(Pdu::ScsiResponse(rsp), &mut ops)
        .unwrap();
    // The response is expected: it goes past the held ping (the initiator may be waiting
    // on it to free room of its own).
    let sent = sent_pdus(&mut ops);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(matches!(sent[2], Pdu::ScsiResponse(_)), "{sent:?}");
    assert_eq!(tgt.held_back(), 1);
    // Nothing moves until the initiator answers.
    assert_eq!(tgt.release_held(16, &mut ops).unwrap(), 0);
    // The echo of ping 1 makes room for ping 3, with the StatSN after the response.
    let echo = Pdu::NopOut(crate::pdu::NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt: Ttt(1),
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        data: Bytes::new(),
    });
    let mut buf = bytes::BytesMut::new();
    encode_send(&IserHeader::default(), &echo, &mut buf);
    assert!(matches!(tgt.handle_send(&buf).unwrap(), Pdu::NopOut(_)));
    assert_eq!(tgt.release_held(16, &mut ops).unwrap(), 1);
    let sent = sent_pdus(&mut ops);
    assert!(
        matches!(
            sent.as_slice(),
            [Pdu::NopIn(p)] if p.ttt == Ttt(3) && p.stat_sn == SeqNum::new(2)
        ),
        "{sent:?}"
    );
    assert_eq!(tgt.held_back(), 0);
}

/// The target's SCSI Response to task `itt`, in a Send.
fn response_send(itt: u32) -> Vec<u8> {
    let pdu = Pdu::ScsiResponse(crate::pdu::ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: crate::pdu::codes::ScsiResponseCode::Completed,
        status: ScsiStatus::Good,
        itt: Itt(itt),
        snack_tag: 0,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(2),
        max_cmd_sn: SeqNum::new(64),
        exp_data_sn: 0,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    });
    let mut buf = bytes::BytesMut::new();
    encode_send(&IserHeader::default(), &pdu, &mut buf);
    buf.to_vec()
}

/// Answers every R2T of the datamover's own with `data`'s bytes, in Data-Out of at most
/// `pdu_len` bytes (as the core sends them), and returns the slices handed over.
fn answer_own_r2ts(
    ini: &mut InitiatorDatamover,
    regions: &mut FakeRegions,
    out: &mut InitiatorOut,
    data: &Bytes,
    pdu_len: u32,
) -> Vec<Bytes> {
    let mut handed = Vec::new();
    while let Some(Pdu::R2t(r2t)) = out.to_core.pop() {
        assert!(
            regions.regions.is_empty(),
            "registered before all of the data arrived"
        );
        let end = r2t.buffer_offset + r2t.desired_data_transfer_length;
        let mut at = r2t.buffer_offset;
        while at < end {
            let next = (at + pdu_len).min(end);
            let d = data.slice(at as usize..next as usize);
            handed.push(d.clone());
            let pdu = Pdu::DataOut(data_out(r2t.itt.0, r2t.ttt, at, d, next == end));
            ini.handle_core_pdu(pdu, regions, out).unwrap();
            at = next;
        }
    }
    handed
}

/// A write's solicited data is registered where the core handed it out: nothing before
/// the last of it arrives, then one read-only region holding exactly the bytes past the
/// immediate data, whose chunks are the core's own slices (no zero-fill, no copy).
#[test]
fn a_writes_region_is_the_cores_data_registered_in_place() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, 65536);
    let mut out = InitiatorOut::default();
    let data = pattern(20_000);
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(9, false, 20_000, data.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let handed = answer_own_r2ts(&mut ini, &mut regions, &mut out, &data, 3000);
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let adv = sent[0].0.write.expect("WSV");
    let (base, bytes, remote_write) = &regions.regions[&adv.stag];
    assert_eq!(adv.base_offset, *base);
    assert_eq!(
        &bytes[..],
        &data[4096..],
        "the region is the solicited data"
    );
    assert!(!remote_write, "the target may only read it");
    let chunks = &regions.gathered[&adv.stag];
    assert_eq!(chunks.len(), handed.len());
    for (chunk, slice) in chunks.iter().zip(&handed) {
        assert_eq!((chunk.as_ptr(), chunk.len()), (slice.as_ptr(), slice.len()));
    }
    assert_eq!(ini.stats.write_buffers, 1);
    assert_eq!(ini.stats.readable_bytes, 20_000 - 4096);
    // The response releases it.
    ini.handle_send(&response_send(9), &mut regions, &mut out)
        .unwrap();
    assert!(regions.regions.is_empty() && regions.gathered.is_empty());
}

/// The core's solicited data must arrive as asked: in order, within the R2T, and a burst
/// closed only at its end; anything else would have the target read the wrong bytes.
#[test]
fn solicited_data_out_of_order_short_or_unasked_for_is_an_error() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, 65536);
    let mut out = InitiatorOut::default();
    let data = pattern(12_288);
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(4, false, 12_288, data.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let Some(Pdu::R2t(r2t)) = out.to_core.pop() else {
        panic!("{:?}", out.to_core)
    };
    assert_eq!(
        (r2t.buffer_offset, r2t.desired_data_transfer_length),
        (4096, 8192)
    );
    let mut send = |offset: u32, len: u32, last: bool| {
        let d = data_out(4, r2t.ttt, offset, pattern(len as usize), last);
        ini.handle_core_pdu(Pdu::DataOut(d), &mut regions, &mut out)
    };
    for (offset, len, last) in [
        (8192, 4096, false), // skips the first 4096 bytes
        (4096, 4096, true),  // closes the burst 4096 bytes short
        (4096, 8193, true),  // runs past the R2T
        (0, 4096, false),    // inside the immediate data
    ] {
        assert!(
            matches!(send(offset, len, last), Err(MoverError::Malformed(_))),
            "{offset}+{len}"
        );
    }
    // None of them was kept: the right data still completes the write.
    send(4096, 4096, false).unwrap();
    send(8192, 4096, true).unwrap();
    // Once the command went, solicited data for it is unasked for.
    assert_eq!(send(8192, 4096, true), Err(MoverError::UnknownTask(4)));
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let adv = sent[0].0.write.expect("WSV");
    let mut expected = pattern(4096).to_vec();
    expected.extend_from_slice(&pattern(4096));
    assert_eq!(regions.regions[&adv.stag].1, expected);
}

/// A held write's data is not registered until the command goes, so a task that ends
/// before then (its ITT reused after an abort, or the connection closing) leaves no
/// region behind, and the ITT's next write advertises its own data only.
#[test]
fn a_write_ended_while_held_leaves_no_region() {
    let mut regions = FakeRegions::default();
    let mut ini = InitiatorDatamover::new(8192, 8192, 65536);
    let mut out = InitiatorOut::default();
    let old = pattern(12_288);
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(5, false, 12_288, old.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    let Some(Pdu::R2t(r2t)) = out.to_core.pop() else {
        panic!("{:?}", out.to_core)
    };
    let part = data_out(5, r2t.ttt, 4096, old.slice(4096..8192), false);
    ini.handle_core_pdu(Pdu::DataOut(part), &mut regions, &mut out)
        .unwrap();
    assert!(regions.regions.is_empty() && out.sends.is_empty());
    // The ITT comes back with a new write.
    let new: Bytes = vec![0xee; 10_000].into();
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(5, false, 10_000, new.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    answer_own_r2ts(&mut ini, &mut regions, &mut out, &new, 4096);
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let adv = sent[0].0.write.expect("WSV");
    assert_eq!(regions.regions.len(), 1);
    assert_eq!(&regions.regions[&adv.stag].1[..], &new[4096..]);
    // A third write held when the connection ends: nothing to release but the second's.
    ini.handle_core_pdu(
        Pdu::ScsiCommand(command(6, false, 12_288, old.slice(..4096))),
        &mut regions,
        &mut out,
    )
    .unwrap();
    ini.release_all(&mut regions);
    assert!(regions.regions.is_empty() && regions.gathered.is_empty());
}
