//! The PERSISTENT RESERVE OUT service actions (SPC-4 5.12.7-5.12.11, 6.16), as changes to a
//! copy of the logical unit's [`PrState`]. Each returns the unit attentions and task aborts
//! the change calls for; nothing is applied when it fails.

use crate::ports::{NexusIdentity, TargetPorts};
use crate::pr::model::{PrState, PrType, Registration, Reservation, MAX_REGISTRATIONS};
use crate::pr::params::{insufficient_registration_resources, ProutParameters, ServiceAction};
use crate::pr::Failure;
use crate::sense::{invalid_field_in_cdb, invalid_field_in_param, SenseData, SenseKey};
use crate::transport_id::TransportId;
use crate::unit_attention as ua;

/// One PERSISTENT RESERVE OUT command.
pub(crate) struct Request<'a> {
    pub(crate) action: ServiceAction,
    /// The CDB's SCOPE (high nibble of byte 2) and TYPE (low nibble).
    pub(crate) scope: u8,
    pub(crate) type_code: u8,
    pub(crate) params: &'a ProutParameters,
    /// The I_T nexus that sent it.
    pub(crate) me: &'a NexusIdentity,
    pub(crate) ports: &'a TargetPorts,
}

/// What a successful service action asks of the other I_T nexuses.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// Unit attentions for every I_T nexus a registration names (except the sender).
    pub(crate) unit_attentions: Vec<(Registration, (u8, u8))>,
    /// Registrations whose I_T nexuses' tasks PREEMPT AND ABORT aborts (and whose PREVENT
    /// MEDIUM REMOVAL it lifts).
    pub(crate) aborted: Vec<Registration>,
}

impl Effects {
    fn notify(&mut self, regs: impl IntoIterator<Item = Registration>, code: (u8, u8)) {
        self.unit_attentions
            .extend(regs.into_iter().map(|r| (r, code)));
    }
}

const CONFLICT: Failure = Failure::Conflict;

/// Applies `req` to `state`.
pub(crate) fn apply(state: &mut PrState, req: &Request<'_>) -> Result<Effects, Failure> {
    let needs_type = matches!(
        req.action,
        ServiceAction::Reserve
            | ServiceAction::Release
            | ServiceAction::Preempt
            | ServiceAction::PreemptAndAbort
    );
    let kind = if needs_type {
        // Only LU_SCOPE is defined (element scope is obsolete).
        if req.scope != 0 {
            return Err(invalid_field_in_cdb(2, Some(7)).into());
        }
        Some(PrType::from_code(req.type_code).ok_or_else(|| invalid_field_in_cdb(2, Some(3)))?)
    } else {
        None
    };
    let mine = state.registration_of(req.me);
    let mut effects = Effects::default();
    match (req.action, kind) {
        (ServiceAction::Register, _) => register(state, req, mine, false, &mut effects)?,
        (ServiceAction::RegisterAndIgnoreExistingKey, _) => {
            register(state, req, mine, true, &mut effects)?
        }
        (ServiceAction::RegisterAndMove, _) => register_and_move(state, req, mine)?,
        (action, kind) => {
            // Every other service action needs a registered I_T nexus and its key.
            let Some(mine) = mine else {
                return Err(CONFLICT);
            };
            if state.registrations[mine].key != req.params.key() {
                return Err(CONFLICT);
            }
            match (action, kind) {
                (ServiceAction::Reserve, Some(kind)) => reserve(state, mine, kind)?,
                (ServiceAction::Release, Some(kind)) => release(state, mine, kind, &mut effects)?,
                (ServiceAction::Clear, _) => clear(state, mine, &mut effects),
                (ServiceAction::Preempt | ServiceAction::PreemptAndAbort, Some(kind)) => {
                    let abort = action == ServiceAction::PreemptAndAbort;
                    preempt(state, req, mine, kind, abort, &mut effects)?
                }
                _ => return Err(invalid_field_in_cdb(1, Some(4)).into()),
            }
        }
    }
    // SPC-4 6.15.2: PRGENERATION counts every successful REGISTER, REGISTER AND IGNORE
    // EXISTING KEY, CLEAR, PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE; RESERVE and
    // RELEASE leave it alone.
    if !matches!(req.action, ServiceAction::Reserve | ServiceAction::Release) {
        state.generation = state.generation.wrapping_add(1);
    }
    // "The APTPL bit ... is valid only for the REGISTER, REGISTER AND IGNORE EXISTING KEY, and
    // REGISTER AND MOVE service actions"; the last one received applies.
    if matches!(
        req.action,
        ServiceAction::Register
            | ServiceAction::RegisterAndIgnoreExistingKey
            | ServiceAction::RegisterAndMove
    ) {
        state.aptpl = req.params.aptpl();
    }
    Ok(effects)
}

