//! What `sluice ctl` asks the target and what it answers: one JSON object per request and
//! per answer, over the control socket (one per line) or the HTTP admin API (`POST /v1/ctl`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request. Read requests change nothing; the others change the configuration in force.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Portals, targets, LUs, sessions and counters. (Requests without arguments are
    /// empty structs, so that an unknown field is refused for them too.)
    Status {},
    /// The configuration in force, as TOML.
    Config {},
    /// Writes the configuration in force as TOML to `path`, or to the file the target was
    /// started with.
    Save {
        /// Where (absolute); `None`: the target's configuration file.
        path: Option<PathBuf>,
    },
    /// Reads the target's configuration file again and applies the difference.
    Reload {},
    /// Adds a LU.
    LunAdd {
        /// Target name.
        target: String,
        /// The LU.
        lun: LunSpec,
    },
    /// Removes a LU.
    LunRemove {
        /// Target name.
        target: String,
        /// LUN number.
        number: u16,
    },
    /// Grows a LU.
    LunResize {
        /// Target name.
        target: String,
        /// LUN number.
        number: u16,
        /// New size, bytes.
        size: u64,
    },
    /// Adds an initiator to a target's ACL.
    AclAdd {
        /// Target name.
        target: String,
        /// InitiatorName.
        initiator: String,
    },
    /// Removes an initiator from a target's ACL (its sessions are closed).
    AclRemove {
        /// Target name.
        target: String,
        /// InitiatorName.
        initiator: String,
    },
    /// Replaces a target's ACL: these names, or open (`None`).
    AclSet {
        /// Target name.
        target: String,
        /// The names; `None` lets anyone in.
        initiators: Option<Vec<String>>,
    },
    /// Sets or clears CHAP credentials of a target, or of discovery (`target` `None`).
    Chap {
        /// Target name; `None` for discovery sessions.
        target: Option<String>,
        /// The credentials; `None` turns CHAP off.
        credentials: Option<ChapSpec>,
    },
    /// Closes a session.
    SessionClose {
        /// Its id (see the session listing).
        id: u64,
    },
}

impl Request {
    /// Whether the request changes the target (and is logged with who asked).
    pub fn changes(&self) -> bool {
        !matches!(self, Request::Status {} | Request::Config {})
    }
}

/// A LU to add, in the terms of a `[[target.lun]]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LunSpec {
    /// LUN number.
    pub number: u16,
    /// `"memory"`, `"file"` or `"null"`.
    pub backend: String,
    /// Size in bytes (required for memory and null; creates or grows a file).
    pub size: Option<u64>,
    /// The file or block device (absolute).
    pub path: Option<PathBuf>,
    /// Logical block size (512 unless given).
    pub block_size: Option<u32>,
    /// Refuse writes.
    #[serde(default)]
    pub read_only: bool,
    /// Report a removable medium.
    #[serde(default)]
    pub removable: bool,
    /// Unit serial number.
    pub serial: Option<String>,
    /// Open the file with O_DIRECT.
    #[serde(default)]
    pub direct: bool,
    /// Thin-provision it (`provisioning = "thin"`).
    #[serde(default)]
    pub thin: bool,
    /// A thin LU's soft threshold, in percent of its capacity.
    #[serde(default)]
    pub soft_threshold: Option<u8>,
    /// Let initiators SANITIZE it (`sanitize = true`).
    #[serde(default)]
    pub sanitize: bool,
    /// SANITIZE's write rate limit, bytes a second (`sanitize_rate`).
    #[serde(default)]
    pub sanitize_rate: Option<u64>,
}

/// CHAP credentials; secrets travel only over the control socket or the token-protected API.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ChapSpec {
    /// The name the initiator sends.
    pub user: String,
    /// The secret it proves it knows.
    pub secret: String,
    /// Mutual CHAP: the target's name and secret.
    pub mutual: Option<(String, String)>,
}

/// An answer.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Response {
    /// Whether the request was carried out.
    pub ok: bool,
    /// What it produced (read requests), or what changed.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub result: Value,
    /// Why it was not carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// Success with `result`.
    pub fn ok(result: Value) -> Self {
        Self {
            ok: true,
            result,
            error: None,
        }
    }

    /// Failure, saying why.
    pub fn error(why: impl std::fmt::Display) -> Self {
        Self {
            ok: false,
            result: Value::Null,
            error: Some(why.to_string()),
        }
    }
}

/// Largest request accepted, bytes: a request is a short command, never data.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_json() {
        let r: Request =
            serde_json::from_str(r#"{"op":"lun_resize","target":"t","number":1,"size":4096}"#)
                .unwrap();
        assert_eq!(
            r,
            Request::LunResize {
                target: "t".into(),
                number: 1,
                size: 4096
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"status","x":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"format_disk"}"#).is_err());
        let text = serde_json::to_string(&Request::Status {}).unwrap();
        assert_eq!(text, r#"{"op":"status"}"#);
        assert!(!Request::Status {}.changes());
        assert!(Request::Reload {}.changes());
    }
}
