//! `listen` entries with `,TPGT`, `[[portal_group]]` ALUA settings and `state_dir`: what they
//! become, and the errors they can meet.

use std::path::Path;

use sluice_target::config::{AccessState, ConfigError};

use super::{kind_at, parse, MINIMAL};
use crate::config_file::kind::{ErrorKind, FileKey};
use crate::config_file::parse_str;

#[test]
fn tagged_portals_make_portal_groups() {
    let src = format!(
        "listen = [\"127.0.0.1:3260\", \"127.0.0.2:3260,2\", \"[::1]:3261,2\"]\n\
         state_dir = \"state\"\n\
         [[portal_group]]\ntag = 2\nalua_state = \"standby\"\nalua_group = 20\n{MINIMAL}"
    );
    let c = parse_str(&src, Path::new("/etc/sluice/target.toml")).unwrap();
    assert_eq!(c.portals.len(), 3);
    assert_eq!(c.portal_groups.len(), 2);
    let (one, two) = (&c.portal_groups[0], &c.portal_groups[1]);
    assert_eq!((one.tag, one.portals.len()), (1, 1));
    assert_eq!(one.alua_state, AccessState::ActiveOptimized);
    assert_eq!((two.tag, two.portals.len(), two.alua_group), (2, 2, 20));
    assert_eq!(two.alua_state, AccessState::Standby);
    assert_eq!(
        c.state_dir.as_deref(),
        Some(Path::new("/etc/sluice/state")),
        "relative to the file"
    );
    // Without tags or [[portal_group]], one implicit group.
    let c = parse(&format!("listen = [\"127.0.0.1:3260\"]\n{MINIMAL}")).unwrap();
    assert!(c.portal_groups.is_empty());
    assert_eq!(c.state_dir, None);
}

#[test]
fn portal_group_errors_point_at_their_line() {
    let src = format!("listen = [\"127.0.0.1:3260\"]\n[[portal_group]]\ntag = 2\n{MINIMAL}");
    assert_eq!(kind_at(&src, 3), ErrorKind::PortalGroupWithoutPortal(2));
    let src = format!(
        "listen = [\"127.0.0.1:3260\", \"127.0.0.2:3260,2\"]\n[[portal_group]]\ntag = 2\n\
         [[portal_group]]\ntag = 2\n{MINIMAL}"
    );
    assert_eq!(kind_at(&src, 5), ErrorKind::PortalGroupTwice(2));
    let src = format!("listen = [\"127.0.0.1:3260\"]\n[[portal_group]]\ntag = 0\n{MINIMAL}");
    assert!(matches!(
        kind_at(&src, 3),
        ErrorKind::OutOfRange {
            key: FileKey::PortalGroupTag,
            ..
        }
    ));
    let src = format!("listen = [\"127.0.0.1:3260,0\"]\n{MINIMAL}");
    assert!(matches!(kind_at(&src, 1), ErrorKind::Syntax(_)));
    let src = format!(
        "listen = [\"127.0.0.1:3260,2\"]\n[[portal_group]]\ntag = 2\nalua_state = \"offline\"\n{MINIMAL}"
    );
    let kind = kind_at(&src, 4);
    assert!(kind.to_string().contains("standby"), "{kind}");
    // Two portal groups in one ALUA group must agree on its state: found by validation,
    // reported at `listen`.
    let src = format!(
        "listen = [\"127.0.0.1:3260\", \"127.0.0.2:3260,2\"]\n\
         [[portal_group]]\ntag = 2\nalua_group = 1\nalua_state = \"standby\"\n{MINIMAL}"
    );
    assert_eq!(
        kind_at(&src, 1),
        ErrorKind::Invalid(ConfigError::AluaGroupState(1))
    );
}
