//! The configuration in force as a file: what `sluice ctl config show` prints and
//! `sluice ctl config save` writes. Every key is written, defaults included, so the file
//! says everything the target does and reads back to the same configuration (the tests
//! check the round trip); comments of the file it came from are not kept.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use sluice_target::config::{Acl, Backend, ChapCredentials, DigestPolicy, TargetConfig, TargetDef};

use super::service::ServiceConfig;
use crate::portals::alua_state_name;

/// `config` and `service` as TOML that [`super::parse_all`] reads back to the same values.
pub fn to_toml(config: &TargetConfig, service: &ServiceConfig) -> String {
    let mut out = String::new();
    let w = &mut out;
    line(
        w,
        "# sluice target configuration, written by sluice from the configuration in force.",
    );
    line(
        w,
        "# Every key is listed, defaults included; docs/configuration.md describes them.",
    );
    line(w, "");
    // With portal groups every portal says its group's tag (`ADDR:PORT,TPGT`), and each group
    // its ALUA settings; without, the portals are bare (all in group 1).
    let tag_of = |addr: &std::net::SocketAddr| {
        config
            .portal_groups
            .iter()
            .find(|g| g.portals.contains(addr))
            .map(|g| g.tag)
    };
    let portals: Vec<String> = config
        .portals
        .iter()
        .map(|p| match tag_of(p) {
            Some(tag) => quote(&format!("{p},{tag}")),
            None => quote(&p.to_string()),
        })
        .collect();
    line(w, &format!("listen = [{}]", portals.join(", ")));
    if let Some(dir) = &config.state_dir {
        kv(w, "state_dir", quote_path(dir));
    }
    if let Some(name) = &config.tcp_congestion {
        kv(w, "tcp_congestion", quote(name));
    }
    for g in &config.portal_groups {
        line(w, "");
        line(w, "[[portal_group]]");
        kv(w, "tag", g.tag);
        kv(w, "alua_state", quote(alua_state_name(g.alua_state)));
        kv(w, "alua_group", g.alua_group);
    }
    if let Some(g) = &config.gateway {
        line(w, "");
        line(w, "[gateway]");
        kv(w, "group", g.group);
        let groups: Vec<String> = g.groups.iter().map(u16::to_string).collect();
        line(w, &format!("groups = [{}]", groups.join(", ")));
        kv(w, "non_owner", quote(alua_state_name(g.non_owner)));
    }
    if let Some(chap) = &config.discovery_auth {
        line(w, "");
        line(w, "[discovery]");
        line(w, &format!("chap = {}", chap_table(chap)));
    }
    let o = &config.offer;
    line(w, "");
    line(w, "[session]");
    kv(
        w,
        "max_recv_data_segment_length",
        o.max_recv_data_segment_length,
    );
    kv(w, "max_burst_length", o.max_burst_length);
    kv(w, "first_burst_length", o.first_burst_length);
    kv(w, "immediate_data", o.immediate_data);
    kv(w, "initial_r2t", o.initial_r2t);
    kv(w, "max_outstanding_r2t", o.max_outstanding_r2t);
    kv(w, "data_pdu_in_order", o.data_pdu_in_order);
    kv(w, "data_sequence_in_order", o.data_sequence_in_order);
    kv(w, "header_digest", quote(digest(o.header_digest)));
    kv(w, "data_digest", quote(digest(o.data_digest)));
    kv(w, "default_time2wait", o.default_time2wait);
    kv(w, "default_time2retain", o.default_time2retain);
    kv(w, "error_recovery_level", o.error_recovery_level);
    kv(w, "queue_depth", o.queue_depth);
    kv(w, "max_connections", o.max_connections);
    kv(w, "phase_collapse", o.phase_collapse);
    line(w, "");
    line(w, "[keepalive]");
    match &config.keepalive {
        Some(k) => {
            kv(w, "enabled", true);
            kv(w, "interval", duration(k.interval));
            kv(w, "timeout", duration(k.timeout));
        }
        None => kv(w, "enabled", false),
    }
    let r = &config.recovery;
    line(w, "");
    line(w, "[recovery]");
    kv(w, "data_ack_every", r.data_ack_every.unwrap_or(0));
    kv(w, "sequence_timeout", duration(r.sequence_timeout));
    kv(w, "max_retained_statuses", r.max_retained_statuses);
    let l = &config.limits;
    line(w, "");
    line(w, "[limits]");
    kv(w, "max_sessions", l.max_sessions);
    kv(w, "max_connections", l.max_connections);
    kv(
        w,
        "max_outstanding_bytes_per_connection",
        size(l.max_outstanding_bytes_per_connection as u64),
    );
    kv(w, "login_timeout", duration(l.login_timeout));
    kv(w, "shutdown_grace", duration(l.shutdown_grace));
    if let Some(m) = &service.metrics {
        line(w, "");
        line(w, "[metrics]");
        kv(w, "listen", quote(&m.listen.to_string()));
        if let Some(t) = &m.token_file {
            kv(w, "token_file", quote_path(t));
        }
    }
    if let Some(c) = &service.control {
        line(w, "");
        line(w, "[control]");
        if let Some(s) = &c.socket {
            kv(w, "socket", quote_path(s));
        }
        if let Some(g) = &c.group {
            kv(w, "group", quote(g));
        }
        if let Some(h) = &c.http {
            kv(w, "http", quote(&h.to_string()));
        }
        if let Some(t) = &c.token_file {
            kv(w, "token_file", quote_path(t));
        }
    }
    for t in &config.targets {
        target(w, t);
    }
    out
}

