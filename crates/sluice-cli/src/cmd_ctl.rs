//! `sluice ctl`: asks a running target (control socket or HTTP admin API) and prints the
//! answer as text or, with `--json`, as JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde_json::Value;

use crate::cli_ops::{
    AclCommand, ChapCommand, ConfigCommand, CtlArgs, CtlCommand, LunAddArgs, LunCommand,
    SessionCommand,
};
use crate::ops::protocol::{ChapSpec, LunSpec, Request, Response};
use crate::ops::token::Token;
use crate::size::format_size;

/// Runs `sluice ctl`.
pub fn run(args: &CtlArgs) -> anyhow::Result<()> {
    let client = Client::new(args)?;
    match &args.command {
        CtlCommand::Status => {
            let s = client.ask(&Request::Status {})?;
            print(args.json, &s, print_status)
        }
        CtlCommand::Targets => {
            let s = client.ask(&Request::Status {})?;
            print(args.json, &s["targets"], print_targets)
        }
        CtlCommand::Luns { target } => {
            let s = client.ask(&Request::Status {})?;
            let luns = luns(&s, target.as_deref());
            print(args.json, &luns, print_luns)
        }
        CtlCommand::Portals => {
            let s = client.ask(&Request::Status {})?;
            print(args.json, &s["portals"], |v| {
                for p in v.as_array().into_iter().flatten() {
                    outln!("{}", p.as_str().unwrap_or_default());
                }
            })
        }
        CtlCommand::Sessions { target } => {
            let s = client.ask(&Request::Status {})?;
            let sessions: Vec<Value> = s["sessions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|x| {
                    target.as_deref().is_none_or(|t| {
                        x["target"]
                            .as_str()
                            .is_some_and(|n| n.eq_ignore_ascii_case(t))
                    })
                })
                .cloned()
                .collect();
            print(args.json, &Value::Array(sessions), print_sessions)
        }
        CtlCommand::Session(SessionCommand::Close { id }) => {
            change(args, &client, &Request::SessionClose { id: *id })
        }
        CtlCommand::Lun(cmd) => {
            let request = match cmd {
                LunCommand::Add(a) => Request::LunAdd {
                    target: a.target.clone(),
                    lun: lun_spec(a, &client)?,
                },
                LunCommand::Remove { target, number } => Request::LunRemove {
                    target: target.clone(),
                    number: *number,
                },
                LunCommand::Resize {
                    target,
                    number,
                    size,
                } => Request::LunResize {
                    target: target.clone(),
                    number: *number,
                    size: *size,
                },
            };
            change(args, &client, &request)
        }
        CtlCommand::Acl(cmd) => {
            let request = match cmd {
                AclCommand::Add { target, initiator } => Request::AclAdd {
                    target: target.clone(),
                    initiator: initiator.clone(),
                },
                AclCommand::Remove { target, initiator } => Request::AclRemove {
                    target: target.clone(),
                    initiator: initiator.clone(),
                },
                AclCommand::Set { target, initiators } => Request::AclSet {
                    target: target.clone(),
                    initiators: Some(initiators.clone()),
                },
                AclCommand::Open { target } => Request::AclSet {
                    target: target.clone(),
                    initiators: None,
                },
            };
            change(args, &client, &request)
        }
        CtlCommand::Chap(cmd) => {
            let request = match cmd {
                ChapCommand::Set {
                    target,
                    user,
                    secret_file,
                    mutual_user,
                    mutual_secret_file,
                    ..
                } => {
                    let mutual = match (mutual_user, mutual_secret_file) {
                        (Some(u), Some(f)) => Some((u.clone(), read_secret(f)?)),
                        _ => None,
                    };
                    Request::Chap {
                        target: target.clone(),
                        credentials: Some(ChapSpec {
                            user: user.clone(),
                            secret: read_secret(secret_file)?,
                            mutual,
                        }),
                    }
                }
                ChapCommand::Clear { target, .. } => Request::Chap {
                    target: target.clone(),
                    credentials: None,
                },
            };
            change(args, &client, &request)
        }
        CtlCommand::Config(ConfigCommand::Show) => {
            let v = client.ask(&Request::Config {})?;
            print(args.json, &v, |v| {
                print!("{}", v["toml"].as_str().unwrap_or_default());
            })
        }
        CtlCommand::Config(ConfigCommand::Save { path }) => {
            let path = path.as_deref().map(absolute).transpose()?;
            let v = client.ask(&Request::Save { path })?;
            print(args.json, &v, |v| {
                outln!("saved {}", v["path"].as_str().unwrap_or_default());
            })
        }
        CtlCommand::Reload => change(args, &client, &Request::Reload {}),
    }
}

/// How to reach the target.
enum Client {
    Socket(PathBuf),
    Http { base: String, token: String },
}

