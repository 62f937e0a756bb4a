//! Running parsed lines against sluice's initiator library, one at a time.
//!
//! A command that fails in a way a script may want to test (a non-GOOD status, a refused
//! login, a TMF response other than function complete) is an error unless the very next
//! line is the `expect` that checks it; every other failure ends the script at its line.

use std::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use sluice_initiator::scsi::{
    parse_read_capacity10, parse_read_capacity16, parse_standard_inquiry,
};
use sluice_initiator::{
    Command, CommandOutcome, Error as InitiatorError, ScsiStatus, Session, TaskId, TmfFunction,
    TmfResponse, UNIT_ATTENTION_RETRIES,
};
use sluice_scsi::{cdb, SenseKey};

use super::ast::{ConnectSpec, DataSource, Expectation, Line, ReadSinks, Statement};
use super::data::{self, Buffer, Buffers};

/// Why a script stopped early.
#[derive(Debug)]
pub enum Stop {
    /// An `expect` (or `verify`) did not hold.
    Expectation(usize, String),
    /// Anything else went wrong at this line.
    Error(usize, String),
}

/// The last SCSI command's end, for `expect status`.
struct LastStatus {
    what: String,
    status: ScsiStatus,
    sense: Option<sluice_scsi::SenseData>,
}

/// The interpreter's state between lines.
#[derive(Default)]
pub struct Executor {
    spec: Option<ConnectSpec>,
    session: Option<Session>,
    block_size: Option<u32>,
    buffers: Buffers,
    last_status: Option<LastStatus>,
    login_error: Option<InitiatorError>,
    last_tmf: Option<TmfResponse>,
    last_task: Option<TaskId>,
}

/// What the next line expects, so a failure the script tests is not an error.
#[derive(Clone, Copy, PartialEq)]
enum Next {
    Status,
    LoginFailure,
    Tmf,
    Other,
}

impl Next {
    fn of(line: Option<&Line>) -> Self {
        match line.map(|l| &l.statement) {
            Some(Statement::Expect(Expectation::Status { .. })) => Next::Status,
            Some(Statement::Expect(Expectation::LoginFailed(_))) => Next::LoginFailure,
            Some(Statement::Expect(Expectation::Tmf(_))) => Next::Tmf,
            _ => Next::Other,
        }
    }
}

type Step = Result<(), Stop>;

impl Executor {
    /// Runs every line in order; stops at the first failure.
    pub async fn run(&mut self, lines: &[Line]) -> Step {
        for (i, line) in lines.iter().enumerate() {
            let next = Next::of(lines.get(i + 1));
            self.line(line, next).await?;
        }
        if let Some(s) = self.session.take() {
            // A script that forgot `logout` still leaves politely.
            let _ = s.logout().await;
        }
        Ok(())
    }

