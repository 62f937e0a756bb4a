//! Reservations and the LU's one I/O lock: a command that passed the reservation gate runs to
//! its end before a PERSISTENT RESERVE OUT that changes the reservations takes effect, and
//! nothing that runs afterwards passed the gate before it. The LU's writes stall on demand
//! ([`Stall`]), so the test holds a write inside the lock while the preemption is sent.

use std::sync::mpsc::TryRecvError;
use std::time::Duration;

use crate::cdb::{self, copy_list, BlockCopy};
use crate::sense::SenseKey;
use crate::status::{GOOD, RESERVATION_CONFLICT};
use crate::testutil::*;

use super::tests::*;

/// Long enough for a PERSISTENT RESERVE OUT that does not wait for the I/O lock to finish on
/// a loaded machine; a preemption that waits as it should never finishes in it.
const SETTLE: Duration = Duration::from_millis(200);

/// A WRITE from the reservation holder is inside the device when another registrant preempts
/// the reservation: the preemption waits for the write, which completes; the preempted
/// I_T nexus's next write conflicts.
#[test]
fn a_preemption_waits_for_the_write_that_passed_the_gate() {
    let (stall, started, go) = Stall::new();
    let dev = VecDevice {
        stall: std::sync::Mutex::new(Some(stall)),
        ..VecDevice::new(512, 64)
    };
    let h = Harness::build_on(dev, |_| {});
    let holder = nexus(&h, 10, 1);
    let other = nexus(&h, 11, 1);
    register(&holder, 1);
    register(&other, 2);
    assert_eq!(out(&holder, RESERVE, WE, 1, 0).status, GOOD);
    std::thread::scope(|s| {
        let write = s.spawn(|| holder.run(&cdb::write10(3, 1, false), &[0xAB; 512]).0);
        started.recv().expect("the write reached the device");
        let (done_tx, done) = std::sync::mpsc::channel();
        let other = &other;
        let preempt = s.spawn(move || {
            let r = out(other, PREEMPT, WE, 2, 1);
            let _ = done_tx.send(());
            r
        });
        std::thread::sleep(SETTLE);
        assert_eq!(
            done.try_recv(),
            Err(TryRecvError::Empty),
            "PREEMPT took effect while a write that passed the gate was running"
        );
        drop(go);
        assert!(write.join().unwrap().is_good(), "the write completes");
        assert_eq!(preempt.join().unwrap().status, GOOD);
    });
    assert_eq!(&h.dev.data.lock().unwrap()[3 * 512..4 * 512], &[0xAB; 512]);
    // The preempted nexus hears of it, then conflicts.
    let s = holder.check(&cdb::write10(3, 1, false), &[0; 512]);
    assert_eq!(
        (s.key, s.asc, s.ascq),
        (SenseKey::UNIT_ATTENTION, 0x2A, 0x05)
    );
    let r = holder.run(&cdb::write10(3, 1, false), &[0; 512]).0;
    assert_eq!(r.status, RESERVATION_CONFLICT);
}

/// An EXTENDED COPY by the holder of the destination's reservation is part way when another
/// registrant preempts it: each piece being written when the preemption is sent completes
/// first, none is written after it took effect, and the copy ends with COPY ABORTED, as a
/// write of its own would have conflicted.
#[test]
fn a_preemption_stops_an_extended_copy_between_pieces() {
    const BLOCKS: u16 = 32_768; // 16 MiB: sixteen pieces
    const PIECE: usize = 1 << 20;
    let (stall, started, go) = Stall::new();
    let dst = VecDevice {
        stall: std::sync::Mutex::new(Some(stall)),
        ..VecDevice::new(512, u64::from(BLOCKS))
    };
    let (h, second) = Harness::two_lus(VecDevice::new(512, u64::from(BLOCKS)), dst, false);
    let copier = nexus(&h, 10, 1);
    let on_lu1 = |x: &Harness| {
        let y = Harness {
            lun: crate::encode_lun(1),
            ..x.clone()
        };
        let _ = y.run(&[0; 6], &[]);
        y
    };
    let copier1 = on_lu1(&copier);
    let other1 = on_lu1(&nexus(&h, 11, 1));
    register(&copier1, 1);
    register(&other1, 2);
    assert_eq!(out(&copier1, RESERVE, WE, 1, 0).status, GOOD);
    let bytes = usize::from(BLOCKS) * 512;
    copier.ok(
        &cdb::write16(0, u32::from(BLOCKS), false),
        &vec![0x5A; bytes],
    );
    let list = copy_list(
        1,
        false,
        &[(1, 3, &LU0, 512), (1, 3, &LU1, 512)],
        &[BlockCopy {
            source: 0,
            destination: 1,
            blocks: BLOCKS,
            source_lba: 0,
            destination_lba: 0,
        }],
    );
    std::thread::scope(|s| {
        let copy = s.spawn(|| copier.run(&cdb::extended_copy(list.len() as u32), &list).0);
        started.recv().expect("the first piece reached the device");
        let (done_tx, done) = std::sync::mpsc::channel();
        let other1 = &other1;
        let preempt = s.spawn(move || {
            let r = out(other1, PREEMPT, WE, 2, 1);
            let _ = done_tx.send(());
            r
        });
        std::thread::sleep(SETTLE);
        assert_eq!(done.try_recv(), Err(TryRecvError::Empty));
        // The first piece is in the device: let it go.
        go.send(()).expect("the copy waits");
        // Let each piece go until the preemption is done (a piece may slip in between the
        // end of one and the preemption waking up; it then holds the lock and waits here).
        while done.try_recv().is_err() {
            if started.recv_timeout(Duration::from_millis(5)).is_ok() {
                go.send(()).expect("the copy waits");
            }
        }
        drop(go);
        let r = copy.join().unwrap();
        assert!(
            started.try_recv().is_err(),
            "a piece was written after the preemption took effect"
        );
        let sense = r
            .sense
            .clone()
            .unwrap_or_else(|| panic!("COPY ABORTED, not {r:?}"));
        assert_eq!(
            (sense.key, sense.asc, sense.ascq),
            (SenseKey::COPY_ABORTED, 0x0D, 0x02)
        );
        assert_eq!(preempt.join().unwrap().status, GOOD);
    });
    // Whole pieces, then nothing.
    let data = second.data.lock().unwrap();
    let copied = data.iter().take_while(|&&b| b == 0x5A).count();
    assert!(
        copied >= PIECE && copied % PIECE == 0,
        "{copied} bytes copied"
    );
    assert!(data[copied..].iter().all(|&b| b == 0), "nothing after them");
}
