//! The multipath decisions, without I/O: which path the next command takes, and what a
//! command's ending means for it (done, retry here, retry elsewhere, re-read the ALUA states,
//! or fail because resending it is unsafe). The driver in `mod.rs` carries them out.

use sluice_scsi::{SenseData, SenseKey};

/// An asymmetric access state (SPC-4 6.27, REPORT TARGET PORT GROUPS, table 166).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum AluaState {
    /// 0h: active/optimized.
    ActiveOptimized,
    /// 1h: active/non-optimized.
    ActiveNonOptimized,
    /// 2h: standby (only a few commands, no media access).
    Standby,
    /// 3h: unavailable.
    Unavailable,
    /// Eh: offline.
    Offline,
    /// Fh: transitioning between states.
    Transitioning,
    /// Any other value (reserved).
    Other(u8),
}

impl AluaState {
    /// The state of a descriptor's ASYMMETRIC ACCESS STATE field (low 4 bits).
    pub fn from_code(code: u8) -> Self {
        match code & 0x0f {
            0x0 => Self::ActiveOptimized,
            0x1 => Self::ActiveNonOptimized,
            0x2 => Self::Standby,
            0x3 => Self::Unavailable,
            0xe => Self::Offline,
            0xf => Self::Transitioning,
            c => Self::Other(c),
        }
    }

    /// The state's name, as `sluice target --alua-state` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ActiveOptimized => "active-optimized",
            Self::ActiveNonOptimized => "active-non-optimized",
            Self::Standby => "standby",
            Self::Unavailable => "unavailable",
            Self::Offline => "offline",
            Self::Transitioning => "transitioning",
            Self::Other(_) => "reserved",
        }
    }

    /// Preference for I/O: lower is better; `None` for states that do not serve reads and
    /// writes (SPC-4 5.15.2.4-5.15.2.6: standby, unavailable and offline refuse media access;
    /// a transitioning group answers NOT READY until it settles).
    fn rank(self) -> Option<u8> {
        match self {
            Self::ActiveOptimized => Some(0),
            Self::ActiveNonOptimized => Some(1),
            _ => None,
        }
    }
}

/// One path as the selector sees it.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct PathView {
    /// Logged in and not known to have failed.
    pub up: bool,
    /// Its target port group's state, as last read.
    pub state: AluaState,
}

/// Round-robin among the usable paths of the best ALUA state: active/optimized ones while
/// there are any, else active/non-optimized ones (SPC-4 5.15.2.2-5.15.2.3: both serve every
/// command; the non-optimized path is slower, e.g. the I/O is shipped to the owner).
#[derive(Debug, Default)]
pub struct Selector {
    next: usize,
}

impl Selector {
    /// The path the next command takes, or `None` when no path can serve I/O now.
    pub fn choose(&mut self, paths: &[PathView]) -> Option<usize> {
        let best = paths
            .iter()
            .filter(|p| p.up)
            .filter_map(|p| p.state.rank())
            .min()?;
        let n = paths.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let p = paths[i];
            if p.up && p.state.rank() == Some(best) {
                self.next = (i + 1) % n;
                return Some(i);
            }
        }
        None
    }
}

/// Whether a command may be sent again on another path after its first path failed with
/// the command's fate unknown (it may or may not have run at the target).
///
/// READ, WRITE, VERIFY, WRITE SAME, UNMAP, SYNCHRONIZE CACHE and the commands that only
/// report are idempotent: running one twice leaves the medium as running it once. The
/// caller has not seen the first attempt end, so it has issued nothing since that a late
/// first attempt could overwrite (an application orders dependent writes by waiting for
/// completion, SAM-5 8.6). Not idempotent, and so never resent blindly:
/// - COMPARE AND WRITE (SBC-4 5.3): if the first attempt ran, the medium now holds the new
///   data and a resend fails with MISCOMPARE, reporting a lost race that was in fact won (or,
///   with a caller that retries on miscompare, taking a lock twice).
/// - PERSISTENT RESERVE OUT (SPC-4 6.16): REGISTER with a changed key, RESERVE, PREEMPT or
///   CLEAR applied twice is not the same as once (the second REGISTER carries an old key and
///   fails with RESERVATION CONFLICT; a repeated PREEMPT AND ABORT aborts the caller's own
///   later commands).
/// - WRITE ATOMIC, ORWRITE, EXTENDED COPY, SANITIZE, SET TARGET PORT GROUPS, RESERVE/RELEASE
///   and anything not known to be idempotent: the caller decides.
pub fn retry_safe(cdb: &[u8]) -> bool {
    matches!(
        cdb.first(),
        Some(
            0x00 // TEST UNIT READY
            | 0x08 | 0x28 | 0xa8 | 0x88 // READ(6/10/12/16)
            | 0x0a | 0x2a | 0xaa | 0x8a // WRITE(6/10/12/16)
            | 0x2e | 0x8e // WRITE AND VERIFY(10/16)
            | 0x2f | 0xaf | 0x8f // VERIFY(10/12/16)
            | 0x35 | 0x91 // SYNCHRONIZE CACHE(10/16)
            | 0x41 | 0x93 // WRITE SAME(10/16)
            | 0x42 // UNMAP
            | 0x12 // INQUIRY
            | 0x25 // READ CAPACITY(10)
            | 0x1a | 0x5a // MODE SENSE(6/10)
            | 0xa0 // REPORT LUNS
        )
    ) || is_service_action_in_read(cdb)
}

/// SERVICE ACTION IN(16) READ CAPACITY(16) and GET LBA STATUS, MAINTENANCE IN REPORT TARGET
/// PORT GROUPS: reports, safe to repeat.
fn is_service_action_in_read(cdb: &[u8]) -> bool {
    matches!(
        (cdb.first(), cdb.get(1).map(|b| b & 0x1f)),
        (Some(0x9e), Some(0x10 | 0x12)) | (Some(0xa3), Some(0x0a))
    )
}

