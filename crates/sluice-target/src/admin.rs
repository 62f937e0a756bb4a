//! What an operator does to a running target: look at it ([`Target::status`],
//! [`Target::config`]) and change it. Each change edits a copy of the configuration in force
//! and hands it to [`Target::apply`], so the configuration always says what is served (and
//! saving it gives a file that serves the same), and every change is checked as a whole
//! configuration would be.

use std::io;
use std::sync::Arc;

use sluice_proto::target::CloseReason;
use tracing::info;

use crate::change::{ChangeError, ChangeReport};
use crate::config::{Acl, Backend, ChapCredentials, LunDef, TargetConfig, TargetDef};
use crate::server::Target;
use crate::status::{LunStatus, Status, TargetStatus};

impl Target {
    /// The configuration in force.
    pub fn config(&self) -> TargetConfig {
        TargetConfig::clone(&self.ctx.config())
    }

    /// Portals, targets with their LUs, and sessions with their connections, counters
    /// included.
    pub fn status(&self) -> Status {
        let ctx = &self.ctx;
        let config = ctx.config();
        let targets = config
            .targets
            .iter()
            .filter_map(|t| {
                let runtime = ctx.target(&t.iqn)?;
                let running = runtime.luns();
                let luns = t
                    .luns
                    .iter()
                    .filter_map(|l| {
                        let r = running.iter().find(|r| r.number == l.number)?;
                        use sluice_storage::BlockDevice;
                        Some(LunStatus {
                            number: l.number,
                            backend: l.backend.clone(),
                            block_size: l.block_size,
                            blocks: r.device.num_blocks(),
                            read_only: l.read_only,
                            removable: l.removable,
                            serial: r.lu.config().serial.clone(),
                            options: l.options,
                            allocated_bytes: r.device.allocated_bytes(),
                            counts: r.metrics.totals(),
                        })
                    })
                    .collect();
                Some(TargetStatus {
                    iqn: t.iqn.clone(),
                    alias: t.alias.clone(),
                    acl: t.acl.clone(),
                    chap_user: t.chap.as_ref().map(|c| c.user.clone()),
                    mutual_chap: t.chap.as_ref().is_some_and(|c| c.mutual.is_some()),
                    luns,
                    logins: runtime.logins.counts(),
                })
            })
            .collect();
        let mut sessions: Vec<_> = ctx.sessions.all().iter().map(|s| s.status()).collect();
        sessions.sort_by_key(|s| s.id);
        Status {
            portals: self.portals(),
            targets,
            sessions,
            discovery_logins: ctx.discovery_logins.counts(),
            unknown_target_logins: ctx.unknown_logins.counts(),
            connections: self.connection_count(),
            iser: ctx.iser.status(),
        }
    }

    /// Edits a copy of target `iqn` in the configuration in force and applies the result.
    fn change_target(
        &self,
        iqn: &str,
        by: &str,
        edit: impl FnOnce(&mut TargetDef) -> Result<(), ChangeError>,
    ) -> Result<ChangeReport, ChangeError> {
        let mut config = self.config();
        let t = config
            .targets
            .iter_mut()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .ok_or_else(|| ChangeError::NoTarget(iqn.to_string()))?;
        edit(t)?;
        self.apply(config, by)
    }

