//! What each path reports about itself: the logical unit's designators and the target port's
//! relative identifier and group (INQUIRY's Device Identification VPD page, SPC-4 7.8.6), and
//! the target port groups' access states (REPORT TARGET PORT GROUPS, SPC-4 6.27). Every
//! length comes from the target and is checked: a bad answer is an error, never a panic.

use crate::error::Error;
use crate::multipath::policy::AluaState;

/// A designator: (DESIGNATOR TYPE, CODE SET, the designator's bytes).
pub type Designator = (u8, u8, Vec<u8>);

/// One path's identity as its Device Identification page gives it.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct PathIdentity {
    /// The designators associated with the logical unit (ASSOCIATION 00b), each as
    /// (designator type, code set, value), in the order reported: the same on every path to
    /// one LU.
    pub lu: Vec<Designator>,
    /// RELATIVE TARGET PORT designator (type 4h, association 01b), if reported.
    pub relative_port: Option<u16>,
    /// TARGET PORT GROUP designator (type 5h, association 01b), if reported.
    pub port_group: Option<u16>,
}

impl PathIdentity {
    /// The NAA designator (type 3h) of the LU, in hex, for messages and reports.
    pub fn naa_hex(&self) -> Option<String> {
        self.lu
            .iter()
            .find(|(kind, _, _)| *kind == 3)
            .map(|(_, _, v)| v.iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// Decodes the body (after the 4-byte header) of the Device Identification VPD page.
pub fn parse_device_identification(body: &[u8]) -> Result<PathIdentity, Error> {
    let mut id = PathIdentity::default();
    let mut rest = body;
    while !rest.is_empty() {
        let (Some(head), Some(len)) = (rest.get(..4), rest.get(3)) else {
            return Err(Error::Protocol(
                "device identification VPD page: truncated designator header".into(),
            ));
        };
        let len = usize::from(*len);
        let Some(value) = rest.get(4..4 + len) else {
            return Err(Error::Protocol(
                "device identification VPD page: designator longer than the page".into(),
            ));
        };
        let code_set = head[0] & 0x0f;
        let association = (head[1] >> 4) & 0x03;
        let kind = head[1] & 0x0f;
        // SPC-4 7.8.6.7 and 7.8.6.8: both designators are 4 bytes, the identifier in the
        // last two.
        let low16 = || value.get(2..4).map(|b| u16::from_be_bytes([b[0], b[1]]));
        match (association, kind) {
            (0, _) => id.lu.push((kind, code_set, value.to_vec())),
            (1, 4) => id.relative_port = low16(),
            (1, 5) => id.port_group = low16(),
            _ => {}
        }
        rest = &rest[4 + len..];
    }
    if id.lu.is_empty() {
        return Err(Error::Protocol(
            "device identification VPD page names no logical unit designator".into(),
        ));
    }
    Ok(id)
}

/// One target port group of a REPORT TARGET PORT GROUPS answer.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct PortGroup {
    /// TARGET PORT GROUP.
    pub group: u16,
    /// ASYMMETRIC ACCESS STATE.
    pub state: AluaState,
    /// PREF: the preferred group.
    pub preferred: bool,
    /// The relative target port identifiers in the group.
    pub ports: Vec<u16>,
}

/// The CDB of REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah, SPC-4 6.27),
/// length-only header format.
pub fn report_target_port_groups_cdb(alloc_len: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xa3;
    c[1] = 0x0a;
    c[6..10].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// Decodes REPORT TARGET PORT GROUPS parameter data (either header format: the extended one
/// is told by FORMAT TYPE 001b in byte 4, SPC-4 6.27.3). A truncated answer yields the
/// descriptors that arrived whole.
pub fn parse_report_target_port_groups(d: &[u8]) -> Result<Vec<PortGroup>, Error> {
    let Some(h) = d.get(..4) else {
        return Err(Error::Protocol(
            "REPORT TARGET PORT GROUPS data too short".into(),
        ));
    };
    let total = (u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize).saturating_add(4);
    let extended = d.get(4).is_some_and(|b| (b >> 4) & 0x07 == 1);
    let start = if extended { 8 } else { 4 };
    let end = total.min(d.len());
    let mut rest = d.get(start..end).unwrap_or_default();
    let mut out = Vec::new();
    while let Some(desc) = rest.get(..8) {
        let count = usize::from(desc[7]);
        let Some(ports) = rest.get(8..8 + 4 * count) else {
            break;
        };
        out.push(PortGroup {
            group: u16::from_be_bytes([desc[2], desc[3]]),
            state: AluaState::from_code(desc[0]),
            preferred: desc[0] & 0x80 != 0,
            ports: ports
                .chunks_exact(4)
                .map(|p| u16::from_be_bytes([p[2], p[3]]))
                .collect(),
        });
        rest = &rest[8 + 4 * count..];
    }
    Ok(out)
}

/// The state of the group this path's port belongs to: found by the path's target port
/// group designator, else by its relative target port; `None` when the answer does not
/// mention the path.
pub fn state_of(groups: &[PortGroup], id: &PathIdentity) -> Option<AluaState> {
    if let Some(g) = id.port_group {
        if let Some(found) = groups.iter().find(|x| x.group == g) {
            return Some(found.state);
        }
    }
    let port = id.relative_port?;
    groups
        .iter()
        .find(|x| x.ports.contains(&port))
        .map(|x| x.state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Vec<u8> {
        let mut p = Vec::new();
        // NAA, binary, LU.
        p.extend_from_slice(&[0x01, 0x03, 0x00, 0x08, 0x60, 1, 2, 3, 4, 5, 6, 7]);
        // Relative target port 2 (association 01b, type 4h).
        p.extend_from_slice(&[0x61, 0x94, 0x00, 0x04, 0, 0, 0, 2]);
        // Target port group 7 (association 01b, type 5h).
        p.extend_from_slice(&[0x61, 0x95, 0x00, 0x04, 0, 0, 0, 7]);
        p
    }

    #[test]
    fn device_identification_gives_lu_port_and_group() {
        let id = parse_device_identification(&page()).unwrap();
        assert_eq!(id.relative_port, Some(2));
        assert_eq!(id.port_group, Some(7));
        assert_eq!(id.naa_hex().as_deref(), Some("6001020304050607"));
        let mut truncated = page();
        truncated.truncate(10);
        assert!(parse_device_identification(&truncated).is_err());
        assert!(
            parse_device_identification(&page()[12..]).is_err(),
            "no LU designator"
        );
    }

    #[test]
    fn rtpg_both_formats_and_truncation() {
        let descs = [
            0x80u8, 0x0f, 0, 7, 0, 0, 0, 1, 0, 0, 0, 2, // group 7 AO, PREF, port 2
            0x02, 0x0f, 0, 9, 0, 0, 0, 1, 0, 0, 0, 3, // group 9 standby, port 3
        ];
        let mut plain = (descs.len() as u32).to_be_bytes().to_vec();
        plain.extend_from_slice(&descs);
        let g = parse_report_target_port_groups(&plain).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].group, g[0].state, g[0].preferred),
            (7, AluaState::ActiveOptimized, true)
        );
        assert_eq!(g[1].ports, vec![3]);
        let mut ext = ((descs.len() + 4) as u32).to_be_bytes().to_vec();
        ext.extend_from_slice(&[0x10, 0, 0, 0]);
        ext.extend_from_slice(&descs);
        assert_eq!(parse_report_target_port_groups(&ext).unwrap(), g);
        // Cut mid-descriptor: the whole ones only.
        assert_eq!(
            parse_report_target_port_groups(&plain[..20]).unwrap().len(),
            1
        );
        assert!(parse_report_target_port_groups(&plain[..3]).is_err());
        let id = parse_device_identification(&page()).unwrap();
        assert_eq!(state_of(&g, &id), Some(AluaState::ActiveOptimized));
        let by_port = PathIdentity {
            relative_port: Some(3),
            ..PathIdentity::default()
        };
        assert_eq!(state_of(&g, &by_port), Some(AluaState::Standby));
        assert_eq!(state_of(&g, &PathIdentity::default()), None);
    }
}
