//! The command window (RFC 7143 section 4.2.2.1): CmdSN ordering on the target, CmdSN
//! allocation on the initiator.
//!
//! Target: each command goes through [`CommandWindow::handle_command`]; commands are delivered
//! in CmdSN order (section 4.2.2.1: "commands ... are delivered in order"), commands ahead of
//! ExpCmdSN wait until the gap fills, and the window slides as commands end. Window slots are
//! linear: a delivered non-immediate command takes a [`Slot`], which is not `Clone`, and the
//! slot comes back exactly once, through [`CommandWindow::release`]. Immediate commands take
//! none, so their completion cannot widen the window. Initiator: [`CmdSnAllocator`] numbers
//! commands and stops when the target's window is full.

use crate::map::Map;

use crate::seq::SeqNum;

/// Why a command was dropped without delivery.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Ignored {
    /// CmdSN below ExpCmdSN: already delivered (a duplicate or a stale retry).
    Stale,
    /// CmdSN above MaxCmdSN (or exactly 2^31 away): outside the window.
    OutOfWindow,
    /// A command with this CmdSN is already waiting (or was cancelled, see
    /// [`CommandWindow::cancel`]).
    Duplicate,
}

/// What happened to a command handed to [`CommandWindow::handle_command`].
#[derive(Debug, Eq, PartialEq)]
pub enum Admission<T> {
    /// Run it now; a non-immediate command comes with its slot. Afterwards call
    /// [`CommandWindow::poll_ready`] for commands it unblocked.
    Deliver(T, Option<Slot>),
    /// Kept until the commands before it arrive.
    Held,
    /// Dropped silently (section 4.2.2.1: "The target MUST silently ignore any non-immediate
    /// command outside of this range or non-immediate duplicates within the range").
    Ignored(Ignored, T),
}

/// One place in the command window, held by a delivered non-immediate command until it ends.
///
/// Deliberately neither `Clone` nor `Copy`: [`CommandWindow::release`] consumes it, so a slot
/// can be given back only once, and only a delivered command has one to give.
#[derive(Debug, Eq, PartialEq)]
#[must_use = "a slot must be given back with CommandWindow::release when its command ends"]
pub struct Slot {
    cmd_sn: SeqNum,
}

impl Slot {
    /// The CmdSN of the command that holds the slot.
    pub fn cmd_sn(&self) -> SeqNum {
        self.cmd_sn
    }
}

/// Target-side command window of one session.
///
/// Invariant: `depth` = slots held (commands delivered and not yet ended) + free places in
/// `[exp_cmd_sn, max_cmd_sn]`. MaxCmdSN never goes backwards: a place once advertised stays
/// usable, and MaxCmdSN advances only when a slot is released.
#[derive(Debug)]
pub struct CommandWindow<T> {
    exp_cmd_sn: SeqNum,
    max_cmd_sn: SeqNum,
    depth: u32,
    active: u32,
    /// Commands waiting for a gap to fill; `None` marks a CmdSN cancelled before it arrived.
    held: Map<u32, Option<T>>,
}

impl<T> CommandWindow<T> {
    /// A window expecting `first_cmd_sn` next (from the leading login) that accepts `depth`
    /// (at least 1, below 2^31) non-immediate commands at once:
    /// MaxCmdSN = ExpCmdSN + depth - 1.
    pub fn new(first_cmd_sn: SeqNum, depth: u32) -> Self {
        let depth = depth.clamp(1, 0x7fff_ffff);
        Self {
            exp_cmd_sn: first_cmd_sn,
            max_cmd_sn: first_cmd_sn.add(depth - 1),
            depth,
            active: 0,
            held: Map::default(),
        }
    }

    /// ExpCmdSN to advertise.
    pub fn exp_cmd_sn(&self) -> SeqNum {
        self.exp_cmd_sn
    }

    /// MaxCmdSN to advertise. Never less than ExpCmdSN - 1 (section 4.2.2.1).
    pub fn max_cmd_sn(&self) -> SeqNum {
        self.max_cmd_sn
    }