    async fn line(&mut self, line: &Line, next: Next) -> Step {
        let n = line.number;
        let err = |m: String| Stop::Error(n, m);
        match &line.statement {
            Statement::Connect(spec) => {
                self.spec = Some((**spec).clone());
                say(n, format!("connect {}", spec.url));
            }
            Statement::Login => self.login(n, next).await?,
            Statement::Logout => {
                let s = self
                    .session
                    .take()
                    .ok_or_else(|| err("not logged in".into()))?;
                s.logout().await.map_err(|e| err(format!("logout: {e}")))?;
                self.block_size = None;
                say(n, "logout: done".into());
            }
            Statement::Inquiry => {
                let cmd = Command::read(self.lun(), &cdb::inquiry(None, 255), 255);
                if let Some(out) = self.scsi(n, "INQUIRY", cmd, next).await? {
                    let i = parse_standard_inquiry(&out.data).map_err(|e| err(e.to_string()))?;
                    say(
                        n,
                        format!(
                            "inquiry: {} {} {} ({})",
                            i.vendor,
                            i.product,
                            i.revision,
                            i.device_type_name()
                        ),
                    );
                }
            }
            Statement::ReadCapacity => {
                if let Some(bs) = self.read_capacity(n, next).await? {
                    say(n, format!("readcapacity: block size {bs}"));
                }
            }
            Statement::TestUnitReady => {
                let cmd = Command::none(self.lun(), &cdb::test_unit_ready());
                if self.scsi(n, "TEST UNIT READY", cmd, next).await?.is_some() {
                    say(n, "testunitready: ready".into());
                }
            }
            Statement::Read { lba, blocks, sinks } => {
                self.read(n, *lba, *blocks, sinks, next).await?;
            }
            Statement::Write { lba, blocks, data } => {
                let bs = self.block_size(n).await?;
                let bytes = self.bytes(n, data, *lba, *blocks, bs)?;
                let cmd = Command::write(self.lun(), &cdb::write16(*lba, *blocks, false), bytes);
                if self.scsi(n, "WRITE(16)", cmd, next).await?.is_some() {
                    say(
                        n,
                        format!(
                            "write {lba}+{blocks}: {} bytes",
                            u64::from(*blocks) * u64::from(bs)
                        ),
                    );
                }
            }
            Statement::Verify { lba, blocks, data } => {
                let bs = self.block_size(n).await?;
                let want = self.bytes(n, data, *lba, *blocks, bs)?;
                let cmd =
                    Command::read(self.lun(), &cdb::read16(*lba, *blocks, false), bs * *blocks);
                if let Some(out) = self.scsi(n, "READ(16)", cmd, next).await? {
                    if let Some(d) = data::first_difference(&out.data, &want, bs) {
                        return Err(Stop::Expectation(n, format!("verify {lba}+{blocks}: {d}")));
                    }
                    say(n, format!("verify {lba}+{blocks}: equal"));
                }
            }
            Statement::Tmf(f) => self.tmf(n, *f, next).await?,
            Statement::Nop => {
                let rtt = self
                    .session(n)?
                    .ping()
                    .await
                    .map_err(|e| err(format!("nop: {e}")))?;
                say(n, format!("nop: {} us", rtt.as_micros()));
            }
            Statement::Sleep(d) => tokio::time::sleep(*d).await,
            Statement::Expect(e) => self.expect(n, e)?,
            Statement::Echo(text) => outln!("{text}"),
            Statement::PrintParams => {
                let p = self.session(n)?.params();
                for key in data::NEGOTIATED_KEYS {
                    if let Some(v) = data::negotiated(&p, key) {
                        outln!("{key}={v}");
                    }
                }
            }
        }
        Ok(())
    }

    fn lun(&self) -> u16 {
        self.spec.as_ref().map_or(0, |s| s.lun)
    }

    fn session(&self, n: usize) -> Result<&Session, Stop> {
        self.session
            .as_ref()
            .ok_or_else(|| Stop::Error(n, "not logged in (connect URL, then login)".into()))
    }