fn target(w: &mut String, t: &TargetDef) {
    line(w, "");
    line(w, "[[target]]");
    kv(w, "iqn", quote(&t.iqn));
    if let Some(alias) = &t.alias {
        kv(w, "alias", quote(alias));
    }
    match &t.acl {
        Acl::Open => kv(w, "acl", quote("open")),
        Acl::Allow(names) => {
            let names: Vec<String> = names.iter().map(|n| quote(n)).collect();
            kv(w, "acl", format!("[{}]", names.join(", ")));
        }
    }
    if let Some(chap) = &t.chap {
        kv(w, "chap", chap_table(chap));
    }
    for l in &t.luns {
        line(w, "");
        line(w, "[[target.lun]]");
        kv(w, "number", l.number);
        match &l.backend {
            Backend::Memory { size: s } => {
                kv(w, "backend", quote("memory"));
                kv(w, "size", size(*s));
            }
            Backend::Null { size: s } => {
                kv(w, "backend", quote("null"));
                kv(w, "size", size(*s));
            }
            Backend::File {
                path,
                size: s,
                direct,
                huge_pages,
            } => {
                kv(w, "backend", quote("file"));
                kv(w, "path", quote_path(path));
                if let Some(s) = s {
                    kv(w, "size", size(*s));
                }
                kv(w, "direct", *direct);
                kv(w, "huge_pages", *huge_pages);
            }
            Backend::Rbd { image } => {
                kv(w, "backend", quote("rbd"));
                kv(w, "image", quote(&image.spec()));
                if let Some(conf) = &image.conf_file {
                    kv(w, "ceph_conf", quote_path(conf));
                }
                if let Some(id) = &image.client_id {
                    kv(w, "ceph_id", quote(id));
                }
                if let Some(keyring) = &image.keyring {
                    kv(w, "ceph_keyring", quote_path(keyring));
                }
            }
        }
        kv(w, "block_size", l.block_size);
        kv(w, "read_only", l.read_only);
        kv(w, "removable", l.removable);
        if let Some(serial) = &l.serial {
            kv(w, "serial", quote(serial));
        }
        let o = &l.options;
        kv(
            w,
            "provisioning",
            quote(if o.thin { "thin" } else { "thick" }),
        );
        if let Some(p) = o.soft_threshold_percent {
            kv(w, "soft_threshold", p);
        }
        kv(w, "sanitize", o.sanitize.is_some());
        if let Some(rate) = o.sanitize.and_then(|s| s.overwrite_bytes_per_s) {
            kv(w, "sanitize_rate", size(rate));
        }
    }
}

fn line(w: &mut String, s: &str) {
    w.push_str(s);
    w.push('\n');
}

fn kv(w: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = writeln!(w, "{key} = {value}");
}

fn chap_table(c: &ChapCredentials) -> String {
    let mut parts = vec![
        format!("user = {}", quote(&c.user)),
        format!("secret = {}", quote(&c.secret)),
    ];
    if let Some((user, secret)) = &c.mutual {
        parts.push(format!("mutual_user = {}", quote(user)));
        parts.push(format!("mutual_secret = {}", quote(secret)));
    }
    format!("{{ {} }}", parts.join(", "))
}

fn digest(d: DigestPolicy) -> &'static str {
    match d {
        DigestPolicy::Allow => "allow",
        DigestPolicy::Require => "require",
        DigestPolicy::Forbid => "forbid",
    }
}

/// A duration in the file's syntax: whole seconds as an integer, else milliseconds (the
/// finest unit the file has).
fn duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        quote(&format!("{}ms", d.as_millis()))
    }
}

/// A byte count: an integer where TOML's signed 64 bits hold it, else its digits as a string.
fn size(bytes: u64) -> String {
    if i64::try_from(bytes).is_ok() {
        bytes.to_string()
    } else {
        quote(&bytes.to_string())
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn quote_path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}