    /// The number of commands the window admits at once.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Slots held: commands delivered (non-immediate) and not yet ended.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Commands held waiting for a gap to fill (cancelled places included).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Where a command with `cmd_sn` would go, without taking it: `Ok(true)` deliver now,
    /// `Ok(false)` hold.
    pub fn classify(&self, cmd_sn: SeqNum, immediate: bool) -> Result<bool, Ignored> {
        // Section 4.2.2.1: immediate commands carry the current CmdSN and are not ordered by
        // the window; they are delivered at once and do not advance ExpCmdSN.
        if immediate {
            return Ok(true);
        }
        if self.held.contains_key(&cmd_sn.get()) {
            return Err(Ignored::Duplicate);
        }
        if cmd_sn == self.exp_cmd_sn && self.window_open() {
            return Ok(true);
        }
        if cmd_sn.serial_cmp(self.exp_cmd_sn).is_none() || cmd_sn.lt(self.exp_cmd_sn) {
            return Err(Ignored::Stale);
        }
        if !cmd_sn.in_window(self.exp_cmd_sn, self.max_cmd_sn) {
            return Err(Ignored::OutOfWindow);
        }
        Ok(false)
    }

    /// Takes in a command: deliver it, hold it, or drop it.
    pub fn handle_command(&mut self, cmd_sn: SeqNum, immediate: bool, cmd: T) -> Admission<T> {
        match self.classify(cmd_sn, immediate) {
            Ok(true) if immediate => Admission::Deliver(cmd, None),
            Ok(true) => {
                let slot = self.accept();
                self.skip_cancelled();
                Admission::Deliver(cmd, Some(slot))
            }
            Ok(false) => {
                self.held.insert(cmd_sn.get(), Some(cmd));
                Admission::Held
            }
            Err(why) => Admission::Ignored(why, cmd),
        }
    }

    /// The next held command that is now in order, with its slot, if any. Call until `None`
    /// after each delivery, cancellation or release.
    pub fn poll_ready(&mut self) -> Option<(T, Slot)> {
        if !self.window_open() {
            return None;
        }
        let cmd = self.held.remove(&self.exp_cmd_sn.get())??;
        let slot = self.accept();
        self.skip_cancelled();
        Some((cmd, slot))
    }

    /// A delivered command ended: its slot is free again (MaxCmdSN + 1).
    pub fn release(&mut self, slot: Slot) {
        let Slot { cmd_sn: _ } = slot;
        debug_assert!(self.active > 0, "more slots released than taken");
        self.active = self.active.saturating_sub(1);
        self.max_cmd_sn = self.max_cmd_sn.next();
        self.skip_cancelled();
    }

    /// Considers the command with `cmd_sn` received and ended without running it: a held one
    /// is dropped, one not yet arrived will be ignored as a duplicate when it does, and the
    /// window moves past it like past any completed command. Returns `false` (and does nothing)
    /// when `cmd_sn` is not in `[ExpCmdSN, MaxCmdSN]` (RFC 7143 section 11.5.1, ABORT TASK
    /// with a RefCmdSN "within the valid CmdSN window").
    pub fn cancel(&mut self, cmd_sn: SeqNum) -> bool {
        if !cmd_sn.in_window(self.exp_cmd_sn, self.max_cmd_sn) {
            return false;
        }
        self.held.insert(cmd_sn.get(), None);
        self.skip_cancelled();
        true
    }

    /// Whether `cmd_sn` is held (or cancelled) waiting for its turn.
    pub fn is_held(&self, cmd_sn: SeqNum) -> bool {
        self.held.contains_key(&cmd_sn.get())
    }

