//! From script text to [`Line`]s. The whole script is parsed before anything runs, so a
//! typo on line 40 is reported before line 1 connects anywhere.

use std::fmt;

use sluice_initiator::{ConnectOptions, IscsiUrl};

use super::ast::{ConnectSpec, Expectation, Line, ReadSinks, Statement};
use super::lex::{self, Variables};
use super::words::{self, Parsed};

/// Longest script line taken: a bound on what one line may make the parser hold.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Most blocks one `read`, `write` or `verify` moves: a bound on the buffer it allocates
/// (with 4 KiB blocks, 256 MiB).
pub const MAX_BLOCKS: u32 = 65_536;

/// An error at a line of the script.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LineError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses a whole script; `vars` are the variables set before it runs (`--set`).
pub fn parse(text: &str, mut vars: Variables) -> Result<Vec<Line>, LineError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let at = |message: String| LineError {
            line: number,
            message,
        };
        if raw.len() > MAX_LINE_BYTES {
            return Err(at(format!("line longer than {MAX_LINE_BYTES} bytes")));
        }
        let words = lex::words(raw, &vars).map_err(|e| at(e.0))?;
        let Some((command, args)) = words.split_first() else {
            continue;
        };
        if command == "set" {
            let (name, value) = set(args).map_err(at)?;
            vars.insert(name, value);
            continue;
        }
        let statement = statement(command, args).map_err(at)?;
        out.push(Line { number, statement });
    }
    Ok(out)
}

/// `set NAME VALUE`.
fn set(args: &[String]) -> Parsed<(String, String)> {
    match args {
        [name, value] => Ok((words::buffer_name(name)?, value.clone())),
        _ => Err("usage: set NAME VALUE (quote a value with spaces)".into()),
    }
}

fn statement(command: &str, args: &[String]) -> Parsed<Statement> {
    let none = |s: Statement| {
        if args.is_empty() {
            Ok(s)
        } else {
            Err(format!("{command} takes no arguments"))
        }
    };
    match command {
        "connect" => connect(args).map(|c| Statement::Connect(Box::new(c))),
        "login" => none(Statement::Login),
        "logout" => none(Statement::Logout),
        "inquiry" => none(Statement::Inquiry),
        "readcapacity" => none(Statement::ReadCapacity),
        "testunitready" => none(Statement::TestUnitReady),
        "nop" => none(Statement::Nop),
        "read" => read(args),
        "write" | "verify" => {
            let [lba_w, blocks_w, data_w] = args else {
                return Err(format!("usage: {command} LBA BLOCKS DATA (DATA: zero, byte=N, pattern=SEED, file=PATH, buffer=NAME)"));
            };
            let (lba, blocks) = range(lba_w, blocks_w)?;
            let data = words::data_source(data_w)?;
            Ok(if command == "write" {
                Statement::Write { lba, blocks, data }
            } else {
                Statement::Verify { lba, blocks, data }
            })
        }
        "tmf" => match args {
            [f] => words::tmf_function(f).map(Statement::Tmf),
            _ => Err("usage: tmf FUNCTION (abort-task, abort-task-set, clear-task-set, lun-reset, target-warm-reset, target-cold-reset)".into()),
        },
        "sleep" => match args {
            [d] => words::duration(d).map(Statement::Sleep),
            _ => Err("usage: sleep DURATION (e.g. 500ms, 2s)".into()),
        },
        "expect" => expect(args).map(Statement::Expect),
        "echo" => Ok(Statement::Echo(args.join(" "))),
        "print" => match args {
            [what] if what == "params" => Ok(Statement::PrintParams),
            _ => Err("usage: print params".into()),
        },
        _ => Err(format!(
            "unknown command {command:?} (connect, login, logout, inquiry, readcapacity, \
             testunitready, read, write, verify, tmf, nop, sleep, expect, echo, print, set)"
        )),
    }
}

/// `connect URL [KEY=VALUE ...]`: the options are checked here, against the key table.
fn connect(args: &[String]) -> Parsed<ConnectSpec> {
    let Some((url_w, opts)) = args.split_first() else {
        return Err("usage: connect URL [KEY=VALUE ...]".into());
    };
    let url = IscsiUrl::parse(url_w).map_err(|e| e.to_string())?;
    if url.target.is_none() {
        return Err(format!(
            "{url}: the URL names no target (iscsi://host[:port]/target-iqn/lun)"
        ));
    }
    let mut options = ConnectOptions::from_url(&url).map_err(|e| e.to_string())?;
    for word in opts {
        let (k, v) = words::key_value(word)
            .ok_or_else(|| format!("{word:?}: connect options are KEY=VALUE"))?;
        apply_option(&mut options, k, v)?;
    }
    let lun = url.lun.unwrap_or(0);
    Ok(ConnectSpec { url, options, lun })
}

