//! Changing a running target: the difference between the configuration in force and a new
//! one, applied without disturbing what the difference does not touch.
//!
//! [`Target::apply`] is the one way the configuration changes while the target serves (a
//! reload, and every `sluice ctl` change, which edits a copy of the configuration in force).
//! It first does everything that can fail (validation, binding new portals, opening new
//! backends, growing files), so that a change that cannot be made changes nothing; then it
//! commits, which cannot fail: portals start and stop, targets and LUs come and go (REPORTED
//! LUNS DATA HAS CHANGED, SPC-4 6.33), LUs grow (CAPACITY DATA HAS CHANGED, SBC-3 4.9), and
//! the new configuration is put in force for the logins that follow. Sessions of a removed
//! target, or of an initiator that a target's new ACL no longer admits, are closed; every
//! other session goes on, keeping what its login negotiated.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use sluice_proto::target::CloseReason;
use sluice_storage::BlockDevice;
use tracing::info;

use crate::config::{Acl, Backend, ConfigError, LunDef, TargetConfig, TargetDef};
use crate::context::{open_backend, open_lun, LunRuntime, TargetRuntime};
use crate::discovery::admits;
use crate::server::{BoundPortal, Target};
use crate::swap_device::Backing;

/// Why a change was not made. Nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// The new configuration is invalid.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// No target of that name.
    #[error("no target {0}")]
    NoTarget(String),
    /// The target has no such LUN.
    #[error("target {target}: no LUN {lun}")]
    NoLun {
        /// The target.
        target: String,
        /// The LUN number.
        lun: u16,
    },
    /// The target has that LUN already.
    #[error("target {target}: LUN {lun} exists already")]
    LunExists {
        /// The target.
        target: String,
        /// The LUN number.
        lun: u16,
    },
    /// A LUN would become smaller while initiators may have data past the new end.
    #[error(
        "target {target}: LUN {lun}: {to} bytes is smaller than its {from}; a served LUN only \
         grows (remove it and add it again to shrink it)"
    )]
    Shrink {
        /// The target.
        target: String,
        /// The LUN number.
        lun: u16,
        /// Its size now, in bytes.
        from: u64,
        /// The size asked for.
        to: u64,
    },
    /// A backend could not be opened (or a file grown).
    #[error("target {target}: LUN {lun}: {error}")]
    Open {
        /// The target.
        target: String,
        /// The LUN number.
        lun: u16,
        /// What the system said.
        error: io::Error,
    },
    /// A new portal could not be bound.
    #[error("{0}")]
    Bind(io::Error),
    /// The change asks for something only a restart can do: the targets' SCSI ports
    /// (portal group tags, ALUA groups and states) or the state directory.
    #[error("{0} take effect at restart: restart the target to change them")]
    NeedsRestart(&'static str),
    /// The ACL change asked for does not apply.
    #[error("target {target}: {reason}")]
    Acl {
        /// The target.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// No session with that id.
    #[error("no session {0}")]
    NoSession(u64),
}

/// What a change did, one line per item, for the log and the operator.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ChangeReport {
    /// What changed (empty: nothing).
    pub changes: Vec<String>,
    /// Sessions closed by the change (their target was removed or its ACL no longer admits
    /// them).
    pub sessions_closed: usize,
}

/// How a LU grows.
enum Growth {
    /// A memory LUN: grown in place to this many blocks, its data kept.
    Memory(u64),
    /// Another backend, opened again with the new size.
    Reopened(Backing),
}

/// A target's new LU list, and the LUs that leave it.
struct Relist {
    target: Arc<TargetRuntime>,
    luns: Vec<Arc<LunRuntime>>,
    gone: Vec<Arc<LunRuntime>>,
}

/// Everything the change needs, prepared; committing it cannot fail.
#[derive(Default)]
struct Prepared {
    bind: Vec<BoundPortal>,
    unbind: Vec<SocketAddr>,
    add_targets: Vec<(String, Arc<TargetRuntime>)>,
    remove_targets: Vec<String>,
    /// Targets whose LU list changes.
    relist: Vec<Relist>,
    grow: Vec<(Arc<LunRuntime>, Growth)>,
    /// Targets whose ACL changed, lower-cased, with the new ACL.
    acls: Vec<(String, Acl)>,
    report: Vec<String>,
}

impl Target {
    /// Makes `new` the configuration in force (see the module documentation); `by` says who
    /// asked, for the log. The fault test hook stays as it is (no file sets it).
    pub fn apply(&self, mut new: TargetConfig, by: &str) -> Result<ChangeReport, ChangeError> {
        let ctx = &self.ctx;
        let _one_at_a_time = ctx
            .changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = ctx.config();
        new.fault_hook.clone_from(&old.fault_hook);
        new.validate()?;
        let prepared = self.prepare(&old, &new)?;
        let report = self.commit(prepared, new, by);
        Ok(report)
    }

