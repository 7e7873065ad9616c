//! Lock and lease objects (`locks/<kind>-<id>`, magic `MCASLOCK`): who holds a gc lock, an
//! ingest lease or a write lease, since when, and for how long after each refresh. How
//! they are taken, refreshed and judged stale (by the object store's clock) is `repo::lock`.

use bincode::{Decode, Encode};

use crate::codec::{self, CodecError, Kind};

/// The persisted lock or lease (`MCASLOCK`).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct LockObject {
    /// `gc`, `ingest`, `write`, or `commit.<16 hex>` (a branch's commit lock).
    pub kind: String,
    /// Host name and pid namespace of the holder (`node-1 pid:[4026531836]`).
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// When it was taken, by the store's clock (ms since the epoch): the modification
    /// time of its first write. 0 in that first write (the holder learns the time from
    /// the store afterwards): then the object's own modification time is the start.
    pub started_ms: u64,
    /// Last refresh by the holder's clock (ms since the epoch). Informational only.
    pub refreshed_ms: u64,
    /// Time to live after a refresh (ms).
    pub ttl_ms: u64,
}

/// The bytes of a lock object (payload not compressed).
pub fn encode(lock: &LockObject) -> Vec<u8> {
    codec::encode(Kind::Lock, lock, false)
}

/// Decodes a lock object, checking its envelope.
pub fn decode(bytes: &[u8]) -> Result<LockObject, CodecError> {
    codec::decode(Kind::Lock, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taken from the code before the type moved here (store/tests/golden_records.rs).
    const GOLDEN: &str = "4d4341534c4f434b0100000006696e67657374176e6f64652d31207069643a5b343032363533313833365dfb9210fd7b68e5cf8b010000fd6052e6cf8b010000fcc0270900ad6e43adc2b94e0eb09535741bb710fd83a2502490f891e082db8c612dd908f1";

    #[test]
    fn bytes_are_the_ones_written_before_the_move() {
        let lock = LockObject {
            kind: "ingest".into(),
            host: "node-1 pid:[4026531836]".into(),
            pid: 4242,
            started_ms: 1_700_000_000_123,
            refreshed_ms: 1_700_000_060_000,
            ttl_ms: 600_000,
        };
        let bytes = encode(&lock);
        assert_eq!(hex::encode(&bytes), GOLDEN);
        assert_eq!(decode(&bytes).unwrap(), lock);
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(matches!(decode(&bad), Err(CodecError::Checksum)));
    }
}