/// One `connect` option: the initiator library's (URL arguments and RFC 7143 keys), plus
/// `digests` for both digests and `erl` for ErrorRecoveryLevel.
fn apply_option(o: &mut ConnectOptions, key: &str, value: &str) -> Parsed<()> {
    let result = match key {
        "digests" => o
            .apply("header_digest", value)
            .and_then(|()| o.apply("data_digest", value)),
        "erl" => o.apply("ErrorRecoveryLevel", value),
        _ => o.apply(key, value),
    };
    result.map_err(|e| format!("connect option {key}={value}: {e}"))
}

/// `read LBA BLOCKS [into=NAME] [hex] [file=PATH]`.
fn read(args: &[String]) -> Parsed<Statement> {
    let usage = "usage: read LBA BLOCKS [into=NAME] [hex] [file=PATH]";
    let [lba_w, blocks_w, rest @ ..] = args else {
        return Err(usage.into());
    };
    let (lba, blocks) = range(lba_w, blocks_w)?;
    let mut sinks = ReadSinks::default();
    for w in rest {
        match words::key_value(w) {
            None if w == "hex" => sinks.hex = true,
            Some(("into", name)) => sinks.buffer = Some(words::buffer_name(name)?),
            Some(("file", path)) if !path.is_empty() => sinks.file = Some(path.into()),
            _ => return Err(format!("{w:?}: {usage}")),
        }
    }
    Ok(Statement::Read { lba, blocks, sinks })
}

/// An LBA and a block count of 1 to [`MAX_BLOCKS`].
fn range(lba: &str, blocks: &str) -> Parsed<(u64, u32)> {
    let lba = words::number(lba, "LBA")?;
    let blocks: u32 = words::small(blocks, "block count")?;
    if blocks == 0 || blocks > MAX_BLOCKS {
        return Err(format!(
            "block count {blocks}: 1 to {MAX_BLOCKS} blocks per command"
        ));
    }
    if lba.checked_add(u64::from(blocks)).is_none() {
        return Err(format!("LBA {lba} + {blocks} blocks overflows"));
    }
    Ok((lba, blocks))
}

