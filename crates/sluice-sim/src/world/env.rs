//! The target's environment: the SCSI layer over memory LUNs and the login environment (one
//! target, no authentication, the session table).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use sluice_proto::login::{LoginStatus, SessionBinding, TargetLoginEnv, TargetLoginPolicy};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::Cdb;
use sluice_proto::seq::{Lun, SeqNum, Tsih};
use sluice_proto::target::registry::{Binding, NexusKey, SessionRegistry};
use sluice_proto::target::{
    self, DataTransfer, ResetKind, ScsiCompletion, ScsiWork, TargetSessionEnv,
};
use sluice_proto::text::OperationalOffer;
use sluice_scsi::{DataOut, LuConfig, ScsiTarget, Transfer};
use sluice_storage::MemoryDevice;

use super::{NEXUS, TARGET};

/// Runs a command on the SCSI layer.
pub(crate) fn execute(scsi: &ScsiTarget, work: &ScsiWork) -> ScsiCompletion {
    let mut buf = BytesMut::new();
    let mut shared = None;
    let result = scsi.execute_shared(
        NEXUS,
        work.lun.0,
        &work.cdb,
        match work.data_out.unkept() {
            Some(n) => DataOut::Unkept(n),
            None => DataOut::Segments(work.data_out.segments()),
        },
        &mut buf,
        &mut shared,
    );
    ScsiCompletion {
        status: ScsiStatus::from(result.status),
        sense: result.sense_bytes().map(Bytes::from).unwrap_or_default(),
        data: shared.unwrap_or_else(|| buf.freeze()),
    }
}

/// The target session's view of the SCSI layer.
pub(crate) struct ScsiEnv<'a> {
    pub(crate) scsi: &'a ScsiTarget,
}

impl TargetSessionEnv for ScsiEnv<'_> {
    fn transfer(&self, lun: Lun, cdb: &Cdb) -> DataTransfer {
        match self.scsi.transfer(lun.0, cdb) {
            Transfer::None => DataTransfer::None,
            Transfer::ToDevice(n) => DataTransfer::ToDevice(n),
            Transfer::FromDevice(n) => DataTransfer::FromDevice(n),
        }
    }

    fn keeps_data_out(&self, lun: Lun, cdb: &Cdb) -> bool {
        self.scsi.keeps_data_out(lun.0, cdb)
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        match sluice_scsi::decode_lun(lun.0) {
            sluice_scsi::LunAddress::Lun(n) => self.scsi.lu(n).is_some(),
            _ => false,
        }
    }

    fn reset(&mut self, kind: ResetKind) {
        let kind = match kind {
            ResetKind::LogicalUnit(lun) => sluice_scsi::ResetKind::LogicalUnit(lun.0),
            ResetKind::TargetWarm => sluice_scsi::ResetKind::TargetWarm,
            ResetKind::TargetCold => sluice_scsi::ResetKind::TargetCold,
        };
        self.scsi.reset(kind, NEXUS);
    }

    fn commands_cleared(&mut self, lun: Lun) {
        self.scsi.commands_cleared(NEXUS, lun.0);
    }

    fn send_targets(&mut self, _conn: target::ConnId, _query: &str) -> Vec<(String, String)> {
        vec![
            ("TargetName".into(), TARGET.into()),
            ("TargetAddress".into(), "192.0.2.1:3260,1".into()),
        ]
    }
}

/// The target's login environment: one target, no authentication, the session table.
pub(super) struct LoginEnv<'a> {
    pub(super) registry: &'a mut SessionRegistry<()>,
    pub(super) rng: &'a mut ChaCha8Rng,
    pub(super) offer: &'a OperationalOffer,
    pub(super) window: Option<(SeqNum, SeqNum)>,
    /// The live session's TSIH and parameters, for the outcome of a login that joins it.
    pub(super) session: Option<(Tsih, SessionParams)>,
    pub(super) bound: Option<Binding<()>>,
}

impl LoginEnv<'_> {
    fn policy(&self) -> TargetLoginPolicy {
        TargetLoginPolicy {
            offer: self.offer.clone(),
            ..TargetLoginPolicy::default()
        }
    }
}

impl TargetLoginEnv for LoginEnv<'_> {
    fn target(&self, name: &str) -> Option<TargetLoginPolicy> {
        name.eq_ignore_ascii_case(TARGET).then(|| self.policy())
    }

    fn discovery_policy(&self) -> TargetLoginPolicy {
        self.policy()
    }

    fn random_bytes(&mut self, buf: &mut [u8]) {
        self.rng.fill_bytes(buf);
    }

    fn admit(&mut self, binding: &SessionBinding) -> Result<(), LoginStatus> {
        self.registry
            .check(&key(binding), binding.tsih, binding.cid)
    }

    fn bind_session(&mut self, binding: &SessionBinding) -> Result<Tsih, LoginStatus> {
        let bound = self
            .registry
            .bind(key(binding), binding.tsih, binding.cid)?;
        let tsih = match &bound {
            Binding::NewSession { conn, .. } | Binding::AddConnection { conn, .. } => {
                conn.session.tsih
            }
        };
        self.bound = Some(bound);
        Ok(tsih)
    }

    /// As sluice's target does: only the live session `tsih` has a window; a login naming
    /// any other TSIH (one that ended, or was reinstated away) gets none and is refused at
    /// binding.
    fn session_command_window(&self, tsih: Tsih) -> Option<(SeqNum, SeqNum)> {
        self.session
            .filter(|(live, _)| *live == tsih)
            .and(self.window)
    }

    /// As sluice's target does: a joining login's outcome carries its session's leading-only
    /// keys (RFC 7143 section 13, "LO"), not the defaults its own negotiation leaves.
    fn session_params(&self, tsih: Tsih) -> Option<SessionParams> {
        self.session
            .filter(|(live, _)| *live == tsih)
            .map(|(_, params)| params)
    }
}

fn key(binding: &SessionBinding) -> NexusKey {
    NexusKey::new(
        &binding.initiator_name,
        binding.isid,
        binding.target_name.as_deref().unwrap_or_default(),
        1,
    )
}

pub(crate) fn lu_config(n: u16, device: Arc<MemoryDevice>) -> LuConfig {
    LuConfig {
        device,
        read_only: false,
        vendor: "SLUICE".into(),
        product: "sluice sim".into(),
        revision: "0001".into(),
        serial: format!("sim{n}"),
        naa_id: (6u64 << 60) | u64::from(n),
        write_cache: true,
        removable: false,
        options: sluice_scsi::LuOptions::default(),
    }
}

/// Takes the unit attention a new I_T nexus meets first (SPC-4 section 6.37: POWER ON
/// OCCURRED), as an initiator's first TEST UNIT READY does, so that measured commands
/// start GOOD.
pub(crate) fn clear_unit_attention(scsi: &ScsiTarget, lun: u64) {
    let (mut buf, mut shared) = (BytesMut::new(), None);
    let tur = [0u8; 6];
    for _ in 0..4 {
        let r = scsi.execute_shared(
            NEXUS,
            lun,
            &tur,
            DataOut::Segments(&[]),
            &mut buf,
            &mut shared,
        );
        if ScsiStatus::from(r.status) == ScsiStatus::Good {
            return;
        }
    }
}
