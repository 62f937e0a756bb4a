//! Solicited data waits behind unsolicited data on the target's side of iSER.
//!
//! A write's unsolicited data (immediate data and unsolicited Data-Out, bounded by
//! FirstBurstLength) travels in the initiator's Sends, its solicited data in RDMA Read
//! Responses the target asked for (RFC 7145 section 7.3.4, section 7.3.6). The two travel in
//! different streams of the connection: Sends on the initiator's request stream, Read
//! Responses on its response stream, and the RDMA layer orders each stream by itself, not
//! one against the other. So an RDMA Read of the first solicited burst can complete at the
//! target before the Sends of the same command's last unsolicited Data-Out arrive.
//!
//! The target's core runs with DataPDUInOrder and DataSequenceInOrder (RFC 7143 sections
//! 13.18 and 13.19): it takes a task's data at continuously increasing offsets, the
//! unsolicited burst (offsets below FirstBurstLength) before any solicited sequence. Over
//! TCP one byte stream gives it that order; over iSER the datamover must. This module holds
//! the Data-Out PDUs made from an RDMA Read completion while the task still awaits
//! unsolicited bytes in Sends, and releases them, in completion order, behind the Send that
//! completes the unsolicited part (or ends it early with the F bit: the core judges the
//! amount, as over TCP).
//!
//! What is held is bounded by the RDMA Reads it came from: the datamover counts held reads
//! with its outstanding ones against `MAX_PENDING_READS`, and a task
//! holds data only while it is on record. A task that ends (its SCSI Response, a task
//! management function that aborts it, a Logout Response) drops what it held.

use std::collections::HashMap;

use super::tmf_scope::{TaskRef, TmfScope};
use crate::pdu::codes::TmfResponse;
use crate::pdu::{DataOut, Pdu, TaskMgmtRequest};
use crate::seq::{Itt, Lun, SeqNum};

/// A write still waiting for unsolicited bytes in Sends.
#[derive(Debug)]
struct Awaiting {
    lun: Lun,
    cmd_sn: SeqNum,
    /// Unsolicited bytes not yet handed to the core.
    missing: u32,
    /// Data-Out made from RDMA Read completions, in completion order.
    held: Vec<Pdu>,
    /// Read completions `held` came from.
    reads: usize,
}

/// Task management functions in flight, at most (each waits for its response from the
/// core; the CmdSN window bounds them, this is the backstop).
pub(crate) const MAX_TMFS: usize = 256;

/// The holding of solicited Data-Out behind unsolicited data, for one connection.
#[derive(Debug, Default)]
pub(crate) struct ReadOrder {
    awaiting: HashMap<Itt, Awaiting>,
    /// Held read completions, over all tasks.
    held_reads: usize,
    /// Data-Out released by the last Sends, for the driver to take.
    released: Vec<Pdu>,
    /// Read completions `released` came from.
    released_reads: usize,
    tmfs: HashMap<Itt, TmfScope>,
}

impl ReadOrder {
    /// Read completions held or released and not yet taken: they count against the bound of
    /// outstanding RDMA Reads.
    pub(crate) fn reads_held(&self) -> usize {
        self.held_reads + self.released_reads
    }

    /// Data-Out PDUs held now.
    pub(crate) fn pdus_held(&self) -> usize {
        self.awaiting.values().map(|a| a.held.len()).sum()
    }

    /// A write command arrived in a Send carrying `immediate` bytes of its `unsolicited`.
    /// A reused ITT starts afresh (what the previous task held is dropped).
    pub(crate) fn command(
        &mut self,
        itt: Itt,
        lun: Lun,
        cmd_sn: SeqNum,
        unsolicited: u32,
        immediate: u32,
    ) {
        self.end_task(itt);
        let missing = unsolicited.saturating_sub(immediate);
        if missing > 0 {
            self.awaiting.insert(
                itt,
                Awaiting {
                    lun,
                    cmd_sn,
                    missing,
                    held: Vec::new(),
                    reads: 0,
                },
            );
        }
    }

    /// An unsolicited Data-Out arrived in a Send (it goes to the core before anything this
    /// releases).
    pub(crate) fn unsolicited(&mut self, d: &DataOut) {
        let Some(a) = self.awaiting.get_mut(&d.itt) else {
            return;
        };
        let len = u32::try_from(d.data.len()).unwrap_or(u32::MAX);
        a.missing = a.missing.saturating_sub(len);
        if a.missing == 0 || d.final_bit {
            if let Some(a) = self.awaiting.remove(&d.itt) {
                self.held_reads -= a.reads;
                self.released_reads += a.reads;
                self.released.extend(a.held);
            }
        }
    }

    /// The Data-Out PDUs of one RDMA Read completion for `itt`: handed back when the core
    /// may have them now, else held.
    pub(crate) fn read_done(&mut self, itt: Itt, pdus: Vec<Pdu>) -> Vec<Pdu> {
        match self.awaiting.get_mut(&itt) {
            Some(a) => {
                a.held.extend(pdus);
                a.reads += 1;
                self.held_reads += 1;
                Vec::new()
            }
            None => pdus,
        }
    }

    /// What the last Sends released, in order.
    pub(crate) fn take_released(&mut self) -> Vec<Pdu> {
        self.released_reads = 0;
        std::mem::take(&mut self.released)
    }

    /// The task is over: what it held is dropped.
    pub(crate) fn end_task(&mut self, itt: Itt) {
        if let Some(a) = self.awaiting.remove(&itt) {
            self.held_reads -= a.reads;
        }
    }

    /// A task management request arrived; `false` when too many are in flight.
    pub(crate) fn tmf_request(&mut self, req: &TaskMgmtRequest) -> bool {
        let Some(scope) = TmfScope::of(req) else {
            return true;
        };
        if self.tmfs.len() >= MAX_TMFS && !self.tmfs.contains_key(&req.itt) {
            return false;
        }
        self.tmfs.insert(req.itt, scope);
        true
    }

    /// The core answered the task management request `itt`: with Function Complete, the
    /// tasks in its scope are over (RFC 7143 section 11.6.1; see [`TmfScope`]).
    pub(crate) fn tmf_response(&mut self, itt: Itt, response: TmfResponse) {
        let Some(scope) = self.tmfs.remove(&itt) else {
            return;
        };
        if response != TmfResponse::FunctionComplete {
            return;
        }
        let mut dropped = 0;
        self.awaiting.retain(|t, a| {
            let ended = scope.covers(TaskRef {
                itt: *t,
                lun: Some(a.lun),
                cmd_sn: a.cmd_sn,
            });
            if ended {
                dropped += a.reads;
            }
            !ended
        });
        self.held_reads -= dropped;
    }

    /// The connection is logging out: nothing held will be wanted.
    pub(crate) fn logout(&mut self) {
        self.awaiting.clear();
        self.held_reads = 0;
        self.tmfs.clear();
    }
}
