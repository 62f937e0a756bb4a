//! SANITIZE (SBC-4 4.11, 5.30): OVERWRITE, BLOCK ERASE (thin LUs) and EXIT FAILURE MODE, on
//! LUs whose configuration allows it ([`LuOptions::sanitize`](crate::LuOptions::sanitize)).
//! CRYPTOGRAPHIC ERASE is not offered (the LU stores nothing encrypted), so its service
//! action is an invalid field like any other.
//!
//! A sanitize operation starts inside an exclusive hold of the LU's I/O lock, so every
//! command that was touching the medium has finished, and the reservations are asked again
//! in that hold (no PERSISTENT RESERVE OUT can take effect between the dispatcher's look and
//! the start). It then runs on a thread of its own. Every command that touches the medium
//! looks at the sanitize state inside its own hold of the I/O lock, so none does while the
//! operation runs (see [`LogicalUnit`](crate::LogicalUnit)). While it runs, every command
//! but INQUIRY, REQUEST SENSE, REPORT LUNS and REPORT SUPPORTED OPERATION CODES ends with NOT
//! READY / SANITIZE IN PROGRESS, and REQUEST SENSE reports how far it has come (a progress
//! indication). It survives ABORT TASK, every reset and the loss of the I_T nexus that
//! started it; only its SANITIZE command's wait (IMMED=0) can be aborted. If it fails, the LU
//! is in sanitize failure mode: medium access ends with MEDIUM ERROR / SANITIZE COMMAND
//! FAILED until a sanitize succeeds, or, if the failed one allowed it (AUSE=1), until EXIT
//! FAILURE MODE.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sluice_storage::BlockDevice;

use crate::access;
use crate::field::{be16, u8_at};
use crate::lu::{Cmd, CmdResult, LogicalUnit};
use crate::opcodes::Op;
use crate::pr::Failure;
use crate::sense::{invalid_field_in_cdb, SenseData, SenseKey};

/// Service action OVERWRITE.
pub(crate) const OVERWRITE: u8 = 0x01;
/// Service action BLOCK ERASE.
pub(crate) const BLOCK_ERASE: u8 = 0x02;
/// Service action EXIT FAILURE MODE.
pub(crate) const EXIT_FAILURE_MODE: u8 = 0x1F;

/// Bytes written (or discarded) per step, between updates of the progress.
const STEP_BYTES: u64 = 1 << 20;

/// How often a SANITIZE with IMMED=0 looks at its abort signal while it waits.
const ABORT_POLL: Duration = Duration::from_millis(20);

/// The sanitize state of a LU.
#[derive(Debug, Default)]
pub(crate) enum SanitizeState {
    /// No sanitize has failed, none runs.
    #[default]
    Idle,
    /// A sanitize operation runs (or has just ended, which the next look notices).
    Running(Arc<Progress>),
    /// The last sanitize failed; `ause` says whether EXIT FAILURE MODE may end that.
    Failed {
        /// The failed operation's AUSE bit.
        ause: bool,
    },
}

impl SanitizeState {
    /// Notices a finished operation: back to idle, or into failure mode.
    fn settle(&mut self) {
        if let SanitizeState::Running(p) = self {
            if let Some(outcome) = p.outcome() {
                *self = match outcome {
                    Ok(()) => SanitizeState::Idle,
                    Err(()) => SanitizeState::Failed { ause: p.ause },
                };
            }
        }
    }

    /// Whether `op` may run now (the dispatcher asks for every command not allowed during a
    /// sanitize).
    pub(crate) fn check(&mut self, op: Op) -> CmdResult {
        self.settle();
        match self {
            SanitizeState::Idle => Ok(()),
            SanitizeState::Running(p) => Err(p.in_progress()),
            SanitizeState::Failed { .. } if op.needs_medium() && op != Op::Sanitize => {
                Err(SenseData::new(SenseKey::MEDIUM_ERROR, 0x31, 0x03))
            }
            SanitizeState::Failed { .. } => Ok(()),
        }
    }

    /// What REQUEST SENSE reports while a sanitize runs: SANITIZE IN PROGRESS and how far it
    /// is.
    pub(crate) fn sense(&mut self) -> Option<SenseData> {
        self.settle();
        match self {
            SanitizeState::Running(p) => Some(p.in_progress()),
            _ => None,
        }
    }
}

