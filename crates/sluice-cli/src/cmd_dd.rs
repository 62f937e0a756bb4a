//! `sluice dd`: LUN to file, file to LUN, LUN to LUN. Reads run `--queue-depth` commands
//! ahead and writes to a LUN overlap the same way; the SHA-256 of the bytes copied is printed
//! at the end so that both sides can be compared (`sha256sum FILE`).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sluice_initiator::Session;
use tokio::task::JoinSet;

use crate::client_args::{ConnArgs, DdArgs};
use crate::client_common::{connect, hex, human, lun_url, print_json, runtime};

/// One side of the copy.
enum End {
    Lun {
        s: Session,
        lun: u16,
        bs: u64,
        size: u64,
    },
    File(std::path::PathBuf),
}

impl End {
    async fn open(spec: &str, conn: &ConnArgs) -> Result<Self> {
        if !sluice_initiator::is_iscsi_url(spec) {
            return Ok(End::File(spec.into()));
        }
        let (url, lun) = lun_url(spec)?;
        let s = connect(&url, conn).await?;
        let cap = s
            .read_capacity(lun)
            .await
            .with_context(|| format!("READ CAPACITY of {url}"))?;
        Ok(End::Lun {
            s,
            lun,
            bs: u64::from(cap.block_size),
            size: cap.bytes(),
        })
    }

    fn block_size(&self) -> u64 {
        match self {
            End::Lun { bs, .. } => *bs,
            End::File(_) => 1,
        }
    }
}

#[derive(Serialize)]
struct DdJson {
    bytes: u64,
    seconds: f64,
    mib_per_second: f64,
    sha256: String,
}

/// `sluice dd --if SRC --of DST [--bs N] [--length N]`.
pub fn run_dd(args: &DdArgs) -> Result<()> {
    let summary = runtime()?.block_on(copy(args))?;
    if args.conn.json {
        return print_json(&summary);
    }
    outln!(
        "{} bytes ({}) copied in {:.3} s, {:.1} MiB/s",
        summary.bytes,
        human(summary.bytes),
        summary.seconds,
        summary.mib_per_second
    );
    outln!("sha256 {}", summary.sha256);
    Ok(())
}

async fn copy(args: &DdArgs) -> Result<DdJson> {
    let src = End::open(&args.input, &args.conn).await.context("source")?;
    let dst = End::open(&args.output, &args.conn)
        .await
        .context("destination")?;
    let src_size = match &src {
        End::Lun { size, .. } => *size,
        End::File(p) => std::fs::metadata(p)
            .with_context(|| format!("{}", p.display()))?
            .len(),
    };
    let length = args.length.unwrap_or(src_size);
    if length > src_size {
        bail!("--length {length} is more than the source's {src_size} bytes");
    }
    if let End::Lun { size, .. } = &dst {
        if length > *size {
            bail!("{length} bytes do not fit the destination LUN ({size} bytes)");
        }
    }
    for (end, what) in [(&src, "source"), (&dst, "destination")] {
        let bs = end.block_size();
        if !length.is_multiple_of(bs) || !args.bs.is_multiple_of(bs) || args.bs == 0 {
            bail!(
                "--length {length} and --bs {} must be multiples of the {what} block size {bs}",
                args.bs
            );
        }
    }
    let bar = if args.quiet || args.conn.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(length)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut hasher = Sha256::new();
    let mut reader = Reader::new(&src, length, args.bs, args.queue_depth.max(1))?;
    let mut out_file = match &dst {
        End::File(p) => Some(File::create(p).with_context(|| format!("creating {}", p.display()))?),
        End::Lun { .. } => None,
    };
    let mut writes = JoinSet::new();
    let mut offset = 0u64;
    while let Some(chunk) = reader.next().await? {
        hasher.update(&chunk);
        let n = chunk.len() as u64;
        match (&dst, &mut out_file) {
            (_, Some(f)) => f.write_all(&chunk).context("writing the output file")?,
            (End::Lun { s, lun, bs, .. }, None) => {
                while writes.len() >= args.queue_depth.max(1) {
                    join_one(&mut writes).await?;
                }
                let (s, lun, bs) = (s.clone(), *lun, *bs);
                writes.spawn(async move {
                    s.write(lun, offset / bs, chunk, bs as u32)
                        .await
                        .with_context(|| format!("WRITE at LBA {}", offset / bs))
                });
            }
            (End::File(_), None) => unreachable!("file destinations always have a handle"),
        }
        offset += n;
        bar.set_position(offset);
    }
    while !writes.is_empty() {
        join_one(&mut writes).await?;
    }
    if let End::Lun { s, lun, .. } = &dst {
        s.synchronize_cache(*lun)
            .await
            .context("SYNCHRONIZE CACHE")?;
    }
    if let Some(f) = out_file {
        f.sync_all().context("syncing the output file")?;
    }
    bar.finish_and_clear();
    for end in [&src, &dst] {
        if let End::Lun { s, .. } = end {
            let _ = s.logout().await;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(DdJson {
        bytes: offset,
        seconds,
        mib_per_second: offset as f64 / 1048576.0 / seconds.max(1e-9),
        sha256: hex(&hasher.finalize()),
    })
}

async fn join_one(set: &mut JoinSet<Result<()>>) -> Result<()> {
    match set.join_next().await {
        Some(r) => r.context("write task")?,
        None => Ok(()),
    }
}

/// Produces the source's chunks in order, with reads from a LUN running ahead.
struct Reader {
    file: Option<File>,
    queue: VecDeque<tokio::task::JoinHandle<Result<Bytes>>>,
    lun: Option<(Session, u16, u64)>,
    next: u64,
    length: u64,
    bs: u64,
    depth: usize,
}

impl Reader {
    fn new(src: &End, length: u64, bs: u64, depth: usize) -> Result<Self> {
        let (file, lun) = match src {
            End::File(p) => (
                Some(File::open(p).with_context(|| format!("opening {}", p.display()))?),
                None,
            ),
            End::Lun { s, lun, bs, .. } => (None, Some((s.clone(), *lun, *bs))),
        };
        Ok(Self {
            file,
            queue: VecDeque::new(),
            lun,
            next: 0,
            length,
            bs,
            depth,
        })
    }

    async fn next(&mut self) -> Result<Option<Bytes>> {
        if let Some(f) = &mut self.file {
            if self.next >= self.length {
                return Ok(None);
            }
            let n = (self.length - self.next).min(self.bs) as usize;
            let mut buf = vec![0u8; n];
            f.read_exact(&mut buf).context("reading the input file")?;
            self.next += n as u64;
            return Ok(Some(buf.into()));
        }
        let Some((s, lun, lbs)) = &self.lun else {
            return Ok(None);
        };
        while self.queue.len() < self.depth && self.next < self.length {
            let n = (self.length - self.next).min(self.bs);
            let (s, lun, lbs, off) = (s.clone(), *lun, *lbs, self.next);
            self.queue.push_back(tokio::spawn(async move {
                s.read(lun, off / lbs, (n / lbs) as u32, lbs as u32)
                    .await
                    .with_context(|| format!("READ at LBA {}", off / lbs))
            }));
            self.next += n;
        }
        match self.queue.pop_front() {
            Some(h) => Ok(Some(h.await.context("read task")??)),
            None => Ok(None),
        }
    }
}
