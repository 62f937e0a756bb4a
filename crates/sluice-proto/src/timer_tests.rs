use std::time::Duration;

use super::*;

#[test]
fn the_timer_moves_only_earlier() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let mut t = TimerArm::new();
    assert_eq!(t.update(None), None);
    assert!(!t.is_armed());
    assert_eq!(t.update(Some(at(100))), Some(at(100)));
    // Later deadlines (the idle deadline after every PDU) leave it alone.
    assert_eq!(t.update(Some(at(150))), None);
    assert_eq!(t.update(Some(at(100))), None);
    assert_eq!(t.update(None), None);
    assert!(t.is_armed());
    // An earlier one moves it.
    assert_eq!(t.update(Some(at(40))), Some(at(40)));
    // After it fires, the next deadline arms it again, later or not.
    t.fired();
    assert!(!t.is_armed());
    assert_eq!(t.update(Some(at(150))), Some(at(150)));
}