/// A sanitize operation, shared between its thread and the LU.
#[derive(Debug)]
pub(crate) struct Progress {
    done: AtomicU64,
    total: u64,
    ause: bool,
    outcome: Mutex<Option<Result<(), ()>>>,
    finished: Condvar,
}

impl Progress {
    fn outcome(&self) -> Option<Result<(), ()>> {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, outcome: Result<(), ()>) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.finished.notify_all();
    }

    /// Waits until the operation ends or `abort` says to stop waiting.
    fn wait(&self, cmd: &Cmd<'_>) -> CmdResult {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match *outcome {
                Some(Ok(())) => return Ok(()),
                Some(Err(())) => return Err(SenseData::new(SenseKey::MEDIUM_ERROR, 0x31, 0x03)),
                None if cmd.aborted() => return Err(crate::abort::aborted()),
                None => {}
            }
            outcome = self
                .finished
                .wait_timeout(outcome, ABORT_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// NOT READY / SANITIZE IN PROGRESS, with the PROGRESS INDICATION (SPC-4 4.5.2.4.4): the
    /// fraction done, in 65536ths.
    fn in_progress(&self) -> SenseData {
        let done = self.done.load(Ordering::Relaxed).min(self.total);
        let fraction = (u128::from(done) * 65536 / u128::from(self.total.max(1))).min(65535);
        let [hi, lo] = (fraction as u16).to_be_bytes();
        let mut s = SenseData::new(SenseKey::NOT_READY, 0x04, 0x1B);
        s.sense_key_specific = Some([0x80, hi, lo]);
        s
    }
}

/// WABEREQ in the Block Device Characteristics VPD page (byte 7): 01b, a read after BLOCK
/// ERASE succeeds (it returns zeros), where BLOCK ERASE is offered; else 0.
pub(crate) fn erase_read_behaviour(lu: &LogicalUnit) -> u8 {
    if lu.config().options.sanitize.is_some() && lu.thin() {
        0x40
    } else {
        0x00
    }
}

/// What one sanitize operation does.
enum Work {
    Overwrite {
        /// The initialization pattern.
        pattern: Vec<u8>,
        passes: u8,
        invert: bool,
    },
    BlockErase,
}

/// SANITIZE. RESERVATION CONFLICT is a status, not sense: it ends with a [`Failure`].
pub(crate) fn sanitize(cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let lu = cmd.lu;
    let b1 = u8_at(cmd.cdb, 1);
    let (immed, ause, sa) = (b1 & 0x80 != 0, b1 & 0x20 != 0, b1 & 0x1F);
    let param_len = usize::from(be16(cmd.cdb, 7));
    let work = match sa {
        OVERWRITE => overwrite_parameters(cmd, param_len)?,
        _ if param_len != 0 => {
            // BLOCK ERASE and EXIT FAILURE MODE take no parameter list.
            return Err(invalid_field_in_cdb(7, Some(7)).into());
        }
        BLOCK_ERASE => Work::BlockErase,
        _ => {
            lu.writable()?;
            return Ok(exit_failure_mode(lu)?);
        }
    };
    let progress = {
        let _io = lu.io_exclusive();
        lu.gate(cmd.nexus, cmd.fabric, || {
            access::classify(cmd.cdb).unwrap_or(access::UNLISTED)
        })?;
        lu.writable()?;
        let mut st = lu.state();
        st.sanitize.settle();
        match st.sanitize {
            SanitizeState::Running(ref p) => return Err(p.in_progress().into()),
            // SBC-4 5.30.1: after a failure in restricted mode, only a restricted sanitize
            // may be asked for.
            SanitizeState::Failed { ause: false } if ause => {
                return Err(invalid_field_in_cdb(1, Some(5)).into());
            }
            _ => {}
        }
        let progress = Arc::new(Progress {
            done: AtomicU64::new(0),
            total: lu.device().size_bytes(),
            ause,
            outcome: Mutex::new(None),
            finished: Condvar::new(),
        });
        st.sanitize = SanitizeState::Running(Arc::clone(&progress));
        progress
    };
    let rate = lu
        .config()
        .options
        .sanitize
        .and_then(|s| s.overwrite_bytes_per_s);
    start(Arc::clone(lu.device()), work, rate, Arc::clone(&progress));
    if immed {
        return Ok(());
    }
    Ok(progress.wait(cmd)?)
}