    fn prepare(&self, old: &TargetConfig, new: &TargetConfig) -> Result<Prepared, ChangeError> {
        let mut p = Prepared::default();
        // Every target's SCSI target ports are its portal groups: sessions and persistent
        // reservations know them by relative target port identifier, so they stay as they
        // started. Portals may still come and go within the groups.
        let ports = |c: &TargetConfig| {
            let mut v: Vec<_> = c
                .effective_portal_groups()
                .iter()
                .map(|g| (g.tag, g.alua_group, g.alua_state.code()))
                .collect();
            v.sort_unstable();
            v
        };
        if ports(old) != ports(new) {
            return Err(ChangeError::NeedsRestart(
                "portal group tags, ALUA groups and ALUA states",
            ));
        }
        if old.state_dir != new.state_dir {
            return Err(ChangeError::NeedsRestart("state_dir"));
        }
        // The listeners pass it on to the connections they accept.
        if old.tcp_congestion != new.tcp_congestion {
            return Err(ChangeError::NeedsRestart("tcp_congestion"));
        }
        for addr in new.portals.iter().filter(|a| !old.portals.contains(a)) {
            p.bind.push(
                BoundPortal::bind(*addr, new.tcp_congestion.as_deref())
                    .map_err(ChangeError::Bind)?,
            );
            p.report.push(format!("listen {addr}: added"));
        }
        for addr in old.portals.iter().filter(|a| !new.portals.contains(a)) {
            p.unbind.push(*addr);
            p.report.push(format!("listen {addr}: removed"));
        }
        let old_targets: HashMap<String, &TargetDef> = old
            .targets
            .iter()
            .map(|t| (t.iqn.to_ascii_lowercase(), t))
            .collect();
        for t in &new.targets {
            let key = t.iqn.to_ascii_lowercase();
            match old_targets.get(&key) {
                None => {
                    let runtime =
                        TargetRuntime::open(t, new).map_err(|error| ChangeError::Open {
                            target: t.iqn.clone(),
                            lun: t.luns.first().map_or(0, |l| l.number),
                            error,
                        })?;
                    p.add_targets.push((key, Arc::new(runtime)));
                    p.report.push(format!("target {}: added", t.iqn));
                }
                Some(o) => self.prepare_target(o, t, &mut p)?,
            }
        }
        for t in &old.targets {
            let key = t.iqn.to_ascii_lowercase();
            if !new.targets.iter().any(|n| n.iqn.eq_ignore_ascii_case(&key)) {
                p.remove_targets.push(key);
                p.report.push(format!("target {}: removed", t.iqn));
            }
        }
        if old.discovery_auth != new.discovery_auth {
            p.report.push("discovery CHAP: changed".into());
        }
        if old.offer != new.offer || old.keepalive != new.keepalive || old.recovery != new.recovery
        {
            p.report
                .push("session settings: changed (new sessions negotiate with them)".into());
        }
        if old.limits != new.limits {
            p.report.push("limits: changed".into());
        }

        Ok(p)
    }

    fn prepare_target(
        &self,
        old: &TargetDef,
        new: &TargetDef,
        p: &mut Prepared,
    ) -> Result<(), ChangeError> {
        let name = &new.iqn;
        let Some(runtime) = self.ctx.target(name) else {
            return Err(ChangeError::NoTarget(name.clone()));
        };
        if old.acl != new.acl {
            p.acls.push((name.to_ascii_lowercase(), new.acl.clone()));
            p.report.push(format!("target {name}: ACL changed"));
        }
        if old.chap != new.chap {
            p.report.push(format!(
                "target {name}: CHAP changed (sessions logged in go on; new logins use it)"
            ));
        }
        if old.alias != new.alias {
            p.report.push(format!("target {name}: alias changed"));
        }
        let running = runtime.luns();
        let mut relisted = false;
        let mut list = Vec::new();
        for l in &new.luns {
            let before = old.luns.iter().find(|o| o.number == l.number);
            let current = running.iter().find(|r| r.number == l.number);
            let state_dir = self.ctx.config().state_dir.clone();
            let gateway = self.ctx.config().gateway.clone();
            let open = |l: &LunDef| {
                open_lun(new, l, state_dir.as_deref(), gateway.as_ref()).map_err(|error| {
                    ChangeError::Open {
                        target: name.clone(),
                        lun: l.number,
                        error,
                    }
                })
            };
            match (before, current) {
                (Some(b), Some(c)) if b == l => list.push(Arc::clone(c)),
                (Some(b), Some(c)) if grows_only(b, l) => {
                    let (from, to) = (size_of(b, c), size_of_def(l));
                    match to {
                        Some(to) if to < from => {
                            return Err(ChangeError::Shrink {
                                target: name.clone(),
                                lun: l.number,
                                from,
                                to,
                            })
                        }
                        Some(to) if to == from => {}
                        _ => {
                            let growth = growth(l).map_err(|error| ChangeError::Open {
                                target: name.clone(),
                                lun: l.number,
                                error,
                            })?;
                            p.grow.push((Arc::clone(c), growth));
                            p.report.push(format!(
                                "target {name}: LUN {}: grown from {from} to {} bytes",
                                l.number,
                                to.unwrap_or(from)
                            ));
                        }
                    }
                    list.push(Arc::clone(c));
                }
                (Some(_), Some(_)) => {
                    list.push(open(l)?);
                    relisted = true;
                    p.report
                        .push(format!("target {name}: LUN {}: replaced", l.number));
                }
                _ => {
                    list.push(open(l)?);
                    relisted = true;
                    p.report
                        .push(format!("target {name}: LUN {}: added", l.number));
                }
            }
        }
        let gone: Vec<Arc<LunRuntime>> = running
            .iter()
            .filter(|r| !list.iter().any(|l| Arc::ptr_eq(l, r)))
            .map(Arc::clone)
            .collect();
        for g in &gone {
            if !new.luns.iter().any(|l| l.number == g.number) {
                p.report
                    .push(format!("target {name}: LUN {}: removed", g.number));
            }
        }
        if relisted || !gone.is_empty() {
            p.relist.push(Relist {
                target: runtime,
                luns: list,
                gone,
            });
        }
        Ok(())
    }

