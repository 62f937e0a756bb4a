use std::sync::Arc;

use bytes::BytesMut;

use super::*;
use crate::cdb;
use crate::testutil::*;

#[test]
fn lun_addressing() {
    assert_eq!(decode_lun(0), LunAddress::Lun(0));
    assert_eq!(decode_lun(0x0005_0000_0000_0000), LunAddress::Lun(5));
    assert_eq!(decode_lun(0x412C_0000_0000_0000), LunAddress::Lun(300));
    assert_eq!(decode_lun(0x0105_0000_0000_0000), LunAddress::Unsupported);
    assert_eq!(decode_lun(0x0005_0000_0000_0001), LunAddress::Unsupported);
    assert_eq!(
        decode_lun(0xC101_0000_0000_0000),
        LunAddress::ReportLunsWellKnown
    );
    for l in [0u16, 1, 255, 256, 16383] {
        assert_eq!(decode_lun(encode_lun(l)), LunAddress::Lun(l));
    }
}

#[test]
fn missing_lun() {
    let t = Harness::new(512, 10);
    let m = Harness {
        lun: encode_lun(7),
        ..t.clone()
    };
    let d = m.ok(&cdb::inquiry(None, 255), &[]);
    assert_eq!(d[0], 0x7F);
    assert_eq!(d.len(), 74);
    assert_illegal(&m.check(&cdb::inquiry(Some(0x80), 255), &[]), 0x25, 0);
    assert_illegal(&m.check(&cdb::test_unit_ready(), &[]), 0x25, 0);
    assert_illegal(&m.check(&cdb::read10(0, 1, false), &[]), 0x25, 0);
    assert_illegal(&m.check(&[0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]), 0x25, 0);
    let d = m.ok(&[0x03, 0, 0, 0, 18, 0], &[]);
    assert_eq!((d[2], d[12]), (5, 0x25));
    assert!(m.target.transfer(m.lun, &cdb::read10(0, 4, false)) == Transfer::None);
    assert!(!m.target.reset(ResetKind::LogicalUnit(m.lun), 1));
}

#[test]
fn out_of_scope_commands_are_not_implemented() {
    let t = Harness::new(512, 10);
    // FORMAT UNIT, LOG SENSE, SEND DIAGNOSTIC, READ BUFFER; and on this LU (fully
    // provisioned, on a device without atomic writes, SANITIZE not allowed) UNMAP, WRITE
    // ATOMIC(16) and SANITIZE.
    for op in [0x42u8, 0x9C, 0x48, 0x04, 0x4D, 0x1D, 0x3C, 0xFF, 0x7F] {
        let mut c = [0u8; 16];
        c[0] = op;
        c[1] = 0x03;
        let s = t.check(&c, &[0; 64]);
        assert_illegal(&s, 0x20, 0);
        assert_eq!(t.target.transfer(0, &c), Transfer::None);
    }
    // REPORT REFERRALS (9Eh/13h) and REPORT TIMESTAMP (A3h/0Fh): unsupported service
    // actions of 9Eh/A3h, INVALID FIELD IN CDB pointing at byte 1.
    for (op, sa) in [(0x9Eu8, 0x13u8), (0xA3, 0x0F)] {
        let mut c = [0u8; 16];
        c[0] = op;
        c[1] = sa;
        assert_ifc(&t.check(&c, &[]), true, 1, None);
    }
    assert_illegal(&t.check(&[], &[]), 0x20, 0);
}

#[test]
fn naca_and_link_are_invalid() {
    let t = Harness::new(512, 10);
    assert_ifc(&t.check(&[0, 0, 0, 0, 0, 0x04], &[]), true, 5, Some(2));
    assert_ifc(&t.check(&[0, 0, 0, 0, 0, 0x01], &[]), true, 5, Some(0));
    let mut c = cdb::read16(0, 1, false);
    c[15] = 0x04;
    assert_ifc(&t.check(&c, &[]), true, 15, Some(2));
}

