//! Asking a store for bytes again, from another source (issue 43: a hub or a cache that
//! answered wrong bytes): a store with no other source says so, and the counting wrapper
//! passes the question on, as every wrapper must (a wrapper that did not would turn the
//! second try off silently).

use std::sync::Arc;

use objects::{CountingStore, LocalStore, MemoryStore, ObjectError, ObjectStore};

#[test]
fn stores_without_another_source_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalStore::new(dir.path());
    local.put("k", b"bytes").unwrap();
    assert_eq!(local.get_again("k", 1).unwrap(), None);
    assert_eq!(local.get_range_again("k", 0, 2, 1).unwrap(), None);
    assert!(!local.read_only());
    let mem = MemoryStore::new();
    mem.put("k", b"bytes").unwrap();
    assert_eq!(mem.get_again("k", 1).unwrap(), None);
}

#[test]
fn the_counting_wrapper_passes_the_question_on() {
    let mem = Arc::new(MemoryStore::new());
    mem.put("k", b"wrong").unwrap();
    mem.elsewhere("k", b"right bytes".to_vec());
    let counting = CountingStore::new(mem.clone());
    assert_eq!(counting.get("k").unwrap(), b"wrong");
    assert_eq!(counting.get_again("k", 1).unwrap().unwrap(), b"right bytes");
    assert_eq!(
        counting.get_range_again("k", 6, 5, 1).unwrap().unwrap(),
        b"bytes"
    );
    assert!(matches!(
        counting.get_range_again("k", 6, 50, 1),
        Err(ObjectError::CorruptObject { .. })
    ));
    assert!(!counting.read_only());
}

#[test]
fn a_read_only_error_names_the_store_and_what_to_do() {
    let e = ObjectError::ReadOnly {
        location: "http://hub:8080".into(),
        op: "put",
        key: "locks/ingest-1".into(),
    };
    let m = e.to_string();
    assert!(
        m.contains("http://hub:8080") && m.contains("locks/ingest-1"),
        "{m}"
    );
    assert!(m.contains("against the bucket"), "{m}");
}
