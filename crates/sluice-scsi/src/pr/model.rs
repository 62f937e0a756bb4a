//! The state persistent reservations keep for one logical unit (SPC-4 5.12): registrations,
//! the reservation and the generation counter, with the questions every command asks of them.
//! Plain values: the service actions work on a copy and the copy replaces the original only
//! when the command succeeds (and, with APTPL, once it is on disk).

use crate::ports::NexusIdentity;
use crate::transport_id::TransportId;

/// Most registrations a logical unit keeps. Each costs a TransportID (at most 248 bytes);
/// a REGISTER beyond this fails with INSUFFICIENT REGISTRATION RESOURCES, so no initiator can
/// make the table grow without bound. Clusters register a handful of paths per node.
pub const MAX_REGISTRATIONS: usize = 1024;

/// A persistent reservation TYPE (SPC-4 table 211).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum PrType {
    /// Write Exclusive (1h).
    WriteExclusive,
    /// Exclusive Access (3h).
    ExclusiveAccess,
    /// Write Exclusive – Registrants Only (5h).
    WriteExclusiveRegistrantsOnly,
    /// Exclusive Access – Registrants Only (6h).
    ExclusiveAccessRegistrantsOnly,
    /// Write Exclusive – All Registrants (7h).
    WriteExclusiveAllRegistrants,
    /// Exclusive Access – All Registrants (8h).
    ExclusiveAccessAllRegistrants,
}

impl PrType {
    /// Every type, in code order.
    pub const ALL: [PrType; 6] = [
        PrType::WriteExclusive,
        PrType::ExclusiveAccess,
        PrType::WriteExclusiveRegistrantsOnly,
        PrType::ExclusiveAccessRegistrantsOnly,
        PrType::WriteExclusiveAllRegistrants,
        PrType::ExclusiveAccessAllRegistrants,
    ];

    /// The TYPE code.
    pub fn code(self) -> u8 {
        match self {
            PrType::WriteExclusive => 0x1,
            PrType::ExclusiveAccess => 0x3,
            PrType::WriteExclusiveRegistrantsOnly => 0x5,
            PrType::ExclusiveAccessRegistrantsOnly => 0x6,
            PrType::WriteExclusiveAllRegistrants => 0x7,
            PrType::ExclusiveAccessAllRegistrants => 0x8,
        }
    }

    /// The type with this code.
    pub fn from_code(code: u8) -> Option<Self> {
        PrType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Write Exclusive types let every I_T nexus read.
    pub fn write_exclusive(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusive
                | PrType::WriteExclusiveRegistrantsOnly
                | PrType::WriteExclusiveAllRegistrants
        )
    }

    /// Registrants-only and all-registrants types give every registered I_T nexus access.
    pub fn registrants_have_access(self) -> bool {
        !matches!(self, PrType::WriteExclusive | PrType::ExclusiveAccess)
    }

    /// All-registrants types: every registered I_T nexus holds the reservation.
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusiveAllRegistrants | PrType::ExclusiveAccessAllRegistrants
        )
    }
}

/// One registered I_T nexus (or, for a device-format TransportID given with SPEC_I_PT, every
/// I_T nexus of that initiator device through one target port).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Registration {
    /// The initiator port (or device).
    pub initiator: TransportId,
    /// The RELATIVE TARGET PORT IDENTIFIER of the target port. A registration with
    /// ALL_TG_PT=1 is kept as one registration per target port (SPC-4 5.12.7: the initiator
    /// port is registered "through each target port"), each unregistered on its own.
    pub port: u16,
    /// The reservation key (never 0: registering key 0 unregisters).
    pub key: u64,
    /// Whether it was made with ALL_TG_PT=1 (READ FULL STATUS reports it).
    pub all_tg_pt: bool,
}

impl Registration {
    /// Whether this registration is the one of `id`.
    pub fn covers(&self, id: &NexusIdentity) -> bool {
        self.port == id.target_port && self.initiator.covers(&id.initiator)
    }

    /// The I_T nexus (or nexuses) it names, as a reservation holder is recorded.
    pub fn holder(&self) -> Holder {
        Holder {
            initiator: self.initiator.clone(),
            port: self.port,
        }
    }
}

/// The registration holding a reservation, by identity (its key may change).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Holder {
    /// The initiator port (or device) of the holding registration.
    pub initiator: TransportId,
    /// Its target port.
    pub port: u16,
}

/// A persistent reservation (always LU_SCOPE: element scope is obsolete).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Reservation {
    /// Its type.
    pub kind: PrType,
    /// The holding registration; for all-registrants types every registrant holds it, and
    /// this names the one that reserved.
    pub holder: Holder,
}

/// Everything persistent reservations keep for one logical unit.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct PrState {
    /// PRGENERATION: counts successful REGISTER, REGISTER AND IGNORE EXISTING KEY, CLEAR,
    /// PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE; zero after power on (SPC-4 6.15.2).
    pub generation: u32,
    /// Whether the state survives a loss of power (the last APTPL bit received).
    pub aptpl: bool,
    /// The registrations, in the order they were made.
    pub registrations: Vec<Registration>,
    /// The reservation, if any.
    pub reservation: Option<Reservation>,
}

