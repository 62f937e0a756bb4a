//! Small pieces of state that must survive a crash and a restart (persistent reservations
//! with APTPL), kept in a file that is replaced atomically.
//!
//! A save writes the new contents to a temporary file in the same directory, `fsync`s it,
//! renames it over the old file and `fsync`s the directory. After a crash at any point the
//! file holds either the old contents or the new, never a mix, and once `save` returns the new
//! contents survive a loss of power (rename is atomic within a file system, POSIX; the
//! directory `fsync` makes the rename itself durable).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Somewhere to keep one piece of state durably.
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// The last contents saved, or `None` if nothing was ever saved.
    fn load(&self) -> io::Result<Option<Vec<u8>>>;

    /// Replaces the contents; when this returns `Ok`, they survive a crash or power loss.
    fn save(&self, contents: &[u8]) -> io::Result<()>;

    /// Whether other processes (other gateways exporting the same logical unit) share this
    /// store and change it: then the state is kept whatever APTPL says, read again before it
    /// is answered, and replaced only through [`save_if`](Self::save_if).
    fn shared(&self) -> bool {
        false
    }

    /// The contents and their version (a number that changes with every save; 0 when nothing
    /// was ever saved).
    fn load_versioned(&self) -> io::Result<(Option<Vec<u8>>, u64)> {
        Ok((self.load()?, 0))
    }

    /// Replaces the contents if they are still at `version`: `Ok(Some(new version))`, or
    /// `Ok(None)` when someone else saved in between (nothing changed; load and retry). When
    /// it returns, every other sharer has been told (see [`on_change`](Self::on_change)).
    fn save_if(&self, version: u64, contents: &[u8]) -> io::Result<Option<u64>> {
        self.save(contents)?;
        Ok(Some(version.wrapping_add(1)))
    }

    /// Registers `changed`, called (on some other thread) whenever another sharer saved: the
    /// state held in memory is stale from then on. Stores nobody else changes never call it.
    fn on_change(&self, changed: Box<dyn Fn() + Send + Sync>) {
        drop(changed);
    }
}

/// Largest state file read back: far more than any state kept this way needs (a logical
/// unit's full reservation table is under 600 KiB), so a wrong path cannot make the target
/// read a huge file into memory.
pub const MAX_STATE_FILE_BYTES: u64 = 4 << 20;

/// A [`StateStore`] in one file, replaced atomically.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// A store at `path`. Its directory is created (with parents) on the first save.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where the state lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn temporary(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        self.path.with_file_name(name)
    }

    fn directory(&self) -> &Path {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    }
}

impl StateStore for StateFile {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if file.metadata()?.len() > MAX_STATE_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is larger than {MAX_STATE_FILE_BYTES} bytes",
                    self.path.display()
                ),
            ));
        }
        let mut contents = Vec::new();
        io::Read::read_to_end(
            &mut io::Read::take(file, MAX_STATE_FILE_BYTES),
            &mut contents,
        )?;
        Ok(Some(contents))
    }

    fn save(&self, contents: &[u8]) -> io::Result<()> {
        let dir = self.directory();
        fs::create_dir_all(dir)?;
        let tmp = self.temporary();
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(contents)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_replace_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateFile::new(dir.path().join("a/b/state"));
        assert_eq!(store.load().unwrap(), None);
        store.save(b"one").unwrap();
        store.save(b"two").unwrap();
        let again = StateFile::new(store.path());
        assert_eq!(again.load().unwrap().as_deref(), Some(&b"two"[..]));
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state")]);
    }

    #[test]
    fn a_leftover_temporary_file_does_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateFile::new(dir.path().join("state"));
        store.save(b"old").unwrap();
        // A crash after writing the temporary file but before the rename.
        fs::write(dir.path().join("state.tmp"), b"half").unwrap();
        assert_eq!(store.load().unwrap().as_deref(), Some(&b"old"[..]));
        store.save(b"new").unwrap();
        assert_eq!(store.load().unwrap().as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn oversized_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let f = File::create(&path).unwrap();
        f.set_len(MAX_STATE_FILE_BYTES + 1).unwrap();
        let e = StateFile::new(&path).load().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