/// REGISTER and REGISTER AND IGNORE EXISTING KEY (SPC-4 5.12.7, 5.12.11.3).
fn register(
    state: &mut PrState,
    req: &Request<'_>,
    mine: Option<usize>,
    ignore_key: bool,
    effects: &mut Effects,
) -> Result<(), Failure> {
    let ProutParameters::Basic {
        key,
        sa_key,
        all_tg_pt,
        spec_i_pt,
        ..
    } = req.params
    else {
        return Err(invalid_field_in_param(0, None).into());
    };
    let (key, sa_key) = (*key, *sa_key);
    match mine {
        Some(index) => {
            if !ignore_key && state.registrations[index].key != key {
                return Err(CONFLICT);
            }
            // SPC-4 6.16.3: SPEC_I_PT from an I_T nexus that is already registered is an
            // invalid field.
            if spec_i_pt.is_some() {
                return Err(invalid_field_in_param(20, Some(3)).into());
            }
            if sa_key == 0 {
                unregister(state, index, effects);
            } else {
                state.registrations[index].key = sa_key;
            }
            Ok(())
        }
        None => {
            if !ignore_key && key != 0 {
                return Err(CONFLICT);
            }
            if sa_key == 0 {
                // Unregistering an I_T nexus that is not registered: nothing to do.
                return Ok(());
            }
            let mut added = registrations_for(
                &req.me.initiator,
                req.me.target_port,
                *all_tg_pt,
                sa_key,
                req.ports,
            );
            if let Some(ids) = spec_i_pt {
                for (id, offset) in ids {
                    let new =
                        registrations_for(id, req.me.target_port, *all_tg_pt, sa_key, req.ports);
                    // An initiator port that is already registered (or named twice) cannot be
                    // registered again this way.
                    let taken = new.iter().any(|n| {
                        state
                            .registrations
                            .iter()
                            .chain(added.iter())
                            .any(|r| r.port == n.port && r.initiator.overlaps(&n.initiator))
                    });
                    if taken {
                        return Err(invalid_field_in_param(clamp16(*offset), None).into());
                    }
                    added.extend(new);
                }
            }
            if state.registrations.len() + added.len() > MAX_REGISTRATIONS {
                return Err(insufficient_registration_resources().into());
            }
            state.registrations.extend(added);
            Ok(())
        }
    }
}

/// The registrations of `initiator` with `key`: through `port`, or through every target port
/// with ALL_TG_PT.
fn registrations_for(
    initiator: &TransportId,
    port: u16,
    all_tg_pt: bool,
    key: u64,
    ports: &TargetPorts,
) -> Vec<Registration> {
    let through: Vec<u16> = if all_tg_pt {
        ports.ports.iter().map(|p| p.relative_id).collect()
    } else {
        vec![port]
    };
    through
        .into_iter()
        .map(|port| Registration {
            initiator: initiator.clone(),
            port,
            key,
            all_tg_pt,
        })
        .collect()
}