impl Client {
    fn new(args: &CtlArgs) -> anyhow::Result<Self> {
        Ok(match &args.http {
            Some(base) => {
                let file = args
                    .token_file
                    .as_deref()
                    .context("--http needs --token-file")?;
                // Read and checked as the server reads it.
                Token::read(file)?;
                let token = std::fs::read_to_string(file)?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                Self::Http {
                    base: base.trim_end_matches('/').to_string(),
                    token,
                }
            }
            None => Self::Socket(args.socket.clone()),
        })
    }

    /// Sends `request`; the answer's result, or its error.
    fn ask(&self, request: &Request) -> anyhow::Result<Value> {
        let body = serde_json::to_string(request)?;
        let response: Response = match self {
            Client::Socket(path) => {
                let mut s = UnixStream::connect(path).with_context(|| {
                    format!(
                        "cannot connect to {} (is the target running with --control, and are \
                         you root or in its group?)",
                        path.display()
                    )
                })?;
                s.write_all(body.as_bytes())?;
                s.write_all(b"\n")?;
                let mut line = String::new();
                BufReader::new(s).read_line(&mut line)?;
                serde_json::from_str(&line).context("the target's answer is not JSON")?
            }
            Client::Http { base, token } => http_post(base, token, &body)?,
        };
        match response.error {
            Some(e) if !response.ok => bail!("{e}"),
            _ => Ok(response.result),
        }
    }
}

/// `POST {base}/v1/ctl` with `body`, over HTTP/1.1 with hyper.
fn http_post(base: &str, token: &str, body: &str) -> anyhow::Result<Response> {
    let uri: hyper::Uri = format!("{base}/v1/ctl").parse().context("bad --http URL")?;
    if uri.scheme_str() != Some("http") {
        bail!("--http: only http:// URLs (put TLS in front with a proxy if needed)");
    }
    let host = uri.host().context("--http URL without a host")?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let body = body.to_string();
    let token = token.to_string();
    rt.block_on(async move {
        use http_body_util::{BodyExt, Full};
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("cannot connect to {host}:{port}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = hyper::Request::post(uri)
            .header(hyper::header::HOST, host)
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(bytes::Bytes::from(body)))?;
        let rsp = sender.send_request(req).await?;
        let status = rsp.status();
        let bytes = rsp.into_body().collect().await?.to_bytes();
        serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes).trim_end()
            )
        })
    })
}

/// Sends a change and prints what it did.
fn change(args: &CtlArgs, client: &Client, request: &Request) -> anyhow::Result<()> {
    let v = client.ask(request)?;
    print(args.json, &v, |v| {
        if let Some(id) = v["closed"].as_u64() {
            outln!("session {id} closed");
            return;
        }
        let changes = v["changes"].as_array().cloned().unwrap_or_default();
        if changes.is_empty() {
            outln!("nothing changed");
        }
        for c in changes {
            outln!("{}", c.as_str().unwrap_or_default());
        }
        if let Some(n) = v["sessions_closed"].as_u64().filter(|n| *n > 0) {
            outln!("{n} session(s) closed");
        }
    })
}

fn print(json: bool, v: &Value, text: impl FnOnce(&Value)) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(v)?);
    } else {
        text(v);
    }
    Ok(())
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}", p.display()))
}

fn read_secret(path: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(text.lines().next().unwrap_or_default().to_string())
}

fn lun_spec(a: &LunAddArgs, client: &Client) -> anyhow::Result<LunSpec> {
    let number = match a.number {
        Some(n) => n,
        None => {
            // One above the target's highest LUN.
            let s = client.ask(&Request::Status {})?;
            let highest = luns(&s, Some(&a.target))
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["number"].as_u64())
                .max();
            match highest {
                Some(h) => u16::try_from(h + 1).context("no LUN number left")?,
                None => bail!("no target {}", a.target),
            }
        }
    };
    let (backend, size, path) = match (a.memory, &a.file, a.null) {
        (Some(s), None, None) => ("memory", Some(s), None),
        (None, Some(p), None) => ("file", a.size, Some(absolute(p)?)),
        (None, None, Some(s)) => ("null", Some(s), None),
        _ => bail!("give one of --memory SIZE, --file PATH [--size SIZE] or --null SIZE"),
    };
    Ok(LunSpec {
        number,
        backend: backend.into(),
        size,
        path,
        block_size: a.block_size,
        read_only: a.read_only,
        removable: a.removable,
        serial: a.serial.clone(),
        direct: a.direct,
        thin: a.thin,
        soft_threshold: a.soft_threshold,
        sanitize: a.allow_sanitize,
        sanitize_rate: a.sanitize_rate,
    })
}