/// What a command's SCSI ending means for multipath.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Verdict {
    /// Hand the outcome to the caller.
    Done,
    /// The target changed the ALUA states or the path's group cannot serve the command now:
    /// the command did not run; re-read the states and send it again (on whichever path is
    /// then best).
    RereadAlua,
    /// The path's group is transitioning (SPC-4 5.15.2.7): wait a moment, re-read, resend.
    Transitioning,
}

/// Classifies a completed command's sense data (SPC-4 5.15.2 and the ASC/ASCQ table of
/// SPC-4 4.5.6):
/// - UNIT ATTENTION 2Ah/06h ASYMMETRIC ACCESS STATE CHANGED, 2Ah/07h IMPLICIT ASYMMETRIC
///   ACCESS STATE TRANSITION FAILED: the command was not run, the states moved;
/// - NOT READY 04h/0Ah ASYMMETRIC ACCESS STATE TRANSITION: transitioning;
/// - NOT READY 04h/0Bh TARGET PORT IN STANDBY STATE, 04h/0Ch TARGET PORT IN UNAVAILABLE
///   STATE: this path's group cannot serve media access any more.
pub fn classify(sense: Option<&SenseData>) -> Verdict {
    let Some(s) = sense else {
        return Verdict::Done;
    };
    match (s.key, s.asc, s.ascq) {
        (SenseKey::UNIT_ATTENTION, 0x2a, 0x06 | 0x07) => Verdict::RereadAlua,
        (SenseKey::NOT_READY, 0x04, 0x0a) => Verdict::Transitioning,
        (SenseKey::NOT_READY, 0x04, 0x0b | 0x0c) => Verdict::RereadAlua,
        _ => Verdict::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(up: bool, state: AluaState) -> PathView {
        PathView { up, state }
    }

    #[test]
    fn optimized_paths_take_turns() {
        let paths = [
            view(true, AluaState::ActiveOptimized),
            view(true, AluaState::ActiveNonOptimized),
            view(true, AluaState::ActiveOptimized),
        ];
        let mut s = Selector::default();
        let picks: Vec<_> = (0..4).map(|_| s.choose(&paths).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
    }

    #[test]
    fn non_optimized_serves_when_no_optimized_path_is_up() {
        let mut paths = [
            view(false, AluaState::ActiveOptimized),
            view(true, AluaState::ActiveNonOptimized),
            view(true, AluaState::Standby),
        ];
        let mut s = Selector::default();
        assert_eq!(s.choose(&paths), Some(1));
        assert_eq!(s.choose(&paths), Some(1));
        // The optimized path rejoins: it takes the I/O back.
        paths[0].up = true;
        assert_eq!(s.choose(&paths), Some(0));
        assert_eq!(s.choose(&paths), Some(0));
    }

    #[test]
    fn standby_unavailable_and_transitioning_paths_are_not_used() {
        let paths = [
            view(true, AluaState::Standby),
            view(true, AluaState::Unavailable),
            view(true, AluaState::Transitioning),
            view(true, AluaState::Offline),
        ];
        assert_eq!(Selector::default().choose(&paths), None);
        assert_eq!(Selector::default().choose(&[]), None);
    }

    #[test]
    fn only_idempotent_commands_are_resent() {
        use sluice_scsi::cdb;
        assert!(retry_safe(&cdb::read16(0, 1, false)));
        assert!(retry_safe(&cdb::write16(0, 1, false)));
        assert!(retry_safe(&cdb::write10(0, 1, true)));
        assert!(retry_safe(&cdb::read_capacity16(32)));
        assert!(retry_safe(&cdb::sync_cache10(0, 0, false)));
        assert!(!retry_safe(&cdb::compare_and_write(0, 1, false)));
        assert!(!retry_safe(&[0x5f, 0x01, 0, 0, 0, 0, 0, 0, 24, 0])); // PR OUT REGISTER
        assert!(!retry_safe(&cdb::extended_copy(64)));
        assert!(!retry_safe(&cdb::write_atomic16(0, 1, false)));
        assert!(!retry_safe(&[0xa4, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0])); // SET TPGS
        assert!(!retry_safe(&[]));
    }

    #[test]
    fn alua_sense_asks_for_a_reread() {
        let s = |k, asc, ascq| SenseData::new(k, asc, ascq);
        assert_eq!(
            classify(Some(&s(SenseKey::UNIT_ATTENTION, 0x2a, 0x06))),
            Verdict::RereadAlua
        );
        assert_eq!(
            classify(Some(&s(SenseKey::NOT_READY, 0x04, 0x0b))),
            Verdict::RereadAlua
        );
        assert_eq!(
            classify(Some(&s(SenseKey::NOT_READY, 0x04, 0x0a))),
            Verdict::Transitioning
        );
        // Power on, reset: not an ALUA event; the caller sees it.
        assert_eq!(
            classify(Some(&s(SenseKey::UNIT_ATTENTION, 0x29, 0x00))),
            Verdict::Done
        );
        assert_eq!(
            classify(Some(&s(SenseKey::MISCOMPARE, 0x1d, 0x00))),
            Verdict::Done
        );
        assert_eq!(classify(None), Verdict::Done);
    }

    #[test]
    fn state_codes_decode() {
        assert_eq!(AluaState::from_code(0x80), AluaState::ActiveOptimized);
        assert_eq!(AluaState::from_code(0x01), AluaState::ActiveNonOptimized);
        assert_eq!(AluaState::from_code(0x0f), AluaState::Transitioning);
        assert_eq!(AluaState::from_code(0x05), AluaState::Other(5));
    }
}
