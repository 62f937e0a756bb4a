//! Several `sluice target` gateways exporting one RBD image (`--gateway-group`), each on its
//! own loopback address, with SCSI helpers to ask each which one owns the LU (REPORT TARGET
//! PORT GROUPS). A gateway can be killed (SIGKILL), stopped and continued (SIGSTOP/SIGCONT),
//! and restarted on its old address and port, so multipath initiators find it again.

use std::time::{Duration, Instant};

use sluice_initiator::blocking::Session;
use sluice_initiator::{Command, CommandOutcome, ConnectOptions, IscsiUrl, ScsiStatus};
use sluice_test_support::CephCluster;

use super::TargetProcess;

/// ASYMMETRIC ACCESS STATE codes (SPC-4 table 178).
pub const ACTIVE_OPTIMIZED: u8 = 0x0;
/// Active/non-optimized.
pub const ACTIVE_NON_OPTIMIZED: u8 = 0x1;
/// Standby.
pub const STANDBY: u8 = 0x2;
/// Unavailable.
pub const UNAVAILABLE: u8 = 0x3;

/// N gateways of one image; gateway `i` is ALUA group `i + 1` on 127.0.0.`i + 1`.
pub struct Gateways {
    args: Vec<String>,
    groups: String,
    /// `None` while killed.
    procs: Vec<Option<TargetProcess>>,
    /// Each gateway's `ADDR:PORT`, kept across restarts.
    portals: Vec<String>,
}

impl Gateways {
    /// Starts `n` gateways exporting `rbd/IMAGE` of `c` as client.sluice, with `extra` flags.
    pub fn start(c: &CephCluster, image: &str, n: usize, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec![
            "--rbd".into(),
            format!("rbd/{image}"),
            "--ceph-conf".into(),
            c.conf_file().display().to_string(),
            "--ceph-id".into(),
            "sluice".into(),
            "--ceph-keyring".into(),
            c.keyring("sluice").display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let groups = (1..=n).map(|g| g.to_string()).collect::<Vec<_>>().join(",");
        let mut g = Self {
            args,
            groups,
            procs: (0..n).map(|_| None).collect(),
            portals: (0..n).map(|i| format!("127.0.0.{}:0", i + 1)).collect(),
        };
        for i in 0..n {
            g.restart(i);
        }
        g
    }

    /// How many gateways there are.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Gateway `i`'s URL of LUN 0.
    pub fn url(&self, i: usize) -> &str {
        &self.procs[i].as_ref().expect("gateway running").url
    }

    /// Gateway `i`'s `HOST:PORT`.
    pub fn portal(&self, i: usize) -> &str {
        &self.portals[i]
    }

    /// SIGKILL to gateway `i`.
    pub fn kill(&mut self, i: usize) {
        drop(self.procs[i].take());
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP`) to gateway `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.procs[i].as_ref().expect("gateway running").pid();
        let ok = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// (Re)starts gateway `i` on its address and port.
    pub fn restart(&mut self, i: usize) {
        drop(self.procs[i].take());
        let group = (i + 1).to_string();
        let mut args: Vec<&str> = vec![
            "--listen",
            &self.portals[i],
            "--gateway-group",
            &group,
            "--gateway-groups",
            &self.groups,
        ];
        args.extend(self.args.iter().map(String::as_str));
        let t = TargetProcess::start_exact(&args);
        let hostport = t
            .url
            .strip_prefix("iscsi://")
            .and_then(|r| r.split('/').next())
            .expect("iscsi://HOST:PORT/...")
            .to_string();
        self.portals[i] = hostport;
        self.procs[i] = Some(t);
    }
}

/// A session to `url` as initiator `name`, past its power-on unit attention. The ISID is
/// fixed, so a new session of the same name is the same initiator port (its reservations'
/// registrations are its own).
pub fn session(url: &str, name: &str) -> Session {
    let opts = ConnectOptions {
        initiator_name: name.into(),
        isid: Some([0x80, 0, 0, 0x5e, 0, 1]),
        ..ConnectOptions::default()
    };
    let s = Session::connect_url_with(&IscsiUrl::parse(url).unwrap(), opts).unwrap();
    let _ = s.execute(Command::read(0, &[0; 6], 0));
    s
}

/// Runs `cmd` again while it ends in UNIT ATTENTION (state changes, power on), at most 5
/// times.
pub fn execute(s: &Session, cmd: impl Fn() -> Command) -> CommandOutcome {
    let mut out = s.execute(cmd()).unwrap();
    for _ in 0..5 {
        let ua = out.status == ScsiStatus::CheckCondition
            && out.sense_bytes.get(2).is_some_and(|k| k & 0x0F == 0x06);
        if !ua {
            break;
        }
        out = s.execute(cmd()).unwrap();
    }
    out
}

/// REPORT TARGET PORT GROUPS: (group, state, relative target ports) of every group.
pub fn report_target_port_groups(s: &Session) -> Vec<(u16, u8, Vec<u16>)> {
    let cdb = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
    let out = execute(s, || Command::read(0, &cdb, 4096));
    assert_eq!(out.status, ScsiStatus::Good, "{out:?}");
    let d = &out.data;
    let len = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
    let mut at = 4;
    let mut groups = Vec::new();
    while at + 8 <= (4 + len).min(d.len()) {
        let state = d[at] & 0x0F;
        let group = u16::from_be_bytes([d[at + 2], d[at + 3]]);
        let count = usize::from(d[at + 7]);
        let ports = (0..count)
            .map(|p| {
                let o = at + 8 + 4 * p;
                u16::from_be_bytes([d[o + 2], d[o + 3]])
            })
            .collect();
        groups.push((group, state, ports));
        at += 8 + 4 * count;
    }
    groups
}

/// The group reported active/optimized through `s`, if exactly one is.
pub fn owner_seen(s: &Session) -> Option<u16> {
    let optimized: Vec<u16> = report_target_port_groups(s)
        .into_iter()
        .filter(|(_, state, _)| *state == ACTIVE_OPTIMIZED)
        .map(|(g, _, _)| g)
        .collect();
    (optimized.len() == 1).then(|| optimized[0])
}

/// Waits (at most `limit`) until every session reports the same single active/optimized
/// group, satisfying `want`; returns it and how long it took.
pub fn wait_for_owner(
    sessions: &[&Session],
    limit: Duration,
    want: impl Fn(u16) -> bool,
) -> (u16, Duration) {
    let start = Instant::now();
    loop {
        let seen: Vec<Option<u16>> = sessions.iter().map(|s| owner_seen(s)).collect();
        if let Some(Some(g)) = seen.first() {
            if seen.iter().all(|o| *o == Some(*g)) && want(*g) {
                return (*g, start.elapsed());
            }
        }
        assert!(
            start.elapsed() < limit,
            "no agreed owner within {limit:?}: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
