//! LUs whose size changes outside sluice (an RBD image resized with `rbd resize`, by any
//! client of the cluster): their size is looked at again every [`INTERVAL`], and a change
//! reaches READ CAPACITY and every I_T nexus as the unit attention CAPACITY DATA HAS CHANGED
//! (SBC-4 4.6; SPC-4 6.x, 2Ah/09h), as a resize through sluice's own administration does.
//!
//! librbd follows the image header through its own watch, so asking it for the size is a
//! local call; polling once a second keeps this independent of librbd's notification
//! callbacks (and their threads) at the cost of up to a second's delay.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::info;

use crate::context::Context;

/// How often sizes are looked at.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// Looks at the size of every LU with an external size each [`INTERVAL`] until `stop`
/// turns true (or its sender goes).
pub(crate) async fn run(ctx: Arc<Context>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
        }
        if !any_external(&ctx) {
            continue;
        }
        let ctx = Arc::clone(&ctx);
        // Asking librbd may wait for it to refresh the image header after a resize: off the
        // runtime's threads.
        let _ = tokio::task::spawn_blocking(move || check(&ctx)).await;
    }
}

/// Whether any LU's size may change outside sluice (a target without one pays one look at
/// its LU lists per tick, on the runtime).
fn any_external(ctx: &Context) -> bool {
    ctx.all_targets()
        .iter()
        .any(|t| t.luns().iter().any(|l| l.external_size))
}

/// One look at every LU whose size may change outside sluice.
pub(crate) fn check(ctx: &Context) {
    for target in ctx.all_targets() {
        for lun in target.luns().iter().filter(|l| l.external_size) {
            if let Some(blocks) = lun.device.refresh_size() {
                info!(lun = lun.number, blocks, "capacity changed");
                lun.lu.notify_capacity_changed();
            }
        }
    }
}
