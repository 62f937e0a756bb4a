//! Test helpers: a Vec-backed block device and a harness around [`ScsiTarget`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use sluice_storage::{check_range, BlockDevice, StorageError};

use crate::ports::{PortGroup, TargetPort, TargetPorts};
use crate::{AccessState, CommandResult, LogicalUnit, LuConfig, NexusId, ScsiTarget, SenseData};

/// A RAM disk for tests, with switches for read-only and failing I/O.
#[derive(Debug)]
pub(crate) struct VecDevice {
    pub(crate) data: Mutex<Vec<u8>>,
    pub(crate) bs: u32,
    pub(crate) fail: AtomicBool,
    pub(crate) ro: AtomicBool,
    pub(crate) flushes: AtomicU64,
    pub(crate) fua_writes: AtomicU64,
}

impl VecDevice {
    pub(crate) fn new(bs: u32, blocks: u64) -> Self {
        Self {
            data: Mutex::new(vec![0; (u64::from(bs) * blocks) as usize]),
            bs,
            fail: AtomicBool::new(false),
            ro: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            fua_writes: AtomicU64::new(0),
        }
    }

    fn io_error(&self) -> Result<(), StorageError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(StorageError::Io(std::io::Error::other("injected")));
        }
        Ok(())
    }
}

impl BlockDevice for VecDevice {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn num_blocks(&self) -> u64 {
        self.data.lock().unwrap().len() as u64 / u64::from(self.bs)
    }
    fn blocks(&self) -> bool {
        false
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.io_error()?;
        let d = self.data.lock().unwrap();
        check_range(offset, buf.len() as u64, d.len() as u64)?;
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError> {
        self.io_error()?;
        let mut d = self.data.lock().unwrap();
        check_range(offset, data.len() as u64, d.len() as u64)?;
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        if fua {
            self.fua_writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn flush(&self) -> Result<(), StorageError> {
        self.io_error()?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn read_only(&self) -> bool {
        self.ro.load(Ordering::Relaxed)
    }
}

pub(crate) fn config(dev: Arc<VecDevice>, read_only: bool) -> LuConfig {
    LuConfig {
        device: dev,
        read_only,
        vendor: "SLUICE".into(),
        product: "TESTDISK".into(),
        revision: "0001".into(),
        serial: "SN0123456789".into(),
        naa_id: 0x6001_4050_0000_0001,
        write_cache: true,
        removable: false,
    }
}

/// The test target's name.
pub(crate) const TARGET_NAME: &str = "iqn.2024-01.org.example:t1";

/// Two target ports: relative 1 in group 1 and relative 2 in group 2, both active/optimized
/// unless `states` says otherwise.
pub(crate) fn two_ports(states: [AccessState; 2]) -> TargetPorts {
    TargetPorts {
        device_name: TARGET_NAME.into(),
        ports: (1..=2)
            .map(|n| TargetPort {
                relative_id: n,
                name: format!("{TARGET_NAME},t,0x{n:04x}"),
                group: n,
            })
            .collect(),
        groups: (1..=2)
            .map(|n| PortGroup {
                id: n,
                state: states[usize::from(n) - 1],
            })
            .collect(),
    }
}

/// One nexus talking to LUN 0 of a one-LU target.
#[derive(Clone)]
pub(crate) struct Harness {
    pub(crate) target: Arc<ScsiTarget>,
    pub(crate) dev: Arc<VecDevice>,
    pub(crate) nexus: NexusId,
    pub(crate) lun: u64,
}

impl Harness {
    /// A target with one LU; the POWER ON unit attention of nexus 1 is already consumed.
    pub(crate) fn new(bs: u32, blocks: u64) -> Self {
        Self::build(bs, blocks, false)
    }

    pub(crate) fn read_only(bs: u32, blocks: u64) -> Self {
        Self::build(bs, blocks, true)
    }

    /// A target with one removable LU (medium loaded).
    pub(crate) fn removable(bs: u32, blocks: u64) -> Self {
        Self::build_with(bs, blocks, |c| c.removable = true)
    }

    fn build(bs: u32, blocks: u64, ro: bool) -> Self {
        Self::build_with(bs, blocks, |c| c.read_only = ro)
    }

    fn build_with(bs: u32, blocks: u64, tweak: impl FnOnce(&mut LuConfig)) -> Self {
        let dev = Arc::new(VecDevice::new(bs, blocks));
        let mut cfg = config(dev.clone(), false);
        tweak(&mut cfg);
        let lu = Arc::new(LogicalUnit::new(cfg));
        let ports = two_ports([AccessState::ActiveOptimized; 2]);
        let target = Arc::new(ScsiTarget::with_ports(vec![(0, lu)], ports));
        let h = Self {
            target,
            dev,
            nexus: 1,
            lun: 0,
        };
        let r = h.run(&[0; 6], &[]).0;
        assert_eq!(r.sense.unwrap().asc, 0x29);
        h
    }

    /// The same target seen from another nexus (its POWER ON unit attention still pending).
    pub(crate) fn nexus(&self, nexus: NexusId) -> Self {
        Self {
            nexus,
            ..self.clone()
        }
    }

    pub(crate) fn lu(&self) -> Arc<LogicalUnit> {
        self.target.lu(0).unwrap()
    }

    pub(crate) fn run(&self, cdb: &[u8], out: &[u8]) -> (CommandResult, Vec<u8>) {
        let mut din = BytesMut::new();
        let r = self
            .target
            .execute(self.nexus, self.lun, cdb, out, &mut din);
        (r, din.to_vec())
    }

    /// Runs a command that must end GOOD; returns the Data-In.
    pub(crate) fn ok(&self, cdb: &[u8], out: &[u8]) -> Vec<u8> {
        let (r, d) = self.run(cdb, out);
        assert!(
            r.is_good(),
            "{cdb:02x?} failed: {:?}",
            r.sense.map(|s| s.to_string())
        );
        d
    }

    /// Runs a command that must end CHECK CONDITION with no data; returns the sense.
    pub(crate) fn check(&self, cdb: &[u8], out: &[u8]) -> SenseData {
        let (r, d) = self.run(cdb, out);
        assert_eq!(r.status, 2, "{cdb:02x?} did not fail");
        assert!(d.is_empty());
        r.sense.unwrap()
    }
}

/// Asserts ILLEGAL REQUEST / INVALID FIELD IN CDB (or PARAMETER LIST) with this pointer.
pub(crate) fn assert_ifc(s: &SenseData, in_cdb: bool, byte: u16, bit: Option<u8>) {
    assert_eq!(s.key.0, 5, "{s}");
    assert_eq!(
        (s.asc, s.ascq),
        (if in_cdb { 0x24 } else { 0x26 }, 0),
        "{s}"
    );
    assert_eq!(s.field_pointer(), Some((in_cdb, byte, bit)), "{s}");
}

/// Asserts ILLEGAL REQUEST with this ASC/ASCQ.
pub(crate) fn assert_illegal(s: &SenseData, asc: u8, ascq: u8) {
    assert_eq!((s.key.0, s.asc, s.ascq), (5, asc, ascq), "{s}");
}
