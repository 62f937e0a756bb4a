//! What a logical unit offers beyond a fully provisioned disk, chosen by configuration.

/// Optional capabilities of a logical unit ([`LuConfig::options`](crate::LuConfig::options)).
/// The default is a fully provisioned LU that refuses SANITIZE.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct LuOptions {
    /// Thin provisioning (SBC-4 4.7.3): READ CAPACITY(16) reports LBPME=1 and LBPRZ=1,
    /// UNMAP and WRITE SAME with UNMAP=1 give space back to the backing store, and GET LBA
    /// STATUS reports which blocks are mapped. Needs a device that
    /// [deallocates](sluice_storage::BlockDevice::deallocates); on one that does not, the LU
    /// stays fully provisioned.
    pub thin: bool,
    /// For a thin LU: the soft threshold, in percent of the capacity (1 to 100). When the
    /// space allocated to the LU grows past it, every I_T nexus gets the unit attention THIN
    /// PROVISIONING SOFT THRESHOLD REACHED (38h/07h; SBC-4 4.7.3.7), once per crossing; the
    /// Logical Block Provisioning mode page reports it. Needs a device that can tell how much
    /// is allocated (memory, files).
    pub soft_threshold_percent: Option<u8>,
    /// SANITIZE (SBC-4 4.11, 5.30) is accepted: OVERWRITE, BLOCK ERASE (thin LUs only: it
    /// deallocates every block) and EXIT FAILURE MODE. `None` answers SANITIZE as an
    /// unsupported command, which protects a LU from being wiped by any initiator.
    pub sanitize: Option<SanitizeOptions>,
}

/// How SANITIZE runs on a logical unit.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct SanitizeOptions {
    /// Upper bound on the rate at which OVERWRITE writes, in bytes per second, so that a
    /// sanitize leaves bandwidth to the other LUs on the same backing store. `None`: as fast
    /// as the device goes.
    pub overwrite_bytes_per_s: Option<u64>,
}