/// Removes the registration at `index` (SPC-4 5.12.11.3): a reservation it held goes with it,
/// unless it is of an all-registrants type and other registrants remain. Releasing a
/// registrants-only reservation this way tells the other registrants (RESERVATIONS
/// RELEASED); the sender itself gets no unit attention for its own action.
fn unregister(state: &mut PrState, index: usize, effects: &mut Effects) {
    let holds = state.index_holds(index);
    state.registrations.remove(index);
    let Some(res) = &state.reservation else {
        return;
    };
    if res.kind.all_registrants() {
        if state.registrations.is_empty() {
            state.reservation = None;
        }
        return;
    }
    if holds {
        let kind = res.kind;
        state.reservation = None;
        if kind.registrants_have_access() {
            effects.notify(state.registrations.clone(), ua::RESERVATIONS_RELEASED);
        }
    }
}

/// RESERVE (SPC-4 5.12.9).
fn reserve(state: &mut PrState, mine: usize, kind: PrType) -> Result<(), Failure> {
    match &state.reservation {
        None => {
            state.reservation = Some(Reservation {
                kind,
                holder: state.registrations[mine].holder(),
            });
            Ok(())
        }
        // The holder reserving again with the same type: nothing changes.
        Some(res) if res.kind == kind && state.index_holds(mine) => Ok(()),
        Some(_) => Err(CONFLICT),
    }
}

/// RELEASE (SPC-4 5.12.11.2.2).
fn release(
    state: &mut PrState,
    mine: usize,
    kind: PrType,
    effects: &mut Effects,
) -> Result<(), Failure> {
    let Some(res) = &state.reservation else {
        return Ok(());
    };
    if !state.index_holds(mine) {
        return Ok(());
    }
    if res.kind != kind {
        // INVALID RELEASE OF PERSISTENT RESERVATION.
        return Err(SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x26, 0x04).into());
    }
    state.reservation = None;
    if kind.registrants_have_access() {
        let others = state
            .registrations
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != mine)
            .map(|(_, r)| r.clone())
            .collect::<Vec<_>>();
        effects.notify(others, ua::RESERVATIONS_RELEASED);
    }
    Ok(())
}

/// CLEAR (SPC-4 5.12.11.2.6): every registration and the reservation go; every other
/// registrant learns it (RESERVATIONS PREEMPTED).
fn clear(state: &mut PrState, mine: usize, effects: &mut Effects) {
    let others = state
        .registrations
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != mine)
        .map(|(_, r)| r.clone())
        .collect::<Vec<_>>();
    state.registrations.clear();
    state.reservation = None;
    effects.notify(others, ua::RESERVATIONS_PREEMPTED);
}

/// PREEMPT and PREEMPT AND ABORT (SPC-4 5.12.11.2.4, 5.12.11.2.5).
fn preempt(
    state: &mut PrState,
    req: &Request<'_>,
    mine: usize,
    kind: PrType,
    abort: bool,
    effects: &mut Effects,
) -> Result<(), Failure> {
    let sa_key = req.params.sa_key();
    let me = state.registrations[mine].holder();
    let reservation = state.reservation.clone();
    let holder_key = state.holder_key();
    let removed: Vec<Registration> = match &reservation {
        // An all-registrants reservation preempted with key 0: every other registration goes,
        // and the sender reserves anew (SPC-4 5.12.11.2.4.3).
        Some(res) if res.kind.all_registrants() && sa_key == 0 => {
            let removed = take_registrations(state, |r| r.holder() != me);
            state.reservation = Some(Reservation {
                kind,
                holder: me.clone(),
            });
            removed
        }
        // The key of the holder of another type: the reservation moves to the sender, the
        // holder's registrations (but never the sender's) go.
        Some(res) if !res.kind.all_registrants() && holder_key == Some(sa_key) => {
            let removed = take_registrations(state, |r| r.key == sa_key && r.holder() != me);
            let changed = res.kind != kind;
            state.reservation = Some(Reservation {
                kind,
                holder: me.clone(),
            });
            if changed {
                // SPC-4 5.12.11.2.4.3 f): registrants that stay learn that the type changed.
                let stay = state
                    .registrations
                    .iter()
                    .filter(|r| r.holder() != me)
                    .cloned()
                    .collect::<Vec<_>>();
                effects.notify(stay, ua::RESERVATIONS_RELEASED);
            }
            removed
        }
        // No reservation, or a key that does not name the holder: the registrations with that
        // key go (the sender's too, if it is one of them), the reservation stays
        // (SPC-4 5.12.11.2.4.2).
        _ => {
            if sa_key == 0 {
                return Err(invalid_field_in_param(8, None).into());
            }
            if !state.registrations.iter().any(|r| r.key == sa_key) {
                return Err(CONFLICT);
            }
            let removed = take_registrations(state, |r| r.key == sa_key);
            if let Some(res) = &state.reservation {
                let gone = if res.kind.all_registrants() {
                    state.registrations.is_empty()
                } else {
                    !state.registrations.iter().any(|r| r.holder() == res.holder)
                };
                if gone {
                    state.reservation = None;
                }
            }
            removed
        }
    };
    let others: Vec<Registration> = removed
        .iter()
        .filter(|r| r.holder() != me)
        .cloned()
        .collect();
    effects.notify(others, ua::REGISTRATIONS_PREEMPTED);
    if abort {
        effects.aborted = removed;
    }
    Ok(())
}

