//! Asking the store again: an object whose bytes fail their check (an envelope's BLAKE3
//! trailer, a frame's chunk id) is asked of the store's other sources
//! ([`ObjectStore::get_again`]: a hub's other addresses, past every cache) before a read
//! fails. A directory or the bucket itself has no other source: the first error stands.

use objects::ObjectStore;

use crate::error::{Result, StoreError};

/// The most times bytes that failed their check are asked for again.
pub const MAX_AGAIN: u32 = 8;

/// Whether `e` says the bytes read were wrong (a failed check, or a read cut short), so
/// that another source may have them right.
fn wrong_bytes(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::CorruptObject { .. }
            | StoreError::CorruptChunk { .. }
            | StoreError::Object(objects::ObjectError::CorruptObject { .. })
    )
}

/// `first`, the outcome of decoding the bytes first read, or else the first of `fetch(1)`,
/// `fetch(2)`, ... that decodes, until a source has nothing (`None`) or [`MAX_AGAIN`].
fn or_again<T>(
    first: Result<T>,
    what: std::fmt::Arguments<'_>,
    fetch: impl Fn(u32) -> objects::Result<Option<Vec<u8>>>,
    decode: impl Fn(Vec<u8>) -> Result<T>,
) -> Result<T> {
    let first = match first {
        Err(e) if wrong_bytes(&e) => e,
        other => return other,
    };
    for attempt in 1..=MAX_AGAIN {
        let Ok(Some(again)) = fetch(attempt) else {
            break;
        };
        if let Ok(v) = decode(again) {
            tracing::warn!("{what}: wrong bytes were read right from another source");
            return Ok(v);
        }
    }
    Err(first)
}

/// `decode(bytes)`, the bytes of `key` as first read; when they fail their check, the
/// object is asked of the store's other sources until one decodes.
pub fn decoded<T>(
    store: &dyn ObjectStore,
    key: &str,
    bytes: Vec<u8>,
    decode: impl Fn(Vec<u8>) -> Result<T>,
) -> Result<T> {
    let first = decode(bytes);
    or_again(
        first,
        format_args!("{key}"),
        |a| store.get_again(key, a),
        decode,
    )
}

/// `decode` of `len` bytes of `key` from `offset`; when they fail their check (or the
/// read was cut short), the range is asked of the store's other sources until one decodes.
pub fn range_decoded<T>(
    store: &dyn ObjectStore,
    key: &str,
    offset: u64,
    len: u64,
    decode: impl Fn(Vec<u8>) -> Result<T>,
) -> Result<T> {
    let first = match store.get_range(key, offset, len) {
        Ok(bytes) => decode(bytes),
        Err(e) => Err(e.into()),
    };
    let fetch = |a| store.get_range_again(key, offset, len, a);
    or_again(first, format_args!("{key} at {offset}"), fetch, decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use objects::MemoryStore;

    fn check(b: Vec<u8>) -> Result<u8> {
        match b[..] {
            [x] if x < 10 => Ok(x),
            _ => Err(StoreError::CorruptObject {
                key: "k".into(),
                reason: "bad".into(),
            }),
        }
    }

    #[test]
    fn bad_bytes_are_asked_of_another_source() {
        let store = MemoryStore::new();
        assert!(
            decoded(&store, "k", vec![20], check).is_err(),
            "no other source"
        );
        store.elsewhere("k", vec![3]);
        assert_eq!(decoded(&store, "k", vec![20], check).unwrap(), 3);
        assert_eq!(decoded(&store, "k", vec![4], check).unwrap(), 4);
        store.elsewhere("k", vec![30]);
        let e = decoded(&store, "k", vec![20], check).unwrap_err();
        assert!(matches!(e, StoreError::CorruptObject { .. }), "{e}");
    }

    #[test]
    fn bad_ranges_are_asked_of_another_source() {
        let store = MemoryStore::new();
        store.put("k", &[1, 20, 3]).unwrap();
        assert!(
            range_decoded(&store, "k", 1, 1, check).is_err(),
            "no other source"
        );
        store.elsewhere("k", vec![1, 2, 3]);
        assert_eq!(range_decoded(&store, "k", 1, 1, check).unwrap(), 2);
    }
}