#[test]
fn unit_attention_sequencing() {
    let t = Harness::new(512, 10);
    let n2 = t.nexus(2);
    // INQUIRY, REPORT LUNS do not consume the POWER ON unit attention; TUR reports it once.
    n2.ok(&cdb::inquiry(None, 36), &[]);
    n2.ok(&cdb::report_luns(0, 64), &[]);
    let s = n2.check(&cdb::read10(0, 1, false), &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x29, 0));
    n2.ok(&cdb::read10(0, 1, false), &[]);
    // LU reset: every nexus, the requester included, sees 29h/03h once.
    assert!(t.target.reset(ResetKind::LogicalUnit(0), 1));
    for h in [&t, &n2] {
        let s = h.check(&cdb::test_unit_ready(), &[]);
        assert_eq!((s.asc, s.ascq), (0x29, 0x03));
        h.ok(&cdb::test_unit_ready(), &[]);
    }
    t.target.reset(ResetKind::TargetCold, 2);
    assert_eq!(t.check(&cdb::test_unit_ready(), &[]).ascq, 0x01);
    // Capacity change.
    t.lu().notify_capacity_changed();
    let s = n2.check(&cdb::test_unit_ready(), &[]);
    assert_eq!((s.asc, s.ascq), (0x29, 0x01), "the reset is reported first");
    let s = n2.check(&cdb::test_unit_ready(), &[]);
    assert_eq!((s.asc, s.ascq), (0x2A, 0x09));
    // A nexus that went away starts afresh.
    t.target.nexus_gone(2);
    assert_eq!(n2.check(&cdb::test_unit_ready(), &[]).asc, 0x29);
    // An unsupported opcode still reports the pending unit attention first.
    t.target.nexus_gone(2);
    assert_eq!(n2.check(&[0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]).key.0, 6);
}

#[test]
fn commands_cleared_is_reported_to_that_nexus_only() {
    let t = Harness::new(512, 10);
    let n2 = t.nexus(2);
    assert_eq!(n2.check(&cdb::test_unit_ready(), &[]).asc, 0x29);
    t.ok(&cdb::test_unit_ready(), &[]);
    t.target.commands_cleared(2, encode_lun(0));
    // A LUN that does not exist is ignored.
    t.target.commands_cleared(2, encode_lun(9));
    let s = n2.check(&cdb::test_unit_ready(), &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x47, 0x7F));
    n2.ok(&cdb::test_unit_ready(), &[]);
    t.ok(&cdb::test_unit_ready(), &[]);
}

#[test]
fn transfer_sizes() {
    let t = Harness::new(4096, 10);
    let tg = &t.target;
    assert_eq!(
        tg.transfer(0, &cdb::read10(0, 3, false)),
        Transfer::FromDevice(3 * 4096)
    );
    assert_eq!(
        tg.transfer(0, &cdb::write16(0, 2, false)),
        Transfer::ToDevice(8192)
    );
    assert_eq!(
        tg.transfer(0, &[0x08, 0, 0, 0, 0, 0]),
        Transfer::FromDevice(256 * 4096)
    );
    assert_eq!(tg.transfer(0, &cdb::read10(0, 0, false)), Transfer::None);
    assert_eq!(
        tg.transfer(0, &cdb::inquiry(None, 260)),
        Transfer::FromDevice(260)
    );
    assert_eq!(tg.transfer(7, &cdb::inquiry(None, 0)), Transfer::None);
    assert_eq!(
        tg.transfer(0, &cdb::read_capacity16(32)),
        Transfer::FromDevice(32)
    );
    assert_eq!(
        tg.transfer(0, &cdb::report_luns(0, 16)),
        Transfer::FromDevice(16)
    );
    assert_eq!(
        tg.transfer(0, &[0x15, 0x10, 0, 0, 24, 0]),
        Transfer::ToDevice(24)
    );
    assert_eq!(tg.transfer(0, &cdb::test_unit_ready()), Transfer::None);
    let mut v = cdb::read10(0, 2, false);
    v[0] = 0x2F;
    assert_eq!(tg.transfer(0, &v), Transfer::None);
    v[1] = 0x02;
    assert_eq!(tg.transfer(0, &v), Transfer::ToDevice(8192));
    v[1] = 0x06;
    assert_eq!(tg.transfer(0, &v), Transfer::ToDevice(4096));
    assert_eq!(tg.transfer(0, &[]), Transfer::None);
    let mut o = cdb::write16(0, 3, false);
    o[0] = 0x8B;
    assert_eq!(tg.transfer(0, &o), Transfer::ToDevice(3 * 4096));
    assert_eq!(
        tg.transfer(0, &[0x37, 0, 0x18, 0, 0, 0, 0, 0x01, 0x00, 0]),
        Transfer::FromDevice(256)
    );
    assert_eq!(
        tg.transfer(0, &[0xB7, 0x18, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0]),
        Transfer::FromDevice(32)
    );
}

#[test]
fn duplicate_and_unaddressable_luns_are_dropped() {
    let dev = Arc::new(VecDevice::new(512, 8));
    let lu = Arc::new(LogicalUnit::new(config(dev, false)));
    let t = ScsiTarget::new(vec![(1, lu.clone()), (1, lu.clone()), (0x4000, lu)]);
    assert_eq!(t.lun_numbers(), vec![1]);
}

#[test]
fn concurrent_execution() {
    let t = Harness::new(512, 64);
    std::thread::scope(|s| {
        for n in 0..4u64 {
            let t = t.nexus(10 + n);
            s.spawn(move || {
                let _ = t.run(&cdb::test_unit_ready(), &[]);
                for i in 0..50u32 {
                    let lba = (n as u32) * 16 + (i % 16);
                    t.ok(&cdb::write10(lba, 1, false), &[n as u8; 512]);
                    assert_eq!(t.ok(&cdb::read10(lba, 1, false), &[]), vec![n as u8; 512]);
                }
            });
        }
    });
}