/// Removes and returns the registrations `pred` picks.
fn take_registrations(
    state: &mut PrState,
    pred: impl Fn(&Registration) -> bool,
) -> Vec<Registration> {
    let (removed, kept) = std::mem::take(&mut state.registrations)
        .into_iter()
        .partition(|r| pred(r));
    state.registrations = kept;
    removed
}

/// REGISTER AND MOVE (SPC-4 5.12.8).
fn register_and_move(
    state: &mut PrState,
    req: &Request<'_>,
    mine: Option<usize>,
) -> Result<(), Failure> {
    let ProutParameters::Move {
        key,
        sa_key,
        unreg,
        relative_port,
        transport_id,
        ..
    } = req.params
    else {
        return Err(invalid_field_in_param(0, None).into());
    };
    let Some(mine) = mine else {
        return Err(CONFLICT);
    };
    if state.registrations[mine].key != *key {
        return Err(CONFLICT);
    }
    let Some(res) = state.reservation.clone() else {
        // "If ... there is no persistent reservation established, then the command shall be
        // terminated with ... INVALID FIELD IN CDB."
        return Err(invalid_field_in_cdb(1, Some(4)).into());
    };
    if !state.index_holds(mine) || res.kind.all_registrants() {
        return Err(CONFLICT);
    }
    if *sa_key == 0 {
        return Err(invalid_field_in_param(8, None).into());
    }
    // The destination is one initiator port through an existing target port, and not the
    // sender.
    if !matches!(transport_id, TransportId::IscsiPort { .. }) {
        return Err(invalid_field_in_param(24, None).into());
    }
    if req.ports.port(*relative_port).is_none() {
        return Err(invalid_field_in_param(18, None).into());
    }
    let dest = NexusIdentity {
        initiator: transport_id.clone(),
        target_port: *relative_port,
    };
    if dest == *req.me {
        return Err(invalid_field_in_param(24, None).into());
    }
    // Register the destination (or re-key it: "It is not an error for a REGISTER AND MOVE
    // service action to register an I_T nexus that is already registered").
    let holder = match state.registration_of(&dest) {
        Some(i) => {
            state.registrations[i].key = *sa_key;
            state.registrations[i].holder()
        }
        None => {
            if state.registrations.len() >= MAX_REGISTRATIONS {
                return Err(insufficient_registration_resources().into());
            }
            let reg = Registration {
                initiator: dest.initiator.clone(),
                port: dest.target_port,
                key: *sa_key,
                all_tg_pt: false,
            };
            let holder = reg.holder();
            state.registrations.push(reg);
            holder
        }
    };
    // The reservation moves with its type and scope (the CDB's are ignored).
    state.reservation = Some(Reservation {
        kind: res.kind,
        holder,
    });
    if *unreg {
        if let Some(i) = state.registration_of(req.me) {
            state.registrations.remove(i);
        }
    }
    Ok(())
}

fn clamp16(v: usize) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}
