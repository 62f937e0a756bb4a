//! Test helpers: a Vec-backed block device and a harness around [`ScsiTarget`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use sluice_storage::{check_range, BlockDevice, Extent, Provisioning, StorageError};

use crate::ports::{PortGroup, TargetPort, TargetPorts};
use crate::{
    AccessState, CommandResult, LogicalUnit, LuConfig, LuOptions, NexusId, ScsiTarget, SenseData,
};

/// A RAM disk for tests, with switches for read-only and failing I/O, and (for thin LUs) a
/// map of which blocks hold data.
#[derive(Debug)]
pub(crate) struct VecDevice {
    pub(crate) data: Mutex<Vec<u8>>,
    pub(crate) bs: u32,
    pub(crate) fail: AtomicBool,
    pub(crate) ro: AtomicBool,
    pub(crate) flushes: AtomicU64,
    pub(crate) fua_writes: AtomicU64,
    /// Deallocates on discard; `mapped` says which blocks hold data.
    pub(crate) thin: bool,
    pub(crate) mapped: Mutex<Vec<bool>>,
    /// Writes to unmapped blocks fail with ENOSPC (a full backing store).
    pub(crate) full: AtomicBool,
    /// Claims atomic writes.
    pub(crate) atomic: bool,
    /// Calls to write_at and discard.
    pub(crate) writes: AtomicU64,
    /// While set, each write_at reports that it started and waits to be let go.
    pub(crate) stall: Mutex<Option<Stall>>,
}

/// The test's side of a [`VecDevice`] whose writes stall: each write sends on `started`, then
/// waits for a message on `go` (or for the test to drop its sender).
#[derive(Debug)]
pub(crate) struct Stall {
    started: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
}