    /// Adds a LU to target `iqn`. Initiators logged in to it see REPORTED LUNS DATA HAS
    /// CHANGED at their next command.
    pub fn add_lun(&self, iqn: &str, lun: LunDef, by: &str) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| {
            if t.luns.iter().any(|l| l.number == lun.number) {
                return Err(ChangeError::LunExists {
                    target: t.iqn.clone(),
                    lun: lun.number,
                });
            }
            let at = t.luns.partition_point(|l| l.number < lun.number);
            t.luns.insert(at, lun);
            Ok(())
        })
    }

    /// Removes LU `number` of target `iqn` (not its last one: a target has at least one).
    pub fn remove_lun(
        &self,
        iqn: &str,
        number: u16,
        by: &str,
    ) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| {
            let before = t.luns.len();
            t.luns.retain(|l| l.number != number);
            if t.luns.len() == before {
                return Err(ChangeError::NoLun {
                    target: t.iqn.clone(),
                    lun: number,
                });
            }
            Ok(())
        })
    }

    /// Grows LU `number` of target `iqn` to `size` bytes. Initiators see CAPACITY DATA HAS
    /// CHANGED at their next command to it.
    pub fn resize_lun(
        &self,
        iqn: &str,
        number: u16,
        size: u64,
        by: &str,
    ) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| {
            let l = t
                .luns
                .iter_mut()
                .find(|l| l.number == number)
                .ok_or_else(|| ChangeError::NoLun {
                    target: t.iqn.clone(),
                    lun: number,
                })?;
            match &mut l.backend {
                Backend::Memory { size: s } | Backend::Null { size: s } => *s = size,
                Backend::File { size: s, .. } => *s = Some(size),
                Backend::Rbd { image } => {
                    return Err(ChangeError::Open {
                        target: t.iqn.clone(),
                        lun: number,
                        error: io::Error::new(
                            io::ErrorKind::Unsupported,
                            format!(
                                "an RBD LUN is as large as its image: resize {} with `rbd \
                                 resize`, and the LUN follows",
                                image.spec()
                            ),
                        ),
                    })
                }
            }
            Ok(())
        })
    }

    /// Lets `initiator` log in to target `iqn`. The ACL must list names already: adding one
    /// to an open ACL would shut every other initiator out (use [`Target::set_acl`]).
    pub fn acl_add(
        &self,
        iqn: &str,
        initiator: &str,
        by: &str,
    ) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| match &mut t.acl {
            Acl::Open => Err(acl_error(
                t,
                "the ACL is open (anyone may log in); adding a name would shut every other \
                 initiator out: set the whole list instead",
            )),
            Acl::Allow(names) => {
                if names.iter().any(|n| n.eq_ignore_ascii_case(initiator)) {
                    return Err(acl_error(t, &format!("{initiator} is in the ACL already")));
                }
                if !crate::is_iscsi_name(initiator) {
                    return Err(acl_error(t, &format!("{initiator:?} is not an iSCSI name")));
                }
                names.push(initiator.to_string());
                Ok(())
            }
        })
    }

    /// Takes `initiator` off target `iqn`'s ACL; its sessions to the target are closed. The
    /// last name cannot go (a target nobody may log in to is removed instead).
    pub fn acl_remove(
        &self,
        iqn: &str,
        initiator: &str,
        by: &str,
    ) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| match &mut t.acl {
            Acl::Open => Err(acl_error(t, "the ACL is open: it lists no names")),
            Acl::Allow(names) => {
                let before = names.len();
                names.retain(|n| !n.eq_ignore_ascii_case(initiator));
                if names.len() == before {
                    return Err(acl_error(t, &format!("{initiator} is not in the ACL")));
                }
                if names.is_empty() {
                    return Err(acl_error(t, "the last name of an ACL cannot be removed"));
                }
                Ok(())
            }
        })
    }

    /// Replaces target `iqn`'s ACL.
    pub fn set_acl(&self, iqn: &str, acl: Acl, by: &str) -> Result<ChangeReport, ChangeError> {
        self.change_target(iqn, by, |t| {
            if let Acl::Allow(names) = &acl {
                if names.is_empty() {
                    return Err(acl_error(t, "an ACL lists at least one name"));
                }
                if let Some(bad) = names.iter().find(|n| !crate::is_iscsi_name(n)) {
                    return Err(acl_error(t, &format!("{bad:?} is not an iSCSI name")));
                }
            }
            t.acl = acl;
            Ok(())
        })
    }

    /// Sets (`Some`) or removes (`None`) the CHAP credentials of target `iqn`, or of discovery
    /// sessions when `iqn` is `None`. Sessions logged in go on; logins from now on use them.
    pub fn set_chap(
        &self,
        iqn: Option<&str>,
        chap: Option<ChapCredentials>,
        by: &str,
    ) -> Result<ChangeReport, ChangeError> {
        match iqn {
            Some(iqn) => self.change_target(iqn, by, |t| {
                t.chap = chap;
                Ok(())
            }),
            None => {
                let mut config = self.config();
                config.discovery_auth = chap;
                self.apply(config, by)
            }
        }
    }

    /// Closes every connection of session `id` (see
    /// [`SessionStatus::id`](crate::status::SessionStatus::id)) at once. Initiators usually
    /// log in again unless the ACL refuses them.
    pub fn close_session(&self, id: u64, by: &str) -> Result<(), ChangeError> {
        let session = self
            .ctx
            .sessions
            .all()
            .into_iter()
            .find(|s| s.nexus == id)
            .ok_or(ChangeError::NoSession(id))?;
        info!(
            by,
            session = id,
            initiator = %session.initiator,
            target = session.target.as_deref().unwrap_or("(discovery)"),
            "closing session at the operator's request"
        );
        close(&session);
        Ok(())
    }
}

fn close(session: &Arc<crate::sessions::SharedSession>) {
    session.close(CloseReason::Administrative);
}

fn acl_error(t: &TargetDef, reason: &str) -> ChangeError {
    ChangeError::Acl {
        target: t.iqn.clone(),
        reason: reason.to_string(),
    }
}
