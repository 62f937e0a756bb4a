//! A parsed script: one [`Statement`] per command line, with its line number.

use std::path::PathBuf;
use std::time::Duration;

use sluice_initiator::{ConnectOptions, IscsiUrl, ScsiStatus, TmfFunction, TmfResponse};
use sluice_proto::login::LoginStatus;
use sluice_scsi::SenseKey;

/// A statement and the line it came from (1-based).
#[derive(Clone, Debug)]
pub struct Line {
    /// Line number in the script, from 1.
    pub number: usize,
    /// What the line says.
    pub statement: Statement,
}

/// One command of the script language (docs/script.md).
#[derive(Clone, Debug)]
pub enum Statement {
    /// Where and how the next `login` connects; checked when parsed, no I/O.
    Connect(Box<ConnectSpec>),
    /// Log in with the last `connect`'s URL and options.
    Login,
    /// Log the session out.
    Logout,
    /// Standard INQUIRY.
    Inquiry,
    /// READ CAPACITY(16) (or 10); sets the block size later commands use.
    ReadCapacity,
    /// TEST UNIT READY.
    TestUnitReady,
    /// READ(16) of `blocks` blocks at `lba`.
    Read {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
        /// Where the data goes.
        sinks: ReadSinks,
    },
    /// WRITE(16) of `blocks` blocks at `lba` from `data`.
    Write {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
        /// The bytes written.
        data: DataSource,
    },
    /// READ and compare with `data`: a difference fails like an expectation.
    Verify {
        /// First block.
        lba: u64,
        /// Block count.
        blocks: u32,
        /// The bytes expected.
        data: DataSource,
    },
    /// A task management function on the connected LUN (ABORT TASK names the last command).
    Tmf(TmfFunction),
    /// A NOP-Out ping; prints the round trip.
    Nop,
    /// Wait.
    Sleep(Duration),
    /// Check the outcome of what came before.
    Expect(Expectation),
    /// Print text.
    Echo(String),
    /// Print the negotiated operational keys.
    PrintParams,
}

/// `connect`'s URL and options.
#[derive(Clone, Debug)]
pub struct ConnectSpec {
    /// The URL as given (its scheme picks the transport).
    pub url: IscsiUrl,
    /// The URL's query and the line's `KEY=VALUE` options applied to the defaults.
    pub options: ConnectOptions,
    /// The LUN commands address: the URL's, or 0.
    pub lun: u16,
}

/// What a `read` does with its data (any combination; none prints a digest).
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ReadSinks {
    /// Keep the data in a named buffer (`into=NAME`).
    pub buffer: Option<String>,
    /// Print a hex dump (`hex`).
    pub hex: bool,
    /// Write the data to a file (`file=PATH`).
    pub file: Option<PathBuf>,
}

/// Bytes to write or to compare with.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum DataSource {
    /// Every byte the same (`byte=0xA5`, `zero`).
    Byte(u8),
    /// sluice's deterministic pattern, a function of the seed and each byte's LBA and offset
    /// (`pattern=SEED`), so that any part of a written range can be verified on its own.
    Pattern(u64),
    /// A file's bytes, exactly as many as the command moves (`file=PATH`).
    File(PathBuf),
    /// A buffer kept by an earlier `read ... into=NAME` (`buffer=NAME`).
    Buffer(String),
}

/// What `expect` checks.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Expectation {
    /// The last SCSI command's status and, optionally, its sense key, ASC and ASCQ.
    Status {
        /// SCSI status.
        status: ScsiStatus,
        /// Sense key, when given.
        key: Option<SenseKey>,
        /// Additional sense code, when given.
        asc: Option<u8>,
        /// Additional sense code qualifier, when given.
        ascq: Option<u8>,
    },
    /// A named buffer holds exactly these bytes.
    Data {
        /// The buffer.
        buffer: String,
        /// Its expected content.
        equals: DataSource,
    },
    /// A negotiated key's value (`expect key MaxBurstLength 262144`).
    Key {
        /// The key's name as RFC 7143 writes it.
        name: String,
        /// The expected value.
        value: String,
    },
    /// The last `login` failed, and if a class is given, was refused with it.
    LoginFailed(Option<LoginClass>),
    /// The last task management function's response.
    Tmf(TmfResponse),
}

/// Which refusals `expect login failed CLASS` accepts.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum LoginClass {
    /// Any status of this Status-Class (1 redirection, 2 initiator error, 3 target error).
    Class(u8),
    /// Exactly this status.
    Status(LoginStatus),
}

impl LoginClass {
    /// Whether `status` is one this accepts.
    pub fn matches(self, status: LoginStatus) -> bool {
        match self {
            LoginClass::Class(c) => status.class == c,
            LoginClass::Status(s) => status == s,
        }
    }
}
