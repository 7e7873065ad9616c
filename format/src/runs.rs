//! Run records (`runs/<command>`, docs/format/ui-records.md): the last completed run of a
//! maintenance command (`gc`, `sync`), as one small JSON object with a magic and a
//! version. Informational only: no command reads one to decide anything.

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};

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
    /// [`RunRecord::digest`] in hex: the record has no envelope, so a flipped bit in a time
    /// or the summary would otherwise be shown as if true.
    pub check: String,
}

/// The key of `command`'s record.
pub fn key(command: &str) -> String {
    format!("{RUNS_PREFIX}{command}")
}

impl RunRecord {
    /// A record of `command`, its summary cut at a character boundary to [`MAX_SUMMARY`].
    pub fn new(command: &str, started_at: u64, finished_at: u64, ok: bool, summary: &str) -> Self {
        let mut end = summary.len().min(MAX_SUMMARY);
        while !summary.is_char_boundary(end) {
            end -= 1;
        }
        let mut r = RunRecord {
            magic: MAGIC.into(),
            version: VERSION,
            command: command.into(),
            started_at,
            finished_at,
            ok,
            summary: summary[..end].to_string(),
            check: String::new(),
        };
        r.check = hex::encode(r.digest());
        r
    }

    /// BLAKE3 of `MCASRUN1\n` ‖ command ‖ `\n` ‖ started_at ‖ `\n` ‖ finished_at ‖ `\n` ‖
    /// `1` or `0` (ok) ‖ `\n` ‖ summary, the numbers in decimal ASCII
    /// (docs/format/ui-records.md).
    pub fn digest(&self) -> [u8; 32] {
        let text = format!(
            "MCASRUN1\n{}\n{}\n{}\n{}\n{}",
            self.command,
            self.started_at,
            self.finished_at,
            u8::from(self.ok),
            self.summary
        );
        *blake3::hash(text.as_bytes()).as_bytes()
    }

    /// The record's bytes (JSON).
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings, integers and a bool always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes the record stored under `runs/<command>`. Bytes over [`MAX_RECORD`], not
    /// JSON, of another magic or command, or of a newer version are an error naming why.
    pub fn decode(command: &str, bytes: &[u8]) -> Result<RunRecord> {
        let bad = |reason: String| FormatError::Corrupt {
            key: key(command),
            reason,
        };
        if bytes.len() as u64 > MAX_RECORD {
            return Err(bad(format!(
                "{} bytes, more than {MAX_RECORD}",
                bytes.len()
            )));
        }
        let r: RunRecord = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if r.magic != MAGIC {
            return Err(bad(format!("magic {:?}, not {MAGIC:?}", r.magic)));
        }
        if r.version != VERSION {
            return Err(bad(format!(
                "version {} (this modelcas reads version {VERSION}; a newer one wrote it)",
                r.version
            )));
        }
        if r.check != hex::encode(r.digest()) {
            return Err(bad("its check does not match its fields (damaged)".into()));
        }
        if r.command != command {
            return Err(bad(format!(
                "a record of {:?} under {}",
                r.command,
                key(command)
            )));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of docs/format/ui-records.md, byte for byte.
    #[test]
    fn the_documented_record_decodes() {
        let doc = include_str!("../../docs/format/ui-records.md");
        let json = doc
            .split("```json\n")
            .nth(1)
            .and_then(|s| s.split("\n```").next())
            .unwrap()
            .replace("\n ", "");
        let raw: RunRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(raw.check, hex::encode(raw.digest()));
        let r = RunRecord::decode("sync", json.as_bytes()).unwrap();
        assert_eq!(
            (r.started_at, r.finished_at, r.ok),
            (1796263351, 1796263390, false)
        );
        assert_eq!(r.encode(), json.as_bytes());
    }

    /// Every single flipped bit of a record is refused, or decodes to the same record (a
    /// flip in JSON's insignificant bytes cannot happen: there are none).
    #[test]
    fn every_flipped_bit_is_refused() {
        let bytes =
            RunRecord::new("gc", 1796263351, 1796263390, true, "expired 2 revisions").encode();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                RunRecord::decode("gc", &b).is_err(),
                "bit {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn a_record_round_trips_and_damage_is_named() {
        let r = RunRecord::new("sync", 10, 20, false, &"é".repeat(5000));
        assert!(r.summary.len() <= MAX_SUMMARY && r.summary.starts_with('é'));
        let bytes = r.encode();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("\"magic\":\"modelcas-run\"") && text.contains("\"version\":1"));
        assert_eq!(RunRecord::decode("sync", &bytes).unwrap(), r);
        let gc = RunRecord::new("gc", 1, 1, true, "").encode();
        let other =
            |from: &str, to: &str| String::from_utf8(bytes.clone()).unwrap().replace(from, to);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json".to_vec(), "expected"),
            (other("modelcas-run", "modelcas-xyz").into_bytes(), "magic"),
            (
                other("\"version\":1", "\"version\":2").into_bytes(),
                "newer",
            ),
            (gc, "a record of"),
            (
                other("\"check\":\"", "\"x\":\"").into_bytes(),
                "missing field",
            ),
            (vec![b' '; 70_000], "more than"),
        ];
        for (bytes, want) in cases {
            let e = RunRecord::decode("sync", &bytes).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("runs/sync"), "{want}: {e}");
        }
        // Unknown fields are ignored (a later version 1 writer may add some).
        let later = other("\"ok\":", "\"host\":\"n1\",\"ok\":");
        assert_eq!(RunRecord::decode("sync", later.as_bytes()).unwrap(), r);
    }
}