    fn commit(&self, p: Prepared, new: TargetConfig, by: &str) -> ChangeReport {
        let ctx = &self.ctx;
        for b in p.bind {
            self.start_portal(b);
        }
        for a in p.unbind {
            self.stop_portal(a);
        }
        for (name, runtime) in p.add_targets {
            ctx.set_target(&name, Some(runtime));
        }
        for name in &p.remove_targets {
            ctx.set_target(name, None);
        }
        for Relist { target, luns, gone } in p.relist {
            target.set_luns(luns);
            for g in gone {
                // Commands in flight still hold it; what they wrote is made durable now.
                if let Err(e) = g.device.flush() {
                    tracing::warn!(lun = g.number, error = %e, "flush of a removed LUN failed");
                }
            }
        }
        ctx.hook_peer_aborts();
        let mut report = p.report;
        for (lun, growth) in p.grow {
            let grown = lun.device.replace(|current| match (growth, current) {
                (Growth::Memory(blocks), Backing::Memory(m)) => {
                    Ok(Backing::Memory(Arc::new(m.grown(blocks)?)))
                }
                (Growth::Reopened(b), _) => Ok(b),
                (Growth::Memory(_), Backing::Other(_)) => {
                    Err(io::Error::other("not a memory device"))
                }
            });
            match grown {
                // SBC-3 4.9: every I_T nexus learns of it at its next command.
                Ok(()) => lun.lu.notify_capacity_changed(),
                Err(e) => report.push(format!("LUN {}: resize failed: {e}", lun.number)),
            }
        }
        ctx.sessions
            .registry()
            .set_max_sessions(new.limits.max_sessions);
        ctx.set_config(new);
        let mut closed = 0;
        for session in ctx.sessions.all() {
            let Some(target) = session.target.as_deref() else {
                continue;
            };
            let removed = p.remove_targets.iter().any(|t| t == target);
            let refused = p
                .acls
                .iter()
                .any(|(t, acl)| t == target && !admits(acl, &session.initiator));
            if removed || refused {
                info!(
                    by,
                    initiator = %session.initiator,
                    target,
                    "closing session: {}",
                    if removed { "its target was removed" } else { "the ACL no longer admits it" }
                );
                session.close(CloseReason::Administrative);
                closed += 1;
            }
        }
        for line in &report {
            info!(by, "configuration change: {line}");
        }
        ChangeReport {
            changes: report,
            sessions_closed: closed,
        }
    }
}

/// Whether `new` differs from `old` only in a size that a resize can give it.
fn grows_only(old: &LunDef, new: &LunDef) -> bool {
    let same_rest = LunDef {
        backend: new.backend.clone(),
        ..old.clone()
    } == *new;
    let same_kind = match (&old.backend, &new.backend) {
        (Backend::Memory { .. }, Backend::Memory { .. })
        | (Backend::Null { .. }, Backend::Null { .. }) => true,
        (
            Backend::File {
                path: p1,
                direct: d1,
                huge_pages: h1,
                ..
            },
            Backend::File {
                path: p2,
                direct: d2,
                huge_pages: h2,
                size: Some(_),
            },
        ) => p1 == p2 && d1 == d2 && h1 == h2,
        // An RBD LUN's size is its image's: nothing in its definition grows it.
        _ => false,
    };
    same_rest && same_kind
}

/// The size a LUN definition asks for, if it names one.
fn size_of_def(l: &LunDef) -> Option<u64> {
    match &l.backend {
        Backend::Memory { size } | Backend::Null { size } => Some(*size),
        Backend::File { size, .. } => *size,
        Backend::Rbd { .. } => None,
    }
}

/// The size of a served LUN, in bytes.
fn size_of(def: &LunDef, lun: &LunRuntime) -> u64 {
    size_of_def(def).unwrap_or_else(|| lun.device.size_bytes())
}

/// Prepares growing to what `l` asks for.
fn growth(l: &LunDef) -> io::Result<Growth> {
    match &l.backend {
        Backend::Memory { size } => Ok(Growth::Memory(size / u64::from(l.block_size))),
        // Opening with the larger size extends a regular file (sparsely) and checks that a
        // block device is large enough.
        _ => open_backend(l).map(Growth::Reopened),
    }
}
