//! `MemoryDisk`: a disk in memory for the embedded store, for a deterministic simulation.
//! It keeps what was written and, apart, what was on it at the last sync (`fsync`); a
//! crash (`crashed`) leaves only the latter, as a host that loses power does, so that the
//! store's own commit code decides what survives.

use std::io;
use std::sync::{Arc, Mutex};

use redb::StorageBackend;

#[derive(Debug, Default)]
struct Bytes {
    written: Vec<u8>,
    synced: Vec<u8>,
    /// What was written since the last sync (its length, and each write), so that a sync
    /// copies that much and no more.
    unsynced: Vec<DiskWrite>,
}

#[derive(Debug)]
enum DiskWrite {
    Length(usize),
    Write(usize, Vec<u8>),
}

/// A disk in memory; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemoryDisk(Arc<Mutex<Bytes>>);

impl MemoryDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// The disk as a crash leaves it: what was synced, and nothing written since.
    pub fn crashed(&self) -> Self {
        let synced = self.lock().synced.clone();
        Self(Arc::new(Mutex::new(Bytes {
            written: synced.clone(),
            synced,
            unsynced: Vec::new(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bytes> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StorageBackend for MemoryDisk {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.lock().written.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let bytes = self.lock();
        let start = offset as usize;
        let end = start + out.len();
        let found = bytes.written.get(start..end).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the disk",
            )
        })?;
        out.copy_from_slice(found);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut bytes = self.lock();
        bytes.written.resize(len as usize, 0);
        bytes.unsynced.push(DiskWrite::Length(len as usize));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let bytes = &mut *self.lock();
        for change in bytes.unsynced.drain(..) {
            match change {
                DiskWrite::Length(len) => bytes.synced.resize(len, 0),
                DiskWrite::Write(at, data) => put(&mut bytes.synced, at, &data),
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut bytes = self.lock();
        put(&mut bytes.written, offset as usize, data);
        bytes
            .unsynced
            .push(DiskWrite::Write(offset as usize, data.to_vec()));
        Ok(())
    }
}

/// Writes `data` at `at`, growing `bytes` as a file grows.
fn put(bytes: &mut Vec<u8>, at: usize, data: &[u8]) {
    let end = at + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[at..end].copy_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced_only() {
        let disk = MemoryDisk::new();
        disk.write(0, b"kept").unwrap();
        disk.sync_data().unwrap();
        disk.write(4, b"lost").unwrap();
        let after = disk.crashed();
        assert_eq!(after.len().unwrap(), 4);
        let mut out = [0u8; 4];
        after.read(0, &mut out).unwrap();
        assert_eq!(&out, b"kept");
        assert!(after.read(4, &mut out).is_err());
    }
}
