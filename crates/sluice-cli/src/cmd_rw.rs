//! `sluice read` and `sluice write`.

use std::io::Write;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::client_args::{ReadArgs, WriteArgs};
use crate::client_common::{connect, hex, lun_url, print_json, runtime};

/// Most bytes moved by one command.
const CHUNK: u64 = 1 << 20;

#[derive(Serialize)]
struct RwJson {
    offset: u64,
    length: u64,
    sha256: String,
}

/// `sluice read URL --offset --length [-o FILE]`. Unaligned ranges are read as whole blocks
/// and cut.
pub fn run_read(args: &ReadArgs) -> Result<()> {
    let (url, lun) = lun_url(&args.url)?;
    let data = runtime()?.block_on(async {
        let s = connect(&url, &args.conn).await?;
        let cap = s.read_capacity(lun).await.context("READ CAPACITY")?;
        let bs = u64::from(cap.block_size);
        let end = args
            .offset
            .checked_add(args.length)
            .filter(|&e| e <= cap.bytes());
        let Some(end) = end else {
            bail!(
                "{}+{} bytes is beyond the end of the LUN ({} bytes)",
                args.offset,
                args.length,
                cap.bytes()
            );
        };
        let first = args.offset / bs;
        let last = end.div_ceil(bs);
        let mut data = Vec::with_capacity((last - first) as usize * bs as usize);
        let mut lba = first;
        while lba < last {
            let blocks = (last - lba).min(CHUNK / bs) as u32;
            let chunk = s
                .read(lun, lba, blocks, cap.block_size)
                .await
                .with_context(|| format!("READ at LBA {lba}"))?;
            data.extend_from_slice(&chunk);
            lba += u64::from(blocks);
        }
        let _ = s.logout().await;
        let skip = (args.offset - first * bs) as usize;
        anyhow::Ok(data[skip..skip + args.length as usize].to_vec())
    })?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, &data).with_context(|| format!("writing {}", path.display()))?
        }
        None if !args.conn.json => std::io::stdout().lock().write_all(&data)?,
        None => {}
    }
    if args.conn.json {
        print_json(&RwJson {
            offset: args.offset,
            length: args.length,
            sha256: hex(&Sha256::digest(&data)),
        })?;
    }
    Ok(())
}

/// `sluice write URL --offset (-i FILE | --pattern BYTE) --length`.
pub fn run_write(args: &WriteArgs) -> Result<()> {
    let (url, lun) = lun_url(&args.url)?;
    let data: Vec<u8> = match (&args.input, args.pattern) {
        (Some(path), _) => {
            let mut d =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            if let Some(len) = args.length {
                if len > d.len() as u64 {
                    bail!(
                        "{} has {} bytes, fewer than --length {len}",
                        path.display(),
                        d.len()
                    );
                }
                d.truncate(len as usize);
            }
            d
        }
        (None, Some(byte)) => vec![byte; args.length.unwrap_or(0) as usize],
        (None, None) => bail!("give -i FILE or --pattern BYTE"),
    };
    let data = Bytes::from(data);
    let length = data.len() as u64;
    runtime()?.block_on(async {
        let s = connect(&url, &args.conn).await?;
        let cap = s.read_capacity(lun).await.context("READ CAPACITY")?;
        let bs = u64::from(cap.block_size);
        if !args.offset.is_multiple_of(bs) || !length.is_multiple_of(bs) {
            bail!(
                "offset {} and length {length} must be multiples of the block size {bs}",
                args.offset
            );
        }
        if args.offset + length > cap.bytes() {
            bail!(
                "{}+{length} bytes is beyond the end of the LUN ({} bytes)",
                args.offset,
                cap.bytes()
            );
        }
        let mut done = 0u64;
        while done < length {
            let n = (length - done).min(CHUNK);
            let lba = (args.offset + done) / bs;
            s.write(
                lun,
                lba,
                data.slice(done as usize..(done + n) as usize),
                cap.block_size,
            )
            .await
            .with_context(|| format!("WRITE at LBA {lba}"))?;
            done += n;
        }
        s.synchronize_cache(lun)
            .await
            .context("SYNCHRONIZE CACHE")?;
        let _ = s.logout().await;
        anyhow::Ok(())
    })?;
    if args.conn.json {
        print_json(&RwJson {
            offset: args.offset,
            length,
            sha256: hex(&Sha256::digest(&data)),
        })?;
    }
    Ok(())
}
