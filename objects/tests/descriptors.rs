//! A batch of puts holds one file descriptor at a time, however many objects it has. Alone
//! in its test binary because it lowers the process's descriptor limit.

use objects::{LocalStore, ObjectStore};

/// It failed with "Too many open files" when every temporary file of a batch stayed open
/// until the batch was synced (a hub cache of many revisions, or many refs, at once).
#[test]
fn a_batch_larger_than_the_descriptor_limit_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalStore::new(tmp.path().join("store"));
    let limit = 256;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`, which we own and which lives across the call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = limit;
    // SAFETY: setrlimit reads `lim`, which lives across the call; lowering the soft limit is
    // always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let n = 3 * limit as usize;
    let objects: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (format!("repos/a/b/refs/r{i}"), vec![i as u8; 10]))
        .collect();
    store.put_many(&objects).unwrap();
    assert_eq!(store.list("repos/").unwrap().len(), n);
    assert_eq!(
        store.get("repos/a/b/refs/r700").unwrap(),
        vec![700usize as u8; 10]
    );
}