/// Validates an OVERWRITE parameter list (SBC-4 5.30.3): OVERWRITE COUNT 1-31, TEST 00b,
/// an INITIALIZATION PATTERN of 1 to one block's bytes, and a list exactly that long.
fn overwrite_parameters(cmd: &Cmd<'_>, param_len: usize) -> Result<Work, SenseData> {
    let bs = cmd.lu.block_size() as usize;
    if param_len < 5 || param_len > bs + 4 {
        return Err(invalid_field_in_cdb(7, Some(7)));
    }
    let data = cmd.data_out.contiguous(param_len);
    let Some(list) = data.get(..param_len) else {
        return Err(crate::sense::param_list_length_error());
    };
    let passes = list[0] & 0x1F;
    let pattern_len = usize::from(be16(list, 2));
    let bad = |byte: u16, bit: u8| Err(crate::sense::invalid_field_in_param(byte, Some(bit)));
    if passes == 0 {
        return bad(0, 4);
    }
    if list[0] & 0x60 != 0 {
        return bad(0, 6);
    }
    if pattern_len == 0 || pattern_len > bs || pattern_len + 4 != param_len {
        return bad(2, 7);
    }
    Ok(Work::Overwrite {
        pattern: list[4..].to_vec(),
        passes,
        invert: list[0] & 0x80 != 0,
    })
}

/// EXIT FAILURE MODE: leaves sanitize failure mode when the failed operation allowed it.
fn exit_failure_mode(lu: &LogicalUnit) -> CmdResult {
    let mut st = lu.state();
    st.sanitize.settle();
    match st.sanitize {
        SanitizeState::Running(ref p) => Err(p.in_progress()),
        SanitizeState::Failed { ause: false } => Err(invalid_field_in_cdb(1, Some(4))),
        _ => {
            st.sanitize = SanitizeState::Idle;
            Ok(())
        }
    }
}

/// Runs `work` on a thread of its own.
fn start(device: Arc<dyn BlockDevice>, work: Work, rate: Option<u64>, progress: Arc<Progress>) {
    let thread = Arc::clone(&progress);
    let spawned = std::thread::Builder::new()
        .name("sanitize".into())
        .spawn(move || {
            // A failure leaves the LU in sanitize failure mode, which is how the initiator
            // learns of it (SBC-4 4.11.3).
            let outcome = run(device.as_ref(), &work, rate, &thread);
            thread.finish(outcome.map_err(|_| ()));
        });
    if spawned.is_err() {
        // No thread, no sanitize: it failed before it began.
        progress.finish(Err(()));
    }
}

fn run(
    device: &dyn BlockDevice,
    work: &Work,
    rate: Option<u64>,
    progress: &Progress,
) -> Result<(), sluice_storage::StorageError> {
    let total = device.size_bytes();
    let started = Instant::now();
    match work {
        Work::BlockErase => {
            let mut at = 0;
            while at < total {
                let n = (total - at).min(STEP_BYTES);
                device.discard(at, n)?;
                at += n;
                progress.done.store(at, Ordering::Relaxed);
            }
        }
        Work::Overwrite {
            pattern,
            passes,
            invert,
        } => {
            let bs = device.block_size().max(1) as usize;
            for pass in 0..*passes {
                // Each block holds the pattern from its first byte, repeated to fill it; with
                // INVERT, every other pass writes it inverted.
                let flip = if *invert && pass % 2 == 1 { 0xFF } else { 0x00 };
                let block: Vec<u8> = pattern.iter().map(|b| b ^ flip).cycle().take(bs).collect();
                // STEP_BYTES is a multiple of any block size up to 1 MiB.
                let piece: Vec<u8> = block
                    .iter()
                    .copied()
                    .cycle()
                    .take(STEP_BYTES as usize)
                    .collect();
                let mut at = 0;
                while at < total {
                    let n = (total - at).min(STEP_BYTES);
                    device.write_at(at, &piece[..n as usize], false)?;
                    at += n;
                    let done = u64::from(pass) * total + at;
                    progress
                        .done
                        .store(done / u64::from(*passes), Ordering::Relaxed);
                    throttle(started, done, rate);
                }
            }
        }
    }
    device.flush()
}

/// Sleeps as long as writing `done` bytes at `rate` bytes a second is ahead of the clock.
fn throttle(started: Instant, done: u64, rate: Option<u64>) {
    let Some(rate) = rate.filter(|&r| r > 0) else {
        return;
    };
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(ahead);
    }
}

#[cfg(test)]
#[path = "sanitize_tests.rs"]
mod tests;
