//! Run records (`runs/<command>`, docs/format/ui-records.md): the last completed run of a
//! maintenance command (`gc`, `sync`) on this store, from any machine, so that people (the
//! pages of `serve`) can see when it last ran and how it went. Informational only: no
//! command reads one to decide anything, a record may be missing or stale, and writing it
//! is best-effort (a command that cannot write it still succeeds).
//!
//! Each record is one small JSON object with a magic and a version.

use serde::{Deserialize, Serialize};

use crate::backend::ObjectStore;
use crate::{Result, StoreError};

/// Where the records live: `runs/gc`, `runs/sync`.
pub const RUNS_PREFIX: &str = "runs/";
/// The value of `magic`.
pub const MAGIC: &str = "modelcas-run";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;
/// Largest record read (a damaged or hostile object must not cost memory).
pub const MAX_RECORD: u64 = 64 * 1024;
/// Longest summary written.
pub const MAX_SUMMARY: usize = 4096;

/// The commands that leave a record.
pub const COMMANDS: [&str; 2] = ["gc", "sync"];

/// One run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Always [`MAGIC`].
    pub magic: String,
    /// [`VERSION`].
    pub version: u32,
    /// `gc` or `sync`.
    pub command: String,
    /// When it started and ended, by the clock of the machine that ran it (seconds since
    /// the epoch).
    pub started_at: u64,
    pub finished_at: u64,
    /// Whether every part succeeded (a sync with a failed entry: false).
    pub ok: bool,
    /// What it did, in one line, as the command printed it.
    pub summary: String,
}

/// The key of `command`'s record.
pub fn key(command: &str) -> String {
    format!("{RUNS_PREFIX}{command}")
}

/// Writes the record of a run of `command` (replacing the previous one).
pub fn write(
    store: &dyn ObjectStore,
    command: &str,
    started_at: u64,
    finished_at: u64,
    ok: bool,
    summary: &str,
) -> Result<()> {
    let mut summary = summary.to_string();
    if summary.len() > MAX_SUMMARY {
        let mut end = MAX_SUMMARY;
        while !summary.is_char_boundary(end) {
            end -= 1;
        }
        summary.truncate(end);
    }
    let r = RunRecord {
        magic: MAGIC.into(),
        version: VERSION,
        command: command.into(),
        started_at,
        finished_at,
        ok,
        summary,
    };
    let bytes = serde_json::to_vec(&r).map_err(|e| StoreError::Invalid(e.to_string()))?;
    Ok(store.put(&key(command), &bytes)?)
}

/// The record of `command`'s last run; `None` when there is none. A record that is too
/// large, not JSON, of another magic, command or a newer version is an error naming why.
pub fn read(store: &dyn ObjectStore, command: &str) -> Result<Option<RunRecord>> {
    let key = key(command);
    let bad = |reason: String| StoreError::CorruptObject {
        key: key.clone(),
        reason,
    };
    match store.size(&key)? {
        None => return Ok(None),
        Some(n) if n > MAX_RECORD => return Err(bad(format!("{n} bytes, more than {MAX_RECORD}"))),
        Some(_) => {}
    }
    let bytes = match store.get(&key) {
        Ok(b) => b,
        Err(objects::ObjectError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if bytes.len() as u64 > MAX_RECORD {
        return Err(bad(format!(
            "{} bytes, more than {MAX_RECORD}",
            bytes.len()
        )));
    }
    let r: RunRecord = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if r.magic != MAGIC {
        return Err(bad(format!("magic {:?}, not {MAGIC:?}", r.magic)));
    }
    if r.version != VERSION {
        return Err(bad(format!(
            "version {} (this modelcas reads version {VERSION}; a newer one wrote it)",
            r.version
        )));
    }
    if r.command != command {
        return Err(bad(format!("a record of {:?} under {key}", r.command)));
    }
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn a_record_reads_back_and_damage_is_named() {
        let m = MemoryStore::new();
        assert_eq!(read(&m, "gc").unwrap(), None);
        write(&m, "sync", 10, 20, false, &"é".repeat(5000)).unwrap();
        let r = read(&m, "sync").unwrap().unwrap();
        assert_eq!((r.started_at, r.finished_at, r.ok), (10, 20, false));
        assert!(r.summary.len() <= MAX_SUMMARY && r.summary.starts_with('é'));
        let text = String::from_utf8(m.get("runs/sync").unwrap()).unwrap();
        assert!(text.contains("\"magic\":\"modelcas-run\"") && text.contains("\"version\":1"));
        let cases: [(&[u8], &str); 5] = [
            (b"not json", "expected"),
            (br#"{"magic":"x","version":1,"command":"sync","started_at":1,"finished_at":1,"ok":true,"summary":""}"#, "magic"),
            (br#"{"magic":"modelcas-run","version":2,"command":"sync","started_at":1,"finished_at":1,"ok":true,"summary":""}"#, "newer"),
            (br#"{"magic":"modelcas-run","version":1,"command":"gc","started_at":1,"finished_at":1,"ok":true,"summary":""}"#, "a record of"),
            (&[b' '; 70_000], "more than"),
        ];
        for (bytes, want) in cases {
            m.put("runs/sync", bytes).unwrap();
            let e = read(&m, "sync").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("runs/sync"), "{want}: {e}");
        }
        // Unknown fields are ignored (a later version 1 writer may add some).
        m.put("runs/sync", br#"{"magic":"modelcas-run","version":1,"command":"sync","started_at":1,"finished_at":2,"ok":true,"summary":"s","host":"n1"}"#).unwrap();
        assert_eq!(read(&m, "sync").unwrap().unwrap().summary, "s");
    }
}
