//! The values words stand for: numbers, durations, data sources, status, sense and login
//! names. Every function returns a message naming what was expected.

use std::path::PathBuf;
use std::time::Duration;

use sluice_initiator::{ScsiStatus, TmfFunction, TmfResponse};
use sluice_proto::login::LoginStatus;
use sluice_scsi::SenseKey;

use super::ast::{DataSource, LoginClass};

/// A result whose error is a message for the user.
pub type Parsed<T> = Result<T, String>;

/// A decimal or `0x` hexadecimal number.
pub fn number(word: &str, what: &str) -> Parsed<u64> {
    let w = word.replace('_', "");
    let parsed = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => w.parse(),
    };
    parsed.map_err(|_| format!("{what}: {word:?} is not a number (decimal or 0x hex)"))
}

/// A number that fits `T`.
pub fn small<T: TryFrom<u64>>(word: &str, what: &str) -> Parsed<T> {
    let n = number(word, what)?;
    T::try_from(n).map_err(|_| format!("{what}: {n} is out of range"))
}

/// A duration: `500ms`, `2s`, `1m30s`, or a bare number of seconds.
pub fn duration(word: &str) -> Parsed<Duration> {
    crate::size::parse_duration(word).map_err(|e| e.to_string())
}

/// `KEY=VALUE` split at the first `=`.
pub fn key_value(word: &str) -> Option<(&str, &str)> {
    word.split_once('=')
}

/// A data source: `zero`, `byte=N`, `pattern=SEED`, `file=PATH`, `buffer=NAME`.
pub fn data_source(word: &str) -> Parsed<DataSource> {
    if word == "zero" {
        return Ok(DataSource::Byte(0));
    }
    let bad = || {
        format!(
            "{word:?} is not a data source (zero, byte=N, pattern=SEED, file=PATH, buffer=NAME)"
        )
    };
    let (k, v) = key_value(word).ok_or_else(bad)?;
    match k {
        "byte" => small(v, "byte").map(DataSource::Byte),
        "pattern" => number(v, "pattern seed").map(DataSource::Pattern),
        "file" if !v.is_empty() => Ok(DataSource::File(PathBuf::from(v))),
        "buffer" => buffer_name(v).map(DataSource::Buffer),
        _ => Err(bad()),
    }
}

/// A buffer or variable name: letters, digits and `_`.
pub fn buffer_name(word: &str) -> Parsed<String> {
    if !word.is_empty() && word.chars().all(super::lex::is_name_char) {
        Ok(word.to_owned())
    } else {
        Err(format!(
            "{word:?} is not a name (letters, digits and _ only)"
        ))
    }
}

/// Upper case with `-` and ` ` as `_`, so that `check-condition`, `CHECK_CONDITION` and
/// "CHECK CONDITION" are one name.
fn canonical(word: &str) -> String {
    word.to_ascii_uppercase().replace(['-', ' '], "_")
}

/// A SCSI status by name (`GOOD`, `CHECK_CONDITION`, ...; SAM-5 table 43) or number.
pub fn scsi_status(word: &str) -> Parsed<ScsiStatus> {
    let code = match canonical(word).as_str() {
        "GOOD" => 0x00,
        "CHECK_CONDITION" => 0x02,
        "CONDITION_MET" => 0x04,
        "BUSY" => 0x08,
        "RESERVATION_CONFLICT" => 0x18,
        "TASK_SET_FULL" => 0x28,
        "ACA_ACTIVE" => 0x30,
        "TASK_ABORTED" => 0x40,
        _ => small(word, "SCSI status").map_err(|_| {
            format!("{word:?} is not a SCSI status (GOOD, CHECK_CONDITION, BUSY, RESERVATION_CONFLICT, TASK_SET_FULL, ACA_ACTIVE, TASK_ABORTED or a number)")
        })?,
    };
    Ok(ScsiStatus::from(code))
}

/// A sense key by its SPC-4 name (`ILLEGAL_REQUEST`, ...) or number.
pub fn sense_key(word: &str) -> Parsed<SenseKey> {
    let wanted = canonical(word);
    if let Some(k) = (0u8..=0x0f).find(|k| canonical(SenseKey(*k).name()) == wanted) {
        return Ok(SenseKey(k));
    }
    let n: u8 = small(word, "sense key")
        .map_err(|_| format!("{word:?} is not a sense key (e.g. ILLEGAL_REQUEST, UNIT_ATTENTION, MEDIUM_ERROR, or 0..15)"))?;
    if n > 0x0f {
        return Err(format!("sense key {n} is out of range (0..15)"));
    }
    Ok(SenseKey(n))
}

/// A task management function (RFC 7143 section 11.5.1).
pub fn tmf_function(word: &str) -> Parsed<TmfFunction> {
    Ok(match canonical(word).as_str() {
        "ABORT_TASK" => TmfFunction::AbortTask,
        "ABORT_TASK_SET" => TmfFunction::AbortTaskSet,
        "CLEAR_ACA" => TmfFunction::ClearAca,
        "CLEAR_TASK_SET" => TmfFunction::ClearTaskSet,
        "LUN_RESET" | "LOGICAL_UNIT_RESET" => TmfFunction::LogicalUnitReset,
        "TARGET_WARM_RESET" | "WARM_RESET" => TmfFunction::TargetWarmReset,
        "TARGET_COLD_RESET" | "COLD_RESET" => TmfFunction::TargetColdReset,
        _ => {
            return Err(format!(
                "{word:?} is not a task management function (abort-task, abort-task-set, \
                 clear-aca, clear-task-set, lun-reset, target-warm-reset, target-cold-reset)"
            ))
        }
    })
}