    /// Drops every held command matching `pred` (e.g. those of a connection that failed),
    /// leaving cancelled places so that the window still moves past them. Returns how many.
    pub fn cancel_held_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let mut n = 0;
        for cmd in self.held.values_mut() {
            if cmd.as_ref().is_some_and(&mut pred) {
                *cmd = None;
                n += 1;
            }
        }
        self.skip_cancelled();
        n
    }

    /// Drops every held command matching `pred` and returns their CmdSNs, leaving their places
    /// empty: the window waits for each CmdSN to arrive again (connection recovery, RFC 7143
    /// section 11.14: the target "MUST discard all requests not yet acknowledged via the
    /// ExpCmdSN that were issued on the specified connection", and the initiator retries them
    /// with their original CmdSN). [`CommandWindow::cancel`] skips one for good.
    pub fn discard_held_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<SeqNum> {
        let discarded: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, c)| c.as_ref().is_some_and(&mut pred))
            .map(|(sn, _)| *sn)
            .collect();
        for sn in &discarded {
            self.held.remove(sn);
        }
        discarded.into_iter().map(SeqNum).collect()
    }

    /// The held commands, to attach what arrives for them before their turn (cancelled
    /// places are skipped).
    pub fn held_commands_mut(&mut self) -> impl Iterator<Item = (SeqNum, &mut T)> {
        self.held
            .iter_mut()
            .filter_map(|(sn, c)| c.as_mut().map(|c| (SeqNum(*sn), c)))
    }

    /// The held commands, for inspection (cancelled places are skipped).
    pub fn held_commands(&self) -> impl Iterator<Item = (SeqNum, &T)> {
        self.held
            .iter()
            .filter_map(|(sn, c)| c.as_ref().map(|c| (SeqNum(*sn), c)))
    }

    fn window_open(&self) -> bool {
        self.exp_cmd_sn.in_window(self.exp_cmd_sn, self.max_cmd_sn)
    }

    fn accept(&mut self) -> Slot {
        let slot = Slot {
            cmd_sn: self.exp_cmd_sn,
        };
        self.exp_cmd_sn = self.exp_cmd_sn.next();
        self.active += 1;
        debug_assert!(self.active <= self.depth);
        slot
    }

    /// Cancelled places at ExpCmdSN pass through the window at once: taken and given back.
    fn skip_cancelled(&mut self) {
        while self.window_open() && matches!(self.held.get(&self.exp_cmd_sn.get()), Some(None)) {
            self.held.remove(&self.exp_cmd_sn.get());
            let slot = self.accept();
            self.release(slot);
        }
    }
}

/// Initiator-side CmdSN numbering within the target's window (section 4.2.2.1).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct CmdSnAllocator {
    cmd_sn: SeqNum,
    exp_cmd_sn: SeqNum,
    max_cmd_sn: SeqNum,
}

impl CmdSnAllocator {
    /// Starts from the login: the first CmdSN to use and the target's ExpCmdSN/MaxCmdSN.
    pub fn new(cmd_sn: SeqNum, exp_cmd_sn: SeqNum, max_cmd_sn: SeqNum) -> Self {
        Self {
            cmd_sn,
            exp_cmd_sn,
            max_cmd_sn,
        }
    }

    /// The CmdSN the next command carries.
    pub fn current(&self) -> SeqNum {
        self.cmd_sn
    }

    /// The target's ExpCmdSN as last learnt.
    pub fn exp_cmd_sn(&self) -> SeqNum {
        self.exp_cmd_sn
    }

    /// The target's MaxCmdSN as last learnt.
    pub fn max_cmd_sn(&self) -> SeqNum {
        self.max_cmd_sn
    }

    /// Whether a non-immediate command may be sent now: CmdSN within [ExpCmdSN, MaxCmdSN].
    pub fn can_send(&self) -> bool {
        self.cmd_sn.le(self.max_cmd_sn) && self.exp_cmd_sn.le(self.cmd_sn)
    }

