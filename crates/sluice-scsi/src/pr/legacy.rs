//! RESERVE(6)/(10) and RELEASE(6)/(10) (SPC-2 7.21, 7.13; obsolete in SPC-4 but still sent by
//! clusters and by libiscsi's suite), with the compatible reservation handling of SPC-4
//! 5.12.3 (CRH=1) once persistent reservations are in use.
//!
//! With a shared store (gateways exporting one logical unit), the holder is kept in the
//! shared state by initiator port and relative target port, written by compare-and-write
//! like the persistent reservations, so a RESERVE through one gateway conflicts through all.
//!
//! Third-party reservations and extents are not supported: the CDB bits that ask for them are
//! refused as reserved by the command table.

use crate::lu::Cmd;
use crate::pr::Failure;

/// RESERVE(6) and RESERVE(10).
pub(crate) fn reserve(cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let res = cmd.lu.reservations();
    let mut inner = res.lock();
    if res.shared_store().is_some() {
        // Every gateway enforces it: the holder is kept in the shared state.
        let me = super::holder_of(&cmd.fabric.identity(cmd.nexus));
        res.update_shared_legacy(&mut inner, |inner| {
            if !inner.pr.registrations.is_empty() {
                return compatible(cmd, &inner.pr).map(|()| None);
            }
            match &inner.shared_legacy {
                Some(holder) if *holder != me => Err(Failure::Conflict),
                Some(_) => Ok(None),
                None => Ok(Some(Some(me.clone()))),
            }
        })?;
        if inner.shared_legacy.as_ref() == Some(&me) {
            inner.legacy = Some(cmd.nexus);
            inner.legacy_holder = Some(me);
        }
        return Ok(());
    }
    if !inner.pr.registrations.is_empty() {
        return compatible(cmd, &inner.pr);
    }
    match inner.legacy {
        // Reserved by another I_T nexus.
        Some(holder) if holder != cmd.nexus => Err(Failure::Conflict),
        _ => {
            inner.legacy = Some(cmd.nexus);
            res.publish(&inner);
            Ok(())
        }
    }
}

/// RELEASE(6) and RELEASE(10): releases a reservation this I_T nexus holds; anything else is
/// a successful no-op (SPC-2 7.13: "...shall not be considered an error").
pub(crate) fn release(cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let res = cmd.lu.reservations();
    let mut inner = res.lock();
    if res.shared_store().is_some() {
        let me = super::holder_of(&cmd.fabric.identity(cmd.nexus));
        res.update_shared_legacy(&mut inner, |inner| {
            if !inner.pr.registrations.is_empty() {
                return compatible(cmd, &inner.pr).map(|()| None);
            }
            Ok((inner.shared_legacy.as_ref() == Some(&me)).then_some(None))
        })?;
        if inner.legacy == Some(cmd.nexus) && inner.shared_legacy.as_ref() != Some(&me) {
            inner.legacy = None;
            inner.legacy_holder = None;
        }
        return Ok(());
    }
    if !inner.pr.registrations.is_empty() {
        return compatible(cmd, &inner.pr);
    }
    if inner.legacy == Some(cmd.nexus) {
        inner.legacy = None;
        res.publish(&inner);
    }
    Ok(())
}

/// SPC-4 5.12.3 with CRH=1: while any I_T nexus is registered, RESERVE and RELEASE from a
/// persistent reservation holder (or, under registrants-only and all-registrants types, from
/// any registrant) complete with GOOD and do nothing; from anyone else they conflict.
fn compatible(cmd: &Cmd<'_>, pr: &super::model::PrState) -> Result<(), Failure> {
    let id = cmd.fabric.identity(cmd.nexus);
    let allowed = pr.holds(&id)
        || pr.registration_of(&id).is_some()
            && pr
                .reservation
                .as_ref()
                .is_some_and(|r| r.kind.registrants_have_access());
    if allowed {
        Ok(())
    } else {
        Err(Failure::Conflict)
    }
}
