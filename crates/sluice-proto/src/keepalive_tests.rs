//! Tests of the keepalive timer; they read the clock only to get a base instant.

use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn silence_leads_to_one_ping_then_death() {
    let t0 = Instant::now();
    let mut k = Keepalive::new(10 * S, 5 * S, t0);
    assert_eq!(k.handle_timeout(t0 + 9 * S), KeepaliveAction::Nothing);
    assert_eq!(k.handle_timeout(t0 + 10 * S), KeepaliveAction::Ping(1));
    assert_eq!(k.poll_timeout(), t0 + 15 * S);
    assert_eq!(k.handle_timeout(t0 + 14 * S), KeepaliveAction::Nothing);
    assert_eq!(k.handle_timeout(t0 + 15 * S), KeepaliveAction::Dead);
}

#[test]
fn anything_received_keeps_the_connection_alive() {
    let t0 = Instant::now();
    let mut k = Keepalive::new(10 * S, 5 * S, t0);
    k.handle_received(t0 + 8 * S);
    assert_eq!(k.poll_timeout(), t0 + 18 * S);
    assert_eq!(k.handle_timeout(t0 + 18 * S), KeepaliveAction::Ping(1));
    k.handle_received(t0 + 20 * S);
    assert_eq!(k.outstanding_ping(), None);
    assert_eq!(k.handle_timeout(t0 + 30 * S), KeepaliveAction::Ping(2));
}

#[test]
fn tags_skip_the_reserved_range() {
    let t0 = Instant::now();
    let mut k = Keepalive::new(S, S, t0);
    k.next_tag = 0x7fff_ffff;
    assert_eq!(k.handle_timeout(t0 + S), KeepaliveAction::Ping(0x7fff_ffff));
    k.handle_received(t0 + S);
    assert_eq!(k.handle_timeout(t0 + 2 * S), KeepaliveAction::Ping(1));
}