/// The LUs of every target (or of `target`), each with its target's name.
fn luns(status: &Value, target: Option<&str>) -> Value {
    let mut out = Vec::new();
    for t in status["targets"].as_array().into_iter().flatten() {
        let iqn = t["iqn"].as_str().unwrap_or_default();
        if target.is_some_and(|n| !n.eq_ignore_ascii_case(iqn)) {
            continue;
        }
        for l in t["luns"].as_array().into_iter().flatten() {
            let mut l = l.clone();
            l["target"] = Value::from(iqn);
            out.push(l);
        }
    }
    Value::Array(out)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn describe_backend(b: &Value) -> String {
    match b["kind"].as_str() {
        Some("file") => format!("file {}", b["path"].as_str().unwrap_or_default()),
        Some(kind) => kind.to_string(),
        None => "?".into(),
    }
}

fn describe_acl(acl: &Value) -> String {
    match acl {
        Value::String(s) => s.clone(),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => "?".into(),
    }
}

fn print_status(s: &Value) {
    let portals: Vec<&str> = s["portals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    outln!("listening on {}", portals.join(", "));
    let sessions = s["sessions"].as_array().map_or(0, Vec::len);
    outln!(
        "{} session(s), {} TCP connection(s)",
        sessions,
        n(&s["connections"])
    );
    print_targets(&s["targets"]);
}

fn print_targets(targets: &Value) {
    for t in targets.as_array().into_iter().flatten() {
        let chap = match (t["chap_user"].as_str(), t["mutual_chap"].as_bool()) {
            (None, _) => "none".to_string(),
            (Some(u), Some(true)) => format!("{u} (mutual)"),
            (Some(u), _) => u.to_string(),
        };
        outln!(
            "target {}: acl {}; CHAP {}; {} session(s); logins {} ok",
            t["iqn"].as_str().unwrap_or_default(),
            describe_acl(&t["acl"]),
            chap,
            n(&t["sessions"]),
            n(&t["logins"]["ok"]),
        );
        for l in t["luns"].as_array().into_iter().flatten() {
            outln!(
                "  LUN {}: {}, {}, {}-byte blocks{}{}",
                n(&l["number"]),
                describe_backend(&l["backend"]),
                format_size(n(&l["size"])),
                n(&l["block_size"]),
                if l["read_only"].as_bool() == Some(true) {
                    ", read-only"
                } else {
                    ""
                },
                describe_thin(l),
            );
        }
    }
}

/// ", thin (N allocated)" for a thin LU, nothing for a thick one.
fn describe_thin(l: &Value) -> String {
    if l["provisioning"].as_str() != Some("thin") {
        return String::new();
    }
    match l["allocated_bytes"].as_u64() {
        Some(b) => format!(", thin ({} allocated)", format_size(b)),
        None => ", thin".to_string(),
    }
}

fn print_luns(luns: &Value) {
    outln!(
        "{:<40} {:>5} {:<30} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "TARGET",
        "LUN",
        "BACKEND",
        "SIZE",
        "READS",
        "WRITES",
        "READ",
        "WRITTEN"
    );
    for l in luns.as_array().into_iter().flatten() {
        let c = &l["counters"];
        outln!(
            "{:<40} {:>5} {:<30} {:>10} {:>10} {:>10} {:>12} {:>12}",
            l["target"].as_str().unwrap_or_default(),
            n(&l["number"]),
            describe_backend(&l["backend"]),
            format_size(n(&l["size"])),
            n(&c["commands"]["read"]),
            n(&c["commands"]["write"]),
            format_size(n(&c["read_bytes"])),
            format_size(n(&c["write_bytes"])),
        );
    }
}

fn print_sessions(sessions: &Value) {
    outln!(
        "{:>5} {:>5} {:<40} {:<36} {:<22} {:>3} {:>6} {:>12} {:>12}",
        "ID",
        "TSIH",
        "INITIATOR",
        "TARGET",
        "PEER",
        "ERL",
        "TASKS",
        "RECEIVED",
        "SENT"
    );
    for x in sessions.as_array().into_iter().flatten() {
        let conns = x["connections"].as_array().cloned().unwrap_or_default();
        let peers: Vec<&str> = conns.iter().filter_map(|c| c["peer"].as_str()).collect();
        let total = |key: &str| conns.iter().map(|c| n(&c["counters"][key])).sum::<u64>();
        outln!(
            "{:>5} {:>5} {:<40} {:<36} {:<22} {:>3} {:>6} {:>12} {:>12}",
            n(&x["id"]),
            n(&x["tsih"]),
            x["initiator"].as_str().unwrap_or_default(),
            x["target"].as_str().unwrap_or("(discovery)"),
            peers.join(","),
            n(&x["negotiated"]["error_recovery_level"]),
            n(&x["tasks"]),
            format_size(total("data_received_bytes")),
            format_size(total("data_sent_bytes")),
        );
    }
}
