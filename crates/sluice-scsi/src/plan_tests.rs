//! Planned READ, WRITE and SYNCHRONIZE CACHE end exactly as the synchronous path does: the
//! same status, sense, Data-In, device calls and medium, command after command, from twin
//! targets in the same state (unit attentions, ALUA states, reservations, write protection,
//! failing devices), one driven through `execute` and the other through `plan`, its device
//! I/O carried out as a transport would and ended with `IoPlan::finish`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use sluice_storage::{run_now, DeviceOp};

use crate::cdb;
use crate::pr::tests::{nexus, out, register, EA, RESERVE, WE};
use crate::testutil::*;
use crate::{AccessState, CommandResult, LogicalUnit, Planned, PlannedIo, ScsiTarget};

/// Runs `cdb` on `h` through `plan`; commands it does not plan go through `execute`.
fn planned(h: &Harness, cdb: &[u8], data: &[u8]) -> (CommandResult, Vec<u8>) {
    match h.target.plan(h.nexus, h.lun, cdb, data.len()) {
        Planned::Execute => h.run(cdb, data),
        Planned::Done(r) => (r, Vec::new()),
        Planned::Io(plan) => {
            let op = match plan.io() {
                PlannedIo::Read { offset, len } => DeviceOp::Read { offset, len },
                PlannedIo::Write { offset, len, fua } => DeviceOp::Write {
                    offset,
                    segments: vec![Bytes::copy_from_slice(&data[..len])],
                    fua,
                },
                PlannedIo::Flush => DeviceOp::Flush,
            };
            let (result, read) = match run_now(&**plan.device(), op) {
                Ok(read) => (Ok(()), read.to_vec()),
                Err(e) => (Err(e), Vec::new()),
            };
            let r = plan.finish(result);
            let read = if r.is_good() { read } else { Vec::new() };
            (r, read)
        }
    }
}

/// Whether `cdb` is planned on `h` now (and, if so, carries it out).
fn is_planned(h: &Harness, cdb: &[u8]) -> bool {
    !matches!(h.target.plan(h.nexus, h.lun, cdb, 0), Planned::Execute)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// The commands both twins run: every size of READ and WRITE, FUA, zero lengths, ranges,
/// protection fields, short and long Data-Out, SYNCHRONIZE CACHE.
fn script(bs: usize, blocks: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let n = blocks as u32;
    let mut s: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (cdb::write10(3, 2, false).to_vec(), pattern(2 * bs, 1)),
        (cdb::read10(3, 2, false).to_vec(), vec![]),
        (cdb::write16(10, 3, true).to_vec(), pattern(3 * bs, 2)),
        (cdb::read16(9, 5, false).to_vec(), vec![]),
        (vec![0x0A, 0, 0, 20, 1, 0], pattern(bs, 3)),
        (vec![0x08, 0, 0, 20, 1, 0], vec![]),
        (
            vec![0xAA, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0],
            pattern(2 * bs, 4),
        ),
        (vec![0xA8, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0], vec![]),
        // A partial last block is not written; more than the CDB asks for is ignored.
        (cdb::write10(40, 2, false).to_vec(), pattern(bs + 200, 5)),
        (cdb::write10(44, 1, false).to_vec(), pattern(3 * bs, 6)),
        (cdb::read10(40, 5, false).to_vec(), vec![]),
        // Zero blocks, at the end and beyond it.
        (cdb::read10(n, 0, false).to_vec(), vec![]),
        (cdb::write10(n, 0, false).to_vec(), vec![]),
        (cdb::read10(n + 1, 0, false).to_vec(), vec![]),
        (cdb::read10(n - 1, 2, false).to_vec(), vec![]),
        (cdb::write16(u64::MAX, 1, false).to_vec(), pattern(bs, 7)),
        (cdb::sync_cache10(0, 0, false).to_vec(), vec![]),
        (cdb::sync_cache10(n - 1, 2, false).to_vec(), vec![]),
        (cdb::read10(0, 1, false).to_vec(), vec![]),
    ];
    // RDPROTECT / WRPROTECT without protection information.
    let mut c = cdb::read10(0, 1, false).to_vec();
    c[1] = 0x20;
    s.push((c, vec![]));
    let mut c = cdb::write16(0, 1, false).to_vec();
    c[1] = 0x40;
    s.push((c, pattern(bs, 8)));
    // A reserved bit the command table refuses, and a too-short CDB.
    s.push((vec![0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF], vec![]));
    s.push((vec![0x28, 0, 0], vec![]));
    s
}