    async fn login(&mut self, n: usize, next: Next) -> Step {
        if self.session.is_some() {
            return Err(Stop::Error(n, "already logged in (logout first)".into()));
        }
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| Stop::Error(n, "login before connect".into()))?;
        self.login_error = None;
        match Session::connect_url_with(&spec.url, spec.options).await {
            Ok(s) => {
                let (tsih, portal, _) = s.login_info();
                say(
                    n,
                    format!("login: {} at {portal}, TSIH {tsih:#06x}", s.target()),
                );
                self.session = Some(s);
                Ok(())
            }
            Err(e) if next == Next::LoginFailure => {
                say(n, format!("login: failed: {e}"));
                self.login_error = Some(e);
                Ok(())
            }
            Err(e) => Err(Stop::Error(n, format!("login: {e}"))),
        }
    }

    /// Runs one SCSI command, retrying UNIT ATTENTION as operating systems do (each retry
    /// is printed); whatever status it ends with is returned.
    async fn run_retrying_ua(
        &mut self,
        n: usize,
        what: &str,
        cmd: Command,
    ) -> Result<CommandOutcome, Stop> {
        let session = self.session(n)?.clone();
        let mut retries = UNIT_ATTENTION_RETRIES;
        loop {
            let flight = session.start(cmd.clone());
            self.last_task = Some(flight.id());
            let out = flight
                .wait()
                .await
                .map_err(|e| Stop::Error(n, format!("{what}: {e}")))?;
            let ua = out
                .sense
                .as_ref()
                .filter(|s| s.key == SenseKey::UNIT_ATTENTION);
            match ua {
                Some(s) if retries > 0 => {
                    say(n, format!("{what}: {s}: retried"));
                    retries -= 1;
                }
                _ => return Ok(out),
            }
        }
    }

    /// Runs one SCSI command. `Some` when it ended GOOD; `None` when it did not and the next
    /// line expects a status; an error otherwise.
    async fn scsi(
        &mut self,
        n: usize,
        what: &str,
        cmd: Command,
        next: Next,
    ) -> Result<Option<CommandOutcome>, Stop> {
        let out = self.run_retrying_ua(n, what, cmd).await?;
        self.last_status = Some(LastStatus {
            what: what.to_owned(),
            status: out.status,
            sense: out.sense.clone(),
        });
        if out.is_good() {
            return Ok(Some(out));
        }
        let text = status_text(out.status, out.sense.as_ref());
        if next == Next::Status {
            say(n, format!("{what}: {text}"));
            return Ok(None);
        }
        Err(Stop::Error(
            n,
            format!("{what}: {text} (put `expect status ...` on the next line if intended)"),
        ))
    }

    async fn read_capacity(&mut self, n: usize, next: Next) -> Result<Option<u32>, Stop> {
        let lun = self.lun();
        let cmd = Command::read(lun, &cdb::read_capacity16(32), 32);
        // READ CAPACITY(16) first; a target that refuses it gets READ CAPACITY(10).
        let first = self.run_retrying_ua(n, "READ CAPACITY(16)", cmd).await?;
        let cap = if first.is_good() {
            self.last_status = Some(LastStatus {
                what: "READ CAPACITY(16)".into(),
                status: first.status,
                sense: None,
            });
            parse_read_capacity16(&first.data)
        } else {
            let cmd = Command::read(lun, &cdb::read_capacity10(), 8);
            match self.scsi(n, "READ CAPACITY(10)", cmd, next).await? {
                Some(out) => parse_read_capacity10(&out.data),
                None => return Ok(None),
            }
        };
        let cap = cap.map_err(|e| Stop::Error(n, e.to_string()))?;
        if cap.block_size == 0 {
            return Err(Stop::Error(
                n,
                "the target reports a block size of 0".into(),
            ));
        }
        say(n, format!("capacity: {} blocks", cap.blocks()));
        self.block_size = Some(cap.block_size);
        Ok(Some(cap.block_size))
    }

    /// The LU's block size, asked for once per login.
    async fn block_size(&mut self, n: usize) -> Result<u32, Stop> {
        if let Some(bs) = self.block_size {
            return Ok(bs);
        }
        self.read_capacity(n, Next::Other)
            .await?
            .ok_or_else(|| Stop::Error(n, "READ CAPACITY failed".into()))
    }

    fn bytes(
        &self,
        n: usize,
        d: &DataSource,
        lba: u64,
        blocks: u32,
        bs: u32,
    ) -> Result<Bytes, Stop> {
        let len = usize::try_from(u64::from(blocks) * u64::from(bs))
            .map_err(|_| Stop::Error(n, "transfer too large".into()))?;
        data::materialize(d, lba, bs, len, &self.buffers).map_err(|e| Stop::Error(n, e))
    }

    async fn read(
        &mut self,
        n: usize,
        lba: u64,
        blocks: u32,
        sinks: &ReadSinks,
        next: Next,
    ) -> Step {
        let bs = self.block_size(n).await?;
        let len = bs
            .checked_mul(blocks)
            .ok_or_else(|| Stop::Error(n, "transfer too large".into()))?;
        let cmd = Command::read(self.lun(), &cdb::read16(lba, blocks, false), len);
        let Some(out) = self.scsi(n, "READ(16)", cmd, next).await? else {
            return Ok(());
        };
        let digest = Sha256::digest(&out.data);
        say(
            n,
            format!(
                "read {lba}+{blocks}: {} bytes, sha256 {}",
                out.data.len(),
                digest[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        );
        if sinks.hex {
            crate::stdout::write_line(format_args!("{}", data::hex_dump(&out.data).trim_end()));
        }
        if let Some(path) = &sinks.file {
            std::fs::write(path, &out.data)
                .map_err(|e| Stop::Error(n, format!("writing {}: {e}", path.display())))?;
        }
        if let Some(name) = &sinks.buffer {
            self.buffers.insert(
                name.clone(),
                Buffer {
                    data: out.data,
                    lba,
                    block_size: bs,
                },
            );
        }
        Ok(())
    }

    async fn tmf(&mut self, n: usize, f: TmfFunction, next: Next) -> Step {
        let referenced = match f {
            TmfFunction::AbortTask => Some(self.last_task.ok_or_else(|| {
                Stop::Error(
                    n,
                    "abort-task names the last command, and none ran yet".into(),
                )
            })?),
            _ => None,
        };
        let session = self.session(n)?.clone();
        let started = Instant::now();
        let response = session
            .task_management(f, self.lun(), referenced)
            .await
            .map_err(|e| Stop::Error(n, format!("tmf {f}: {e}")))?;
        self.last_tmf = Some(response);
        say(
            n,
            format!("tmf {f}: {response} ({} us)", started.elapsed().as_micros()),
        );
        if response != TmfResponse::FunctionComplete && next != Next::Tmf {
            return Err(Stop::Error(
                n,
                format!("tmf {f}: {response} (put `expect tmf ...` on the next line if intended)"),
            ));
        }
        Ok(())
    }

    fn expect(&mut self, n: usize, e: &Expectation) -> Step {
        let fail = |m: String| Err(Stop::Expectation(n, m));
        match e {
            Expectation::Status {
                status,
                key,
                asc,
                ascq,
            } => {
                let last = self.last_status.as_ref().ok_or_else(|| {
                    Stop::Error(n, "expect status: no SCSI command ran yet".into())
                })?;
                let sense = last.sense.as_ref();
                let ok = last.status == *status
                    && key.is_none_or(|k| sense.is_some_and(|s| s.key == k))
                    && asc.is_none_or(|a| sense.is_some_and(|s| s.asc == a))
                    && ascq.is_none_or(|q| sense.is_some_and(|s| s.ascq == q));
                if !ok {
                    return fail(format!(
                        "expect status: {} ended {}, expected {}",
                        last.what,
                        status_text(last.status, sense),
                        expected_status_text(*status, *key, *asc, *ascq)
                    ));
                }
            }
            Expectation::Data { buffer, equals } => {
                let b = self.buffers.get(buffer).ok_or_else(|| {
                    Stop::Error(
                        n,
                        format!("no buffer named {buffer} (read ... into={buffer} first)"),
                    )
                })?;
                let want =
                    data::materialize(equals, b.lba, b.block_size, b.data.len(), &self.buffers)
                        .map_err(|m| Stop::Error(n, m))?;
                if let Some(d) = data::first_difference(&b.data, &want, b.block_size) {
                    return fail(format!("expect data {buffer}: {d}"));
                }
            }
            Expectation::Key { name, value } => {
                let p = self.session(n)?.params();
                let got = data::negotiated(&p, name).unwrap_or_default();
                if !data::same_value(&got, value) {
                    return fail(format!(
                        "expect key {name}: negotiated {got}, expected {value}"
                    ));
                }
            }
            Expectation::LoginFailed(class) => {
                let Some(error) = self.login_error.take() else {
                    return fail("expect login failed: the login succeeded".into());
                };
                if let Some(class) = class {
                    match error.login_status() {
                        Some(s) if class.matches(s) => {}
                        _ => {
                            return fail(format!(
                                "expect login failed {class:?}: it failed with: {error}"
                            ))
                        }
                    }
                }
            }
            Expectation::Tmf(want) => {
                let got = self.last_tmf.ok_or_else(|| {
                    Stop::Error(n, "expect tmf: no task management ran yet".into())
                })?;
                if got != *want {
                    return fail(format!("expect tmf: response {got}, expected {want}"));
                }
            }
        }
        say(n, "expect: ok".into());
        Ok(())
    }
}

/// `[line] text` on stdout.
fn say(n: usize, text: String) {
    outln!("[{n}] {text}");
}

fn status_text(status: ScsiStatus, sense: Option<&sluice_scsi::SenseData>) -> String {
    match sense {
        Some(s) => format!("{status}: {s}"),
        None => status.to_string(),
    }
}

fn expected_status_text(
    status: ScsiStatus,
    key: Option<SenseKey>,
    asc: Option<u8>,
    ascq: Option<u8>,
) -> String {
    let mut t = status.to_string();
    if let Some(k) = key {
        t.push_str(&format!(" sense {k}"));
    }
    if let Some(a) = asc {
        t.push_str(&format!(" asc {a:#04x}"));
    }
    if let Some(q) = ascq {
        t.push_str(&format!(" ascq {q:#04x}"));
    }
    t
}