impl PrState {
    /// The position of the registration of `id`, if it is registered.
    pub fn registration_of(&self, id: &NexusIdentity) -> Option<usize> {
        self.registrations.iter().position(|r| r.covers(id))
    }

    /// Whether the registration at `index` holds the reservation.
    pub fn index_holds(&self, index: usize) -> bool {
        let (Some(res), Some(reg)) = (&self.reservation, self.registrations.get(index)) else {
            return false;
        };
        res.kind.all_registrants() || res.holder == reg.holder()
    }

    /// Whether `id` holds the reservation (SPC-4 5.12.10).
    pub fn holds(&self, id: &NexusIdentity) -> bool {
        self.registration_of(id)
            .is_some_and(|i| self.index_holds(i))
    }

    /// The key READ RESERVATION reports: zero for all-registrants types (SPC-4 5.12.10),
    /// else the holder's.
    pub fn holder_key(&self) -> Option<u64> {
        let res = self.reservation.as_ref()?;
        if res.kind.all_registrants() {
            return Some(0);
        }
        self.registrations
            .iter()
            .find(|r| r.holder() == res.holder)
            .map(|r| r.key)
    }

    /// Whether a command of class `class` from `id` conflicts with the reservation.
    pub(crate) fn conflicts(&self, id: &NexusIdentity, class: crate::access::PrClass) -> bool {
        use crate::access::PrClass;
        let Some(res) = &self.reservation else {
            return false;
        };
        let registered = self.registration_of(id);
        if registered.is_some_and(|i| self.index_holds(i)) {
            return false;
        }
        let registrant_access = registered.is_some() && res.kind.registrants_have_access();
        match class {
            PrClass::Allowed | PrClass::PersistentOut | PrClass::Legacy => false,
            PrClass::ReadLike => !(res.kind.write_exclusive() || registrant_access),
            PrClass::Restricted => !registrant_access,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::PrClass;

    fn id(n: u8, port: u16) -> NexusIdentity {
        NexusIdentity {
            initiator: TransportId::iscsi_port(&format!("iqn.2026-11.test:i{n}"), [n; 6]),
            target_port: port,
        }
    }

    fn reg(n: u8, port: u16, key: u64) -> Registration {
        Registration {
            initiator: id(n, port).initiator,
            port,
            key,
            all_tg_pt: false,
        }
    }

    fn reserved(kind: PrType) -> PrState {
        PrState {
            generation: 0,
            aptpl: false,
            registrations: vec![reg(1, 1, 0xA), reg(2, 1, 0xB)],
            reservation: Some(Reservation {
                kind,
                holder: reg(1, 1, 0xA).holder(),
            }),
        }
    }

    #[test]
    fn type_codes() {
        for t in PrType::ALL {
            assert_eq!(PrType::from_code(t.code()), Some(t));
        }
        for bad in [0, 2, 4, 9, 0xF] {
            assert_eq!(PrType::from_code(bad), None);
        }
    }

    #[test]
    fn registrations_are_per_target_port() {
        let s = reserved(PrType::WriteExclusive);
        assert_eq!(s.registration_of(&id(1, 1)), Some(0));
        assert_eq!(s.registration_of(&id(1, 2)), None, "other target port");
        assert_eq!(s.registration_of(&id(3, 1)), None);
        assert!(s.holds(&id(1, 1)) && !s.holds(&id(2, 1)));
        assert_eq!(s.holder_key(), Some(0xA));
        let ar = reserved(PrType::ExclusiveAccessAllRegistrants);
        assert!(ar.holds(&id(2, 1)));
        assert_eq!(ar.holder_key(), Some(0));
    }

    /// The access matrix of SPC-4/SBC-3 for a non-holder: registered (nexus 2) and not
    /// registered (nexus 3), reading and writing.
    #[test]
    fn conflict_matrix() {
        use PrType::*;
        // (type, registered read, registered write, unregistered read, unregistered write)
        let rows = [
            (ExclusiveAccess, false, false, false, false),
            (WriteExclusive, true, false, true, false),
            (ExclusiveAccessRegistrantsOnly, true, true, false, false),
            (WriteExclusiveRegistrantsOnly, true, true, true, false),
            (ExclusiveAccessAllRegistrants, true, true, false, false),
            (WriteExclusiveAllRegistrants, true, true, true, false),
        ];
        for (kind, rr, rw, ur, uw) in rows {
            let s = reserved(kind);
            let ok = |n, class| !s.conflicts(&id(n, 1), class);
            assert_eq!(ok(2, PrClass::ReadLike), rr, "{kind:?} registered read");
            assert_eq!(ok(2, PrClass::Restricted), rw, "{kind:?} registered write");
            assert_eq!(ok(3, PrClass::ReadLike), ur, "{kind:?} unregistered read");
            assert_eq!(
                ok(3, PrClass::Restricted),
                uw,
                "{kind:?} unregistered write"
            );
            assert!(ok(3, PrClass::Allowed));
            assert!(ok(1, PrClass::Restricted), "the holder may do anything");
        }
        assert!(!PrState::default().conflicts(&id(3, 1), PrClass::Restricted));
    }
}