/// A task management response (RFC 7143 section 11.6.1) by name or number.
pub fn tmf_response(word: &str) -> Parsed<TmfResponse> {
    let code = match canonical(word).as_str() {
        "FUNCTION_COMPLETE" | "COMPLETE" => 0,
        "TASK_DOES_NOT_EXIST" | "NO_TASK" => 1,
        "LUN_DOES_NOT_EXIST" | "NO_LUN" => 2,
        "TASK_STILL_ALLEGIANT" => 3,
        "REASSIGNMENT_NOT_SUPPORTED" => 4,
        "NOT_SUPPORTED" => 5,
        "AUTHORIZATION_FAILED" => 6,
        "FUNCTION_REJECTED" | "REJECTED" => 255,
        _ => small(word, "TMF response").map_err(|_| {
            format!("{word:?} is not a TMF response (function-complete, task-does-not-exist, lun-does-not-exist, not-supported, rejected, ... or a number)")
        })?,
    };
    Ok(TmfResponse::from(code))
}

/// A login refusal: a class (`redirect`, `initiator-error`, `target-error`), a detail by
/// name (`authentication`, `authorization`, `not-found`, ...; RFC 7143 section 11.13.5) or
/// the two bytes as `0x0201`.
pub fn login_class(word: &str) -> Parsed<LoginClass> {
    let status = |s| Ok(LoginClass::Status(s));
    match canonical(word).as_str() {
        "REDIRECT" | "REDIRECTION" => Ok(LoginClass::Class(1)),
        "INITIATOR_ERROR" => Ok(LoginClass::Class(2)),
        "TARGET_ERROR" => Ok(LoginClass::Class(3)),
        "AUTHENTICATION" | "AUTH" => status(LoginStatus::AUTH_FAILURE),
        "AUTHORIZATION" => status(LoginStatus::AUTHORIZATION_FAILURE),
        "NOT_FOUND" => status(LoginStatus::NOT_FOUND),
        "TARGET_REMOVED" => status(LoginStatus::TARGET_REMOVED),
        "UNSUPPORTED_VERSION" => status(LoginStatus::UNSUPPORTED_VERSION),
        "TOO_MANY_CONNECTIONS" => status(LoginStatus::TOO_MANY_CONNECTIONS),
        "MISSING_PARAMETER" => status(LoginStatus::MISSING_PARAMETER),
        "SESSION_DOES_NOT_EXIST" => status(LoginStatus::SESSION_DOES_NOT_EXIST),
        "SERVICE_UNAVAILABLE" => status(LoginStatus::SERVICE_UNAVAILABLE),
        "OUT_OF_RESOURCES" => status(LoginStatus::OUT_OF_RESOURCES),
        _ => {
            let n: u16 = small(word, "login status").map_err(|_| {
                format!(
                    "{word:?} is not a login failure class (initiator-error, target-error, \
                     redirect, authentication, authorization, not-found, ... or 0xCCDD)"
                )
            })?;
            let [class, detail] = n.to_be_bytes();
            status(LoginStatus::new(class, detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(number("0x10", "n"), Ok(16));
        assert_eq!(number("1_000", "n"), Ok(1000));
        assert!(number("ten", "n").unwrap_err().contains("not a number"));
        assert!(small::<u8>("256", "byte")
            .unwrap_err()
            .contains("out of range"));
        assert_eq!(
            scsi_status("check-condition"),
            Ok(ScsiStatus::CheckCondition)
        );
        assert_eq!(scsi_status("GOOD"), Ok(ScsiStatus::Good));
        assert_eq!(sense_key("illegal_request"), Ok(SenseKey::ILLEGAL_REQUEST));
        assert_eq!(sense_key("6"), Ok(SenseKey::UNIT_ATTENTION));
        assert!(sense_key("16").is_err());
        assert_eq!(tmf_function("lun-reset"), Ok(TmfFunction::LogicalUnitReset));
        assert_eq!(
            tmf_response("function-complete"),
            Ok(TmfResponse::FunctionComplete)
        );
        assert_eq!(
            login_class("not-found"),
            Ok(LoginClass::Status(LoginStatus::NOT_FOUND))
        );
        assert_eq!(
            login_class("0x0201"),
            Ok(LoginClass::Status(LoginStatus::AUTH_FAILURE))
        );
        assert_eq!(login_class("initiator-error"), Ok(LoginClass::Class(2)));
        assert!(LoginClass::Class(2).matches(LoginStatus::NOT_FOUND));
        assert_eq!(data_source("zero"), Ok(DataSource::Byte(0)));
        assert_eq!(data_source("pattern=7"), Ok(DataSource::Pattern(7)));
        assert!(data_source("buffer=a-b").is_err());
        assert!(data_source("file=").is_err());
    }
}
