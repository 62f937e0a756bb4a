//! Task attributes (SAM-5 8.6): the work the core hands out may run concurrently, so ORDERED
//! and HEAD OF QUEUE tasks are held back here until they may start.

use super::*;

fn with_attr(pdu: Pdu, attr: TaskAttr) -> Pdu {
    match pdu {
        Pdu::ScsiCommand(mut c) => {
            c.attr = attr;
            Pdu::ScsiCommand(c)
        }
        other => other,
    }
}

fn itts(works: &[ScsiWork]) -> Vec<u32> {
    works.iter().map(|w| w.ticket.itt.0).collect()
}

#[test]
fn simple_tasks_all_start_at_once() {
    let mut r = Rig::new(&[1]);
    for i in 1..=4 {
        r.send(1, read(i, i, 1));
    }
    assert_eq!(itts(&r.works()), [1, 2, 3, 4]);
}

#[test]
fn an_ordered_task_waits_for_every_older_task_and_younger_simple_ones_wait_for_it() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 1));
    r.send(1, read(2, 2, 1));
    r.send(1, with_attr(read(3, 3, 1), TaskAttr::Ordered));
    r.send(1, read(4, 4, 1));
    let first = r.works();
    assert_eq!(
        itts(&first),
        [1, 2],
        "the ORDERED task and those after it wait"
    );
    r.complete(&first[1]);
    assert!(r.works().is_empty(), "task 1 still runs");
    r.complete(&first[0]);
    let second = r.works();
    assert_eq!(itts(&second), [3], "the ORDERED task alone");
    r.complete(&second[0]);
    assert_eq!(itts(&r.works()), [4]);
    let answered = r.drain(1).len();
    assert_eq!(
        answered, 3,
        "a Data-In with its status for each of 1, 2 and 3"
    );
}

#[test]
fn an_ordered_task_waits_for_an_older_write_still_collecting_its_data() {
    let mut r = Rig::new(&[1]);
    r.send(1, write(1, 1, 1));
    let r2t = match r.drain(1).pop() {
        Some(Pdu::R2t(r2t)) => r2t,
        other => panic!("expected an R2T, got {other:?}"),
    };
    r.send(1, with_attr(read(2, 2, 1), TaskAttr::Ordered));
    assert!(r.works().is_empty(), "the older write is in the task set");
    r.send(1, data_out(1, r2t.ttt, 0, BLOCK as usize, true));
    let write_work = r.works();
    assert_eq!(itts(&write_work), [1]);
    r.complete(&write_work[0]);
    assert_eq!(itts(&r.works()), [2]);
}

#[test]
fn head_of_queue_starts_at_once_and_holds_back_the_rest_while_it_runs() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 1));
    r.send(1, with_attr(read(2, 2, 1), TaskAttr::HeadOfQueue));
    r.send(1, read(3, 3, 1));
    r.send(1, with_attr(read(4, 4, 1), TaskAttr::Ordered));
    let first = r.works();
    assert_eq!(itts(&first), [1, 2]);
    r.complete(&first[1]);
    assert_eq!(
        itts(&r.works()),
        [3],
        "the SIMPLE task once HEAD OF QUEUE completed"
    );
}

#[test]
fn tasks_of_other_lus_are_not_held() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 1));
    r.send(1, with_attr(read(2, 2, 1), TaskAttr::Ordered));
    let Pdu::ScsiCommand(mut other) = read(3, 3, 1) else {
        unreachable!()
    };
    other.lun = Lun(1);
    r.send(1, Pdu::ScsiCommand(other));
    assert_eq!(itts(&r.works()), [1, 3]);
}

#[test]
fn abort_task_of_a_held_task_answers_once_it_is_dropped_unrun() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 1));
    r.send(1, with_attr(read(2, 2, 1), TaskAttr::Ordered));
    let first = r.works();
    assert_eq!(itts(&first), [1]);
    assert!(r.s.has_held_work());
    r.send(1, tmf_req(50, 3, TmfFunction::AbortTask, 2, 2));
    let pdus = r.drain(1);
    assert_eq!(tmf_response_of(&pdus), Some(TmfResponse::FunctionComplete));
    assert!(
        !r.s.has_held_work(),
        "the aborted task left without running"
    );
    r.complete(&first[0]);
    assert!(r.works().is_empty(), "task 2 never runs");
    assert_eq!(r.s.task_count(), 0);
}

#[test]
fn abort_task_set_waits_for_the_running_task_and_drops_the_held_one() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 1));
    r.send(1, with_attr(read(2, 2, 1), TaskAttr::Ordered));
    let first = r.works();
    r.send(1, tmf_req(50, 3, TmfFunction::AbortTaskSet, 0, 0));
    assert!(r.drain(1).is_empty(), "task 1 still runs");
    r.complete(&first[0]);
    assert!(r.works().is_empty());
    let pdus = r.drain(1);
    assert!(matches!(pdus[..], [Pdu::TaskMgmtResponse(_)]), "{pdus:?}");
    assert_eq!(r.s.task_count(), 0);
}

#[test]
fn a_lost_connection_drops_its_held_work() {
    let mut r = Rig::new(&[1, 2]);
    r.send(1, read(1, 1, 1));
    r.send(2, with_attr(read(2, 2, 1), TaskAttr::Ordered));
    let first = r.works();
    assert_eq!(itts(&first), [1]);
    r.closed(2);
    assert!(!r.s.has_held_work());
    r.complete(&first[0]);
    assert!(r.works().is_empty());
    assert_eq!(r.s.task_count(), 0);
}