/// `expect ...`.
fn expect(args: &[String]) -> Parsed<Expectation> {
    let usage =
        "usage: expect status STATUS [sense=KEY] [asc=N] [ascq=N] | expect data BUFFER DATA \
                 | expect key NAME VALUE | expect login failed [CLASS] | expect tmf RESPONSE";
    let Some((what, rest)) = args.split_first() else {
        return Err(usage.into());
    };
    match (what.as_str(), rest) {
        ("status", [status, extra @ ..]) => {
            let status = words::scsi_status(status)?;
            let (mut key, mut asc, mut ascq) = (None, None, None);
            for w in extra {
                match words::key_value(w) {
                    Some(("sense", v)) => key = Some(words::sense_key(v)?),
                    Some(("asc", v)) => asc = Some(words::small(v, "ASC")?),
                    Some(("ascq", v)) => ascq = Some(words::small(v, "ASCQ")?),
                    _ => return Err(format!("{w:?}: {usage}")),
                }
            }
            Ok(Expectation::Status {
                status,
                key,
                asc,
                ascq,
            })
        }
        ("data", [buffer, equals]) => Ok(Expectation::Data {
            buffer: words::buffer_name(buffer)?,
            equals: words::data_source(equals)?,
        }),
        ("key", [name, value]) => {
            if super::data::negotiated(&Default::default(), name).is_none() {
                return Err(format!(
                    "{name:?} is not a negotiated key sluice reports (one of {})",
                    super::data::NEGOTIATED_KEYS.join(", ")
                ));
            }
            Ok(Expectation::Key {
                name: name.clone(),
                value: value.clone(),
            })
        }
        ("login", [failed]) if failed == "failed" => Ok(Expectation::LoginFailed(None)),
        ("login", [failed, class]) if failed == "failed" => {
            words::login_class(class).map(|c| Expectation::LoginFailed(Some(c)))
        }
        ("tmf", [response]) => words::tmf_response(response).map(Expectation::Tmf),
        _ => Err(usage.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::ast::DataSource;
    use proptest::prelude::*;
    use sluice_initiator::ScsiStatus;

    fn one(line: &str) -> Statement {
        let mut lines = parse(line, Variables::new()).unwrap();
        assert_eq!(lines.len(), 1, "{line}");
        lines.remove(0).statement
    }

    fn error(script: &str) -> LineError {
        parse(script, Variables::new()).unwrap_err()
    }

    #[test]
    fn a_whole_script() {
        let text = "# a comment\n\
                    set url iscsi://127.0.0.1:3261/iqn.x:y/1\n\
                    connect $url digests=crc32c ImmediateData=No MaxBurstLength=65536 erl=1 connections=2\n\
                    login\n\
                    \n\
                    write 0 8 pattern=7\n\
                    read 0 8 into=a hex\n\
                    expect data a pattern=7\n\
                    expect status GOOD\n\
                    read 99999999 1\n\
                    expect status check-condition sense=ILLEGAL_REQUEST asc=0x21 ascq=0\n\
                    tmf lun-reset\n\
                    expect tmf function-complete\n\
                    expect key MaxBurstLength 65536\n\
                    sleep 10ms\n\
                    echo done \"with spaces\"\n\
                    logout\n";
        let lines = parse(text, Variables::new()).unwrap();
        assert_eq!(lines.len(), 14);
        assert_eq!(lines[0].number, 3);
        let Statement::Connect(c) = &lines[0].statement else {
            panic!("{:?}", lines[0])
        };
        assert_eq!(c.lun, 1);
        assert_eq!(c.url.port, 3261);
        assert!(!c.options.offer.immediate_data);
        assert_eq!(c.options.offer.max_burst_length, 65536);
        assert_eq!(c.options.offer.error_recovery_level, 1);
        assert_eq!(c.options.connections, 2);
        assert_eq!(lines[13].number, 17);
        match &lines[7].statement {
            Statement::Expect(Expectation::Status {
                status,
                key,
                asc,
                ascq,
            }) => {
                assert_eq!(*status, ScsiStatus::CheckCondition);
                assert_eq!(*key, Some(sluice_scsi::SenseKey::ILLEGAL_REQUEST));
                assert_eq!((*asc, *ascq), (Some(0x21), Some(0)));
            }
            other => panic!("{other:?}"),
        }
        match &lines[12].statement {
            Statement::Echo(t) => assert_eq!(t, "done with spaces"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_and_writes() {
        match one("read 0x10 4 into=buf file=/tmp/x hex") {
            Statement::Read { lba, blocks, sinks } => {
                assert_eq!((lba, blocks), (16, 4));
                assert_eq!(sinks.buffer.as_deref(), Some("buf"));
                assert!(sinks.hex);
                assert_eq!(sinks.file, Some("/tmp/x".into()));
            }
            other => panic!("{other:?}"),
        }
        match one("verify 8 2 byte=0xa5") {
            Statement::Verify { data, .. } => assert_eq!(data, DataSource::Byte(0xa5)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        for (script, line, needle) in [
            ("login\nfrobnicate", 2, "unknown command \"frobnicate\""),
            ("\n\nread 0", 3, "usage: read"),
            ("read 0 0", 1, "1 to 65536 blocks"),
            ("write 0 1 banana", 1, "not a data source"),
            (
                "connect iscsi://h/iqn.x/0 MaxBurstLength=12",
                1,
                "MaxBurstLength",
            ),
            ("connect iscsi://h/iqn.x/0 Nonsense=1", 1, "unknown option"),
            ("connect iscsi://h", 1, "names no target"),
            ("connect http://h/iqn.x/0", 1, "invalid iSCSI URL"),
            ("expect key Bogus 1", 1, "not a negotiated key"),
            ("expect status FINE", 1, "not a SCSI status"),
            ("expect login failed nope", 1, "not a login failure class"),
            ("echo $missing", 1, "$missing is not set"),
            ("login now", 1, "login takes no arguments"),
            ("read 18446744073709551615 2", 1, "overflows"),
            ("set 1 2 3", 1, "usage: set"),
        ] {
            let e = error(script);
            assert_eq!(e.line, line, "{script}: {e}");
            assert!(e.message.contains(needle), "{script}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    #[test]
    fn set_variables_apply_to_later_lines_only() {
        let e = error("echo $v\nset v 1");
        assert_eq!(e.line, 1);
        let lines = parse("set v 1\nread $v 1", Variables::new()).unwrap();
        assert!(matches!(lines[0].statement, Statement::Read { lba: 1, .. }));
        let pre: Variables = [("v".to_owned(), "5".to_owned())].into();
        let lines = parse("read $v 1", pre).unwrap();
        assert!(matches!(lines[0].statement, Statement::Read { lba: 5, .. }));
    }

    proptest! {
        // Malformed input of any shape is a LineError, never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = parse(&text, Variables::new());
        }

        // Lines built from the language's own words, shuffled: still never a panic, and an
        // error always names a line that exists.
        #[test]
        fn word_salad_never_panics(lines in prop::collection::vec(
            prop::collection::vec(prop::sample::select(vec![
                "connect", "login", "read", "write", "verify", "expect", "status", "data",
                "key", "login", "failed", "tmf", "sleep", "set", "echo", "print", "params",
                "0", "1", "0x10", "-1", "99999999999999999999", "into=a", "hex", "file=",
                "byte=300", "pattern=1", "buffer=a", "sense=6", "asc=999", "\"", "$", "${",
                "$x", "#", "=", "iscsi://h/iqn.x/0", "iscsi://", "MaxBurstLength=0",
                "GOOD", "abort-task", "lun-reset", "10ms", "x=y=z",
            ]), 0..8), 0..12)) {
            let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
            if let Err(e) = parse(&text, Variables::new()) {
                prop_assert!(e.line >= 1 && e.line <= lines.len().max(1));
            }
        }
    }
}