mod never_panics {
    use proptest::prelude::*;

    use super::*;

    fn interesting_opcode() -> impl Strategy<Value = u8> {
        prop_oneof![
            prop::sample::select(
                crate::opcodes::COMMANDS
                    .iter()
                    .map(|c| c.opcode)
                    .collect::<Vec<_>>()
            ),
            any::<u8>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn execute_and_transfer_never_panic(
            op in interesting_opcode(),
            rest in prop::collection::vec(any::<u8>(), 0..20),
            data in prop::collection::vec(any::<u8>(), 0..1100),
            lun in prop_oneof![Just(0u64), Just(0xC101_0000_0000_0000), any::<u64>()],
            nexus in 0u64..4,
        ) {
            let dev = Arc::new(VecDevice::new(512, 16));
            let lu = Arc::new(LogicalUnit::new(config(dev, false)));
            let t = ScsiTarget::new(vec![(0, lu)]);
            let mut cdb = vec![op];
            cdb.extend_from_slice(&rest);
            let mut din = BytesMut::new();
            let _ = t.transfer(lun, &cdb);
            // Twice: the first may only report the POWER ON unit attention.
            for _ in 0..2 {
                let r = t.execute(nexus, lun, &cdb, &data, &mut din);
                prop_assert!(r.status == 0 || (r.status == 2 && r.sense.is_some()));
                if r.status == 2 {
                    prop_assert!(din.is_empty());
                    let b = r.sense_bytes().unwrap();
                    prop_assert!(crate::SenseData::parse(&b).is_ok());
                }
                prop_assert!(din.len() as u64 <= crate::MAX_TRANSFER_BYTES);
            }
            t.reset(ResetKind::TargetWarm, nexus);
            t.nexus_gone(nexus);
        }
    }
}

/// Runs `cdb` with Data-Out dropped on arrival (`DataOut::Unkept`) on `t`'s LU.
fn run_unkept(t: &Harness, cdb: &[u8], len: usize) -> CommandResult {
    let delivery = Delivery {
        data_out: DataOut::Unkept(len),
        data_out_len: Some(len as u64),
        abort: None,
    };
    let (mut din, mut shared) = (BytesMut::new(), None);
    t.target
        .execute_with(t.nexus, t.lun, cdb, delivery, &mut din, &mut shared)
}

#[test]
fn only_writes_to_a_device_that_keeps_nothing_may_drop_their_data() {
    let null = {
        let mut cfg = config(Arc::new(VecDevice::new(512, 0)), false);
        cfg.device = Arc::new(sluice_storage::NullDevice::new(512, 1024));
        let lu = Arc::new(LogicalUnit::new(cfg));
        Harness {
            target: Arc::new(ScsiTarget::new(vec![(0, lu)])),
            dev: Arc::new(VecDevice::new(512, 0)),
            nexus: 1,
            lun: 0,
        }
    };
    assert_eq!(null.run(&[0; 6], &[]).0.sense.unwrap().asc, 0x29);
    let write = cdb::write10(8, 4, false);
    assert!(!null.target.keeps_data_out(0, &write));
    assert!(!null.target.keeps_data_out(0, &cdb::write16(8, 4, false)));
    // Commands that read their Data-Out, a missing LUN, and a device that keeps writes.
    let mut write_verify = write;
    write_verify[0] = 0x2E;
    assert!(null.target.keeps_data_out(0, &write_verify));
    assert!(null.target.keeps_data_out(encode_lun(3), &write));
    let vec = Harness::new(512, 1024);
    assert!(vec.target.keeps_data_out(0, &write));

    // The null LU takes the dropped data as a write of its length, range checks included.
    assert_eq!(run_unkept(&null, &write, 2048), CommandResult::good());
    let past_end = cdb::write10(1022, 4, false);
    assert_eq!(
        run_unkept(&null, &past_end, 2048).sense.map(|s| s.asc),
        Some(0x21)
    );
    // A LU that keeps writes never writes zeros for dropped data: the command is aborted
    // and the device untouched.
    vec.dev.data.lock().unwrap()[4096..6144].fill(0xAB);
    let r = run_unkept(&vec, &write, 2048);
    let sense = r.sense.expect("CHECK CONDITION");
    assert_eq!(
        (sense.key, sense.asc, sense.ascq),
        (crate::SenseKey::ABORTED_COMMAND, 0x44, 0)
    );
    assert!(vec.dev.data.lock().unwrap()[4096..6144]
        .iter()
        .all(|&b| b == 0xAB));
}