/// Runs `script` on twins `a` (synchronous) and `b` (planned) and compares every answer,
/// then the devices' counters and media.
fn same(a: &Harness, b: &Harness, script: &[(Vec<u8>, Vec<u8>)]) {
    for (cdb, data) in script {
        let want = a.run(cdb, data);
        let got = planned(b, cdb, data);
        assert_eq!(got, want, "{cdb:02x?}");
    }
    for (x, y) in [
        (&a.dev.flushes, &b.dev.flushes),
        (&a.dev.fua_writes, &b.dev.fua_writes),
        (&a.dev.writes, &b.dev.writes),
    ] {
        assert_eq!(x.load(Ordering::Relaxed), y.load(Ordering::Relaxed));
    }
    assert!(*a.dev.data.lock().unwrap() == *b.dev.data.lock().unwrap());
}

#[test]
fn planned_commands_end_as_executed_ones() {
    for bs in [512u32, 4096] {
        let script = script(bs as usize, 64);
        same(&Harness::new(bs, 64), &Harness::new(bs, 64), &script);
        same(
            &Harness::read_only(bs, 64),
            &Harness::read_only(bs, 64),
            &script,
        );
        // WCE=0: every write is durable.
        let no_cache = || Harness::build_with(bs, 64, |c| c.write_cache = false);
        same(&no_cache(), &no_cache(), &script);
        // A failing device: MEDIUM ERROR with the same ASC on both paths.
        let (a, b) = (Harness::new(bs, 64), Harness::new(bs, 64));
        a.dev.fail.store(true, Ordering::Relaxed);
        b.dev.fail.store(true, Ordering::Relaxed);
        same(&a, &b, &script);
    }
}

#[test]
fn a_pending_unit_attention_ends_the_planned_command() {
    let (a, b) = (Harness::new(512, 64), Harness::new(512, 64));
    // Nexus 5 has not been seen: its POWER ON unit attention is pending on both twins.
    same(&a.nexus(5), &b.nexus(5), &script(512, 64));
}

#[test]
fn reservations_are_enforced_on_planned_commands() {
    for kind in [WE, EA] {
        let (a, b) = (Harness::new(512, 64), Harness::new(512, 64));
        for h in [&a, &b] {
            register(h, 0x1234);
            assert!(out(h, RESERVE, kind, 0x1234, 0).is_good());
        }
        // The holder, then another nexus: conflicts for its writes (and reads, under EA).
        same(&a, &b, &script(512, 64));
        let (a2, b2) = (nexus(&a, 2, 1), nexus(&b, 2, 1));
        same(&a2, &b2, &script(512, 64));
        let conflict = planned(&b2, &cdb::write10(0, 1, false), &[0; 512]).0;
        assert_eq!(conflict.status, crate::status::RESERVATION_CONFLICT);
    }
}

#[test]
fn alua_states_are_enforced_on_planned_commands() {
    let build = || {
        let dev = Arc::new(VecDevice::new(512, 64));
        let lu = Arc::new(LogicalUnit::new(config(dev.clone(), false)));
        let ports = two_ports([AccessState::ActiveOptimized, AccessState::Standby]);
        let target = Arc::new(ScsiTarget::with_ports(vec![(0, lu)], ports));
        let h = Harness {
            target,
            dev,
            nexus: 1,
            lun: 0,
        };
        let _ = h.run(&[0; 6], &[]);
        h
    };
    let (a, b) = (build(), build());
    // Through the standby group (port 2): NOT READY for reads and writes.
    let (a2, b2) = (nexus(&a, 2, 2), nexus(&b, 2, 2));
    same(&a2, &b2, &script(512, 64));
    let standby = planned(&b2, &cdb::read10(0, 1, false), &[]).0;
    assert_eq!(
        standby.sense.map(|s| (s.key.0, s.asc, s.ascq)),
        Some((2, 0x04, 0x0B))
    );
}