    /// Numbers a non-immediate command and advances, or `None` when the window is closed.
    // Not an iterator: `None` means "not now", and a later `update` can reopen the window.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<SeqNum> {
        if !self.can_send() {
            return None;
        }
        let sn = self.cmd_sn;
        self.cmd_sn = sn.next();
        Some(sn)
    }

    /// The CmdSN of an immediate command: the current one, not advanced (section 4.2.2.1).
    pub fn immediate(&self) -> SeqNum {
        self.cmd_sn
    }

    /// Applies the ExpCmdSN/MaxCmdSN of a PDU from the target. Returns whether anything
    /// changed.
    ///
    /// Section 4.2.2.1: "If the PDU MaxCmdSN is less than the PDU ExpCmdSN-1 (in Serial
    /// Arithmetic Sense), they are both ignored. If the PDU MaxCmdSN is greater than the local
    /// MaxCmdSN (in Serial Arithmetic Sense), it updates the local MaxCmdSN; otherwise, it is
    /// ignored. If the PDU ExpCmdSN is greater than the local ExpCmdSN (in Serial Arithmetic
    /// Sense), it updates the local ExpCmdSN; otherwise, it is ignored." An ExpCmdSN beyond
    /// the next CmdSN would acknowledge commands never sent, so it is ignored too.
    pub fn update(&mut self, exp_cmd_sn: SeqNum, max_cmd_sn: SeqNum) -> bool {
        let exp_minus_one = SeqNum::new(exp_cmd_sn.get().wrapping_sub(1));
        if max_cmd_sn.lt(exp_minus_one) || max_cmd_sn.serial_cmp(exp_minus_one).is_none() {
            return false;
        }
        let mut changed = false;
        if max_cmd_sn.gt(self.max_cmd_sn) {
            self.max_cmd_sn = max_cmd_sn;
            changed = true;
        }
        if exp_cmd_sn.gt(self.exp_cmd_sn) && exp_cmd_sn.le(self.cmd_sn) {
            self.exp_cmd_sn = exp_cmd_sn;
            changed = true;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver<T: std::fmt::Debug>(a: Admission<T>) -> (T, Option<Slot>) {
        match a {
            Admission::Deliver(t, slot) => (t, slot),
            other => panic!("expected delivery, got {other:?}"),
        }
    }

    #[test]
    fn in_order_commands_are_delivered_and_fill_the_window() {
        let mut w = CommandWindow::new(SeqNum(1), 3);
        assert_eq!((w.exp_cmd_sn(), w.max_cmd_sn()), (SeqNum(1), SeqNum(3)));
        let mut slots = Vec::new();
        for sn in 1..=3 {
            let (cmd, slot) = deliver(w.handle_command(SeqNum(sn), false, sn));
            assert_eq!(cmd, sn);
            assert_eq!(slot.as_ref().map(Slot::cmd_sn), Some(SeqNum(sn)));
            slots.extend(slot);
        }
        // Window full: MaxCmdSN = ExpCmdSN - 1.
        assert_eq!((w.exp_cmd_sn(), w.max_cmd_sn()), (SeqNum(4), SeqNum(3)));
        assert_eq!(
            w.handle_command(SeqNum(4), false, 4),
            Admission::Ignored(Ignored::OutOfWindow, 4)
        );
        w.release(slots.remove(0));
        assert_eq!(w.max_cmd_sn(), SeqNum(4));
        slots.extend(deliver(w.handle_command(SeqNum(4), false, 4)).1);
        assert_eq!(w.active(), 3);
        for slot in slots {
            w.release(slot);
        }
        assert_eq!((w.active(), w.max_cmd_sn()), (0, SeqNum(7)));
    }

    #[test]
    fn a_gap_holds_later_commands_until_it_fills() {
        let mut w = CommandWindow::new(SeqNum(10), 8);
        assert_eq!(w.handle_command(SeqNum(12), false, 12), Admission::Held);
        assert_eq!(w.handle_command(SeqNum(11), false, 11), Admission::Held);
        assert_eq!(
            w.handle_command(SeqNum(12), false, 99),
            Admission::Ignored(Ignored::Duplicate, 99)
        );
        assert!(w.poll_ready().is_none());
        assert_eq!(deliver(w.handle_command(SeqNum(10), false, 10)).0, 10);
        assert_eq!(
            w.poll_ready().map(|(c, s)| (c, s.cmd_sn())),
            Some((11, SeqNum(11)))
        );
        assert_eq!(
            w.poll_ready().map(|(c, s)| (c, s.cmd_sn())),
            Some((12, SeqNum(12)))
        );
        assert!(w.poll_ready().is_none());
        assert_eq!(w.exp_cmd_sn(), SeqNum(13));
        assert_eq!(
            w.handle_command(SeqNum(11), false, 11),
            Admission::Ignored(Ignored::Stale, 11)
        );
        assert_eq!(
            w.handle_command(SeqNum(18), false, 18),
            Admission::Ignored(Ignored::OutOfWindow, 18)
        );
    }

    #[test]
    fn discarded_held_commands_leave_holes_their_retries_fill() {
        let mut w = CommandWindow::new(SeqNum(10), 8);
        assert_eq!(w.handle_command(SeqNum(11), false, "a11"), Admission::Held);
        assert_eq!(w.handle_command(SeqNum(12), false, "b12"), Admission::Held);
        let gone = w.discard_held_where(|c| c.starts_with('a'));
        assert_eq!(gone, vec![SeqNum(11)]);
        assert_eq!(deliver(w.handle_command(SeqNum(10), false, "b10")).0, "b10");
        // CmdSN 11 is waited for again, not skipped: 12 stays held.
        assert!(w.poll_ready().is_none());
        assert_eq!(w.exp_cmd_sn(), SeqNum(11));
        assert_eq!(deliver(w.handle_command(SeqNum(11), false, "a11")).0, "a11");
        assert_eq!(w.poll_ready().map(|(c, _)| c), Some("b12"));
    }

    #[test]
    fn immediate_commands_take_no_slot() {
        let mut w = CommandWindow::new(SeqNum(5), 1);
        let (c, slot) = deliver(w.handle_command(SeqNum(5), true, 'i'));
        assert_eq!((c, slot), ('i', None));
        assert_eq!(w.exp_cmd_sn(), SeqNum(5));
        assert_eq!(w.active(), 0);
        let (_, slot) = deliver(w.handle_command(SeqNum(5), false, 'n'));
        // Window closed, but an immediate command still goes through, and takes nothing.
        assert_eq!(deliver(w.handle_command(SeqNum(6), true, 'j')).1, None);
        assert_eq!(w.max_cmd_sn(), SeqNum(5));
        w.release(slot.expect("a non-immediate command holds a slot"));
        assert_eq!(w.max_cmd_sn(), SeqNum(6));
    }

    #[test]
    fn window_wraps_at_2_pow_32() {
        let mut w = CommandWindow::new(SeqNum(u32::MAX - 1), 4);
        assert_eq!(w.max_cmd_sn(), SeqNum(1));
        assert_eq!(w.handle_command(SeqNum(0), false, 0), Admission::Held);
        assert_eq!(w.handle_command(SeqNum(1), false, 1), Admission::Held);
        assert_eq!(
            w.handle_command(SeqNum(2), false, 2),
            Admission::Ignored(Ignored::OutOfWindow, 2)
        );
        deliver(w.handle_command(SeqNum(u32::MAX - 1), false, 7));
        assert_eq!(deliver(w.handle_command(SeqNum(u32::MAX), false, 8)).0, 8);
        assert_eq!(w.poll_ready().map(|p| p.0), Some(0));
        assert_eq!(w.poll_ready().map(|p| p.0), Some(1));
        assert_eq!(w.exp_cmd_sn(), SeqNum(2));
        assert_eq!(
            w.handle_command(SeqNum(u32::MAX - 3), false, 9),
            Admission::Ignored(Ignored::Stale, 9)
        );
        // Exactly 2^31 away is undefined in RFC 1982: never accepted.
        assert!(w.classify(SeqNum(0x8000_0002), false).is_err());
    }

    #[test]
    fn a_cancelled_cmd_sn_fills_its_gap_and_its_late_command_is_a_duplicate() {
        let mut w = CommandWindow::new(SeqNum(1), 4);
        assert_eq!(w.handle_command(SeqNum(2), false, 2), Admission::Held);
        // CmdSN 1 never arrives; ABORT TASK names it: the window moves on.
        assert!(w.cancel(SeqNum(1)));
        assert_eq!(w.exp_cmd_sn(), SeqNum(2));
        assert_eq!(
            w.max_cmd_sn(),
            SeqNum(5),
            "the cancelled place went through the window"
        );
        let (c, slot) = w.poll_ready().expect("CmdSN 2 is now in order");
        assert_eq!(c, 2);
        assert_eq!(
            w.handle_command(SeqNum(1), false, 1),
            Admission::Ignored(Ignored::Stale, 1)
        );
        // A held command cancelled: skipped when its turn comes.
        assert_eq!(w.handle_command(SeqNum(4), false, 4), Admission::Held);
        assert!(w.cancel(SeqNum(4)));
        assert_eq!(
            w.handle_command(SeqNum(4), false, 44),
            Admission::Ignored(Ignored::Duplicate, 44)
        );
        let (_, s3) = deliver(w.handle_command(SeqNum(3), false, 3));
        assert_eq!(w.exp_cmd_sn(), SeqNum(5));
        assert!(w.poll_ready().is_none());
        w.release(slot);
        w.release(s3.unwrap());
        assert_eq!(w.active(), 0);
        assert_eq!(w.max_cmd_sn().distance_from(w.exp_cmd_sn()), 3);
        // Outside the window: nothing to cancel.
        assert!(!w.cancel(SeqNum(1)));
        assert!(!w.cancel(SeqNum(100)));
    }

    #[test]
    fn held_commands_of_a_failed_connection_are_skipped() {
        let mut w = CommandWindow::new(SeqNum(1), 8);
        assert_eq!(
            w.handle_command(SeqNum(2), false, ('b', 2)),
            Admission::Held
        );
        assert_eq!(
            w.handle_command(SeqNum(3), false, ('a', 3)),
            Admission::Held
        );
        assert_eq!(w.cancel_held_where(|c| c.0 == 'b'), 1);
        let (_, s1) = deliver(w.handle_command(SeqNum(1), false, ('a', 1)));
        let (c, s3) = w.poll_ready().expect("CmdSN 3 follows the skipped 2");
        assert_eq!(c, ('a', 3));
        w.release(s1.unwrap());
        w.release(s3);
        assert_eq!((w.exp_cmd_sn(), w.active()), (SeqNum(4), 0));
        assert_eq!(w.max_cmd_sn(), SeqNum(11));
    }

    #[test]
    fn allocator_respects_the_window_and_wraps() {
        let mut a = CmdSnAllocator::new(SeqNum(u32::MAX), SeqNum(u32::MAX), SeqNum(0));
        assert_eq!(a.next(), Some(SeqNum(u32::MAX)));
        assert_eq!(a.immediate(), SeqNum(0));
        assert_eq!(a.next(), Some(SeqNum(0)));
        assert!(!a.can_send());
        assert_eq!(a.next(), None);
        assert!(a.update(SeqNum(1), SeqNum(2)));
        assert_eq!(a.next(), Some(SeqNum(1)));
        assert_eq!(a.next(), Some(SeqNum(2)));
        assert_eq!(a.next(), None);
    }

    #[test]
    fn allocator_ignores_stale_and_invalid_updates() {
        let mut a = CmdSnAllocator::new(SeqNum(10), SeqNum(10), SeqNum(20));
        // MaxCmdSN < ExpCmdSN - 1: both ignored.
        assert!(!a.update(SeqNum(12), SeqNum(10)));
        // MaxCmdSN = ExpCmdSN - 1 (window closed) is valid, but not an increase of MaxCmdSN.
        for _ in 0..3 {
            a.next();
        }
        assert!(a.update(SeqNum(13), SeqNum(12)));
        assert_eq!((a.exp_cmd_sn(), a.max_cmd_sn()), (SeqNum(13), SeqNum(20)));
        // Older values do not move anything back.
        assert!(!a.update(SeqNum(11), SeqNum(15)));
        // ExpCmdSN beyond the next CmdSN acknowledges unsent commands: ignored.
        assert!(a.update(SeqNum(30), SeqNum(29)));
        assert_eq!((a.exp_cmd_sn(), a.max_cmd_sn()), (SeqNum(13), SeqNum(29)));
    }
}
