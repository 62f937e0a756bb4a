//! Value types with their own syntax: sizes, durations, listen addresses, ACLs and the
//! enumerated values of the file.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use sluice_target::config::DigestPolicy;
use toml::Spanned;

use crate::cli::parse_listen;
use crate::portals::{parse_alua_state, parse_portal, Portal};
use crate::size::{parse_duration, parse_size};

/// A byte count: an integer, or a string such as `"256K"` or `"1.5T"` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Size(pub(super) u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a size: an integer number of bytes or a string such as \"256K\" or \"1G\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: an integer number of seconds, or a string such as `"30s"`, `"500ms"`, `"1m30s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dur(pub(super) Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as an integer, or a string such as \"30s\" or \"500ms\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|s| Dur(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A listen address: `"ADDR:PORT"`, `"[V6]:PORT"` or a bare address (port 3260).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listen(pub(super) SocketAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_listen(&s).map(Listen).map_err(de::Error::custom)
    }
}

/// An iSCSI portal: a listen address with an optional `",TPGT"` (its portal group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PortalToml(pub(super) Portal);

impl<'de> Deserialize<'de> for PortalToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_portal(&s).map(PortalToml).map_err(de::Error::custom)
    }
}

/// An ALUA access state: `"active-optimized"`, `"active-non-optimized"`, `"standby"` or
/// `"unavailable"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AluaStateToml(pub(super) sluice_target::config::AccessState);

impl<'de> Deserialize<'de> for AluaStateToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_alua_state(&s)
            .map(AluaStateToml)
            .map_err(de::Error::custom)
    }
}

/// `acl = "open"` or `acl = ["iqn...", ...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AclToml {
    /// `"open"`: any initiator.
    Open,
    /// Only these initiator names.
    Allow(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for AclToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AclToml;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"open\" or a list of initiator names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AclToml, E> {
                if v == "open" {
                    Ok(AclToml::Open)
                } else {
                    Err(E::custom(format!(
                        "acl = {v:?}: use acl = \"open\" or a list such as acl = [{v:?}]"
                    )))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AclToml, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<Spanned<String>>()? {
                    names.push(name);
                }
                Ok(AclToml::Allow(names))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
/// `header_digest` / `data_digest` values.
pub(super) enum DigestToml {
    /// `"allow"`
    Allow,
    /// `"require"`
    Require,
    /// `"forbid"`
    Forbid,
}

impl From<DigestToml> for DigestPolicy {
    fn from(d: DigestToml) -> Self {
        match d {
            DigestToml::Allow => DigestPolicy::Allow,
            DigestToml::Require => DigestPolicy::Require,
            DigestToml::Forbid => DigestPolicy::Forbid,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
/// `backend` values.
pub enum BackendKind {
    /// `"memory"`
    Memory,
    /// `"file"`
    File,
    /// `"null"`
    Null,
    /// `"rbd"`
    Rbd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
/// `provisioning` values.
pub enum ProvisioningKind {
    /// `"thick"`: every block mapped (the default).
    Thick,
    /// `"thin"`: UNMAP gives space back.
    Thin,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Memory => "memory",
            BackendKind::File => "file",
            BackendKind::Null => "null",
            BackendKind::Rbd => "rbd",
        })
    }
}