#[test]
fn other_commands_are_not_planned_and_change_nothing() {
    let h = Harness::new(512, 64);
    let fresh = h.nexus(9);
    for cdb in [
        cdb::test_unit_ready().to_vec(),
        cdb::inquiry(None, 96).to_vec(),
        cdb::write_same10(0, 1, false).to_vec(),
        cdb::compare_and_write(0, 1, false).to_vec(),
        cdb::read_capacity10().to_vec(),
    ] {
        assert!(!is_planned(&fresh, &cdb), "{cdb:02x?}");
    }
    // Nexus 9's POWER ON unit attention is still there for its first executed command.
    assert_eq!(fresh.check(&cdb::test_unit_ready(), &[]).asc, 0x29);
}

#[test]
fn a_planned_io_holds_the_lu_until_it_finishes_and_yields_to_exclusive_holders() {
    let h = Harness::new(512, 64);
    let lu = h.lu();
    let Planned::Io(plan) = h.target.plan(h.nexus, h.lun, &cdb::read10(0, 1, false), 0) else {
        panic!("a READ is planned");
    };
    // COMPARE AND WRITE, PERSISTENT RESERVE OUT... would wait for the read.
    assert!(lu.io.try_write().is_none());
    assert!(plan.finish(Ok(())).is_good());
    let exclusive = lu.io_exclusive();
    // While a command holds the lock exclusively (or waits for it), nothing is planned:
    // the command takes the synchronous path, which waits.
    assert!(!is_planned(&h, &cdb::write10(0, 1, false)));
    assert!(!is_planned(&h, &cdb::read10(0, 1, false)));
    drop(exclusive);
    assert!(is_planned(&h, &cdb::read10(0, 1, false)));
}

/// A controller that records the implicit transitions asked of it.
#[derive(Debug, Default)]
struct Recorder(std::sync::Mutex<Vec<u16>>);

impl crate::alua::AluaController for Recorder {
    fn request(&self, _group: u16, _state: AccessState) -> Result<(), crate::SenseData> {
        Ok(())
    }

    fn write_through(&self, group: u16) -> Result<(), crate::SenseData> {
        self.0.lock().unwrap().push(group);
        Ok(())
    }
}

#[test]
fn a_write_through_a_non_owner_gateway_is_left_to_the_synchronous_path() {
    let dev = Arc::new(VecDevice::new(512, 64));
    let lu = Arc::new(LogicalUnit::new(config(dev.clone(), false)));
    let recorder = Arc::new(Recorder::default());
    lu.set_alua_controller(recorder.clone());
    let ports = two_ports([
        AccessState::ActiveOptimized,
        AccessState::ActiveNonOptimized,
    ]);
    let target = Arc::new(ScsiTarget::with_ports(vec![(0, lu)], ports));
    let h = Harness {
        target,
        dev,
        nexus: 1,
        lun: 0,
    };
    let _ = h.run(&[0; 6], &[]);
    let h2 = nexus(&h, 2, 2);
    // Reads through the non-optimized group are planned; a write is not, because moving
    // the ownership first may wait for other gateways.
    assert!(is_planned(&h2, &cdb::read10(0, 1, false)));
    assert!(!is_planned(&h2, &cdb::write10(0, 1, false)));
    // Through the optimized group a write is planned and asks for no transition.
    assert!(is_planned(&h, &cdb::write10(0, 1, false)));
    assert!(recorder.0.lock().unwrap().is_empty());
    // The synchronous path runs the write and asks the controller first.
    let (r, _) = planned(&h2, &cdb::write10(0, 1, false), &vec![7; 512]);
    assert!(r.is_good(), "{r:?}");
    assert_eq!(*recorder.0.lock().unwrap(), vec![2]);
}
