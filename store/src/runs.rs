//! Run records' I/O (`runs/<command>`; bytes in `format::runs`, docs/format/ui-records.md):
//! the last completed run of a maintenance command (`gc`, `sync`) on this store, from any
//! machine, so that people (the pages of `serve`) can see when it last ran and how it went.
//! Informational only: no command reads one to decide anything, a record may be missing or
//! stale, and writing it is best-effort (a command that cannot write it still succeeds).

use format::runs::{key, RunRecord, MAX_RECORD};
use objects::{ObjectError, ObjectStore};
use repo::{Result, StoreError};

/// Writes the record of a run of `command` (replacing the previous one).
pub fn write(
    store: &dyn ObjectStore,
    command: &str,
    started_at: u64,
    finished_at: u64,
    ok: bool,
    summary: &str,
) -> Result<()> {
    let r = RunRecord::new(command, started_at, finished_at, ok, summary);
    Ok(store.put(&key(command), &r.encode())?)
}

/// The record of `command`'s last run; `None` when there is none. A record that is too
/// large, not JSON, of another magic, command or a newer version is an error naming why.
pub fn read(store: &dyn ObjectStore, command: &str) -> Result<Option<RunRecord>> {
    let key = key(command);
    match store.size(&key)? {
        None => return Ok(None),
        Some(n) if n > MAX_RECORD => {
            return Err(StoreError::CorruptObject {
                key,
                reason: format!("{n} bytes, more than {MAX_RECORD}"),
            })
        }
        Some(_) => {}
    }
    let bytes = match store.get(&key) {
        Ok(b) => b,
        Err(ObjectError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(Some(RunRecord::decode(command, &bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::runs::MAX_SUMMARY;
    use objects::MemoryStore;

    #[test]
    fn a_record_reads_back_and_damage_is_named() {
        let m = MemoryStore::new();
        assert_eq!(read(&m, "gc").unwrap(), None);
        write(&m, "sync", 10, 20, false, &"é".repeat(5000)).unwrap();
        let r = read(&m, "sync").unwrap().unwrap();
        assert_eq!((r.started_at, r.finished_at, r.ok), (10, 20, false));
        assert!(r.summary.len() <= MAX_SUMMARY);
        m.put("runs/sync", b"not json").unwrap();
        let e = read(&m, "sync").unwrap_err().to_string();
        assert!(e.contains("runs/sync"), "{e}");
        m.put("runs/sync", &[b' '; 70_000]).unwrap();
        let e = read(&m, "sync").unwrap_err().to_string();
        assert!(e.contains("more than") && e.contains("runs/sync"), "{e}");
    }
}