impl Stall {
    /// A stall, and the test's ends: where writes report their start, and how to let one go.
    pub(crate) fn new() -> (
        Self,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (started, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go) = std::sync::mpsc::channel();
        (Self { started, go }, started_rx, go_tx)
    }
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
            thin: false,
            mapped: Mutex::new(vec![false; blocks as usize]),
            full: AtomicBool::new(false),
            atomic: false,
            writes: AtomicU64::new(0),
            stall: Mutex::new(None),
        }
    }

    fn io_error(&self) -> Result<(), StorageError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(StorageError::Io(std::io::Error::other("injected")));
        }
        Ok(())
    }

    fn blocks_of(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        let bs = u64::from(self.bs);
        (offset / bs) as usize..(offset + len).div_ceil(bs) as usize
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
        if let Some(stall) = &*self.stall.lock().unwrap() {
            let _ = stall.started.send(());
            let _ = stall.go.recv();
        }
        self.io_error()?;
        let mut d = self.data.lock().unwrap();
        check_range(offset, data.len() as u64, d.len() as u64)?;
        let blocks = self.blocks_of(offset, data.len() as u64);
        let mut mapped = self.mapped.lock().unwrap();
        if self.full.load(Ordering::Relaxed) && mapped[blocks.clone()].iter().any(|m| !m) {
            return Err(StorageError::Io(std::io::ErrorKind::StorageFull.into()));
        }
        mapped[blocks].fill(true);
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        self.writes.fetch_add(1, Ordering::Relaxed);
        if fua {
            self.fua_writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        self.io_error()?;
        let mut d = self.data.lock().unwrap();
        check_range(offset, len, d.len() as u64)?;
        if self.thin {
            d[offset as usize..(offset + len) as usize].fill(0);
            // Only whole blocks are deallocated.
            let bs = u64::from(self.bs);
            let first = offset.div_ceil(bs) as usize;
            let last = ((offset + len) / bs) as usize;
            if first < last {
                self.mapped.lock().unwrap()[first..last].fill(false);
            }
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn deallocates(&self) -> bool {
        self.thin
    }
    fn allocated_bytes(&self) -> Option<u64> {
        let mapped = self.mapped.lock().unwrap();
        Some(mapped.iter().filter(|&&m| m).count() as u64 * u64::from(self.bs))
    }
    fn provisioning(&self, offset: u64, len: u64) -> Result<Extent, StorageError> {
        check_range(offset, len, self.size_bytes())?;
        let bs = u64::from(self.bs);
        let mapped = self.mapped.lock().unwrap();
        let blocks = self.blocks_of(offset, len);
        let first = mapped[blocks.start];
        let run = mapped[blocks].iter().take_while(|&&m| m == first).count() as u64;
        let state = if first {
            Provisioning::Mapped
        } else {
            Provisioning::Deallocated
        };
        Ok(Extent {
            state,
            len: (run * bs).min(len),
        })
    }
    fn physical_block_size(&self) -> u32 {
        self.bs * 8
    }
    fn atomic_writes(&self) -> bool {
        self.atomic
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
        options: LuOptions::default(),
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

/// The NAA designators (VPD 83h) of the two LUs [`Harness::two_lus`] builds.
pub(crate) const LU0: [u8; 16] = [
    0x60, 0x01, 0x40, 0x50, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0,
];
pub(crate) const LU1: [u8; 16] = [
    0x60, 0x01, 0x40, 0x50, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// A device on which a LU can offer every command: it deallocates (UNMAP, SANITIZE BLOCK
/// ERASE) and writes atomically (WRITE ATOMIC).
pub(crate) fn every_command_device(bs: u32, blocks: u64) -> VecDevice {
    VecDevice {
        thin: true,
        atomic: true,
        ..VecDevice::new(bs, blocks)
    }
}

/// The LU configuration that, on [`every_command_device`], offers every command: thin, and
/// SANITIZE allowed.
pub(crate) fn every_command_options(c: &mut LuConfig) {
    c.options.thin = true;
    c.options.sanitize = Some(crate::SanitizeOptions::default());
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

    /// A target with one LU that offers every command of the table ([`every_command_device`],
    /// [`every_command_options`]), for tests that walk the table.
    pub(crate) fn every_command(bs: u32, blocks: u64) -> Self {
        Self::build_on(every_command_device(bs, blocks), every_command_options)
    }

    /// A target with one thin-provisioned LU (its device deallocates).
    pub(crate) fn thin(bs: u32, blocks: u64) -> Self {
        Self::build_on(
            VecDevice {
                thin: true,
                ..VecDevice::new(bs, blocks)
            },
            |c| c.options.thin = true,
        )
    }

    fn build(bs: u32, blocks: u64, ro: bool) -> Self {
        Self::build_with(bs, blocks, |c| c.read_only = ro)
    }

    pub(crate) fn build_with(bs: u32, blocks: u64, tweak: impl FnOnce(&mut LuConfig)) -> Self {
        Self::build_on(VecDevice::new(bs, blocks), tweak)
    }

    /// A target with one LU on `dev`, configured by `tweak`.
    pub(crate) fn build_on(dev: VecDevice, tweak: impl FnOnce(&mut LuConfig)) -> Self {
        let dev = Arc::new(dev);
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

    /// A target with one LU on a sparse [`MemoryDevice`](sluice_storage::MemoryDevice) (for
    /// LUs too large for a `VecDevice`); `dev` is then an empty stand-in.
    pub(crate) fn memory(bs: u32, blocks: u64, tweak: impl FnOnce(&mut LuConfig)) -> Self {
        let mem = Arc::new(sluice_storage::MemoryDevice::new(bs, blocks));
        let mut cfg = config(Arc::new(VecDevice::new(bs, 0)), false);
        cfg.device = mem;
        tweak(&mut cfg);
        let lu = Arc::new(LogicalUnit::new(cfg));
        let h = Self {
            target: Arc::new(ScsiTarget::new(vec![(0, lu)])),
            dev: Arc::new(VecDevice::new(bs, 0)),
            nexus: 1,
            lun: 0,
        };
        assert_eq!(h.run(&[0; 6], &[]).0.sense.unwrap().asc, 0x29);
        h
    }

    /// A target with two LUs, 0 (this harness's device) and 1 (`second`), for copies.
    pub(crate) fn two_lus(
        first: VecDevice,
        second: VecDevice,
        thin: bool,
    ) -> (Self, Arc<VecDevice>) {
        let (a, b) = (Arc::new(first), Arc::new(second));
        let mut cfg0 = config(a.clone(), false);
        let mut cfg1 = config(b.clone(), false);
        cfg1.naa_id = 0x6001_4050_0000_0002;
        cfg1.serial = "SN-SECOND".into();
        cfg0.options.thin = thin;
        cfg1.options.thin = thin;
        let luns = vec![
            (0, Arc::new(LogicalUnit::new(cfg0))),
            (1, Arc::new(LogicalUnit::new(cfg1))),
        ];
        let h = Self {
            target: Arc::new(ScsiTarget::new(luns)),
            dev: a,
            nexus: 1,
            lun: 0,
        };
        assert_eq!(h.run(&[0; 6], &[]).0.sense.unwrap().asc, 0x29);
        (h, b)
    }

    /// Runs a command as a transport that announced `announced` bytes of Data-Out and
    /// raises `abort`.
    pub(crate) fn run_with(
        &self,
        cdb: &[u8],
        out: &[u8],
        announced: Option<u64>,
        abort: Option<&crate::AbortSignal>,
    ) -> (CommandResult, Vec<u8>) {
        let mut din = BytesMut::new();
        let mut shared = None;
        let delivery = crate::Delivery {
            data_out: out.into(),
            data_out_len: announced,
            abort,
        };
        let r =
            self.target
                .execute_with(self.nexus, self.lun, cdb, delivery, &mut din, &mut shared);
        if let Some(b) = shared {
            din.extend_from_slice(&b);
        }
        (r, din.to_vec())
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
