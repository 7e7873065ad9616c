//! Tests of the node file cache: fills, checks, check records and what damages them.

use super::*;
use crate::test_pack::one_file_store;

/// A file the cache keeps: just over the minimum.
const SIZE: usize = MIN_FILE_BYTES as usize + 4096;

#[test]
fn a_fill_writes_the_verified_file_and_open_returns_it() {
    let (store, manifest) = one_file_store(&vec![7u8; SIZE]);
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(&t.path().join("files"), 1 << 30).unwrap();
    let f = &manifest.files[0];
    assert!(cache.open_file(f).is_none());
    assert!(cache.fill(&store, &manifest, f).unwrap());
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut cache.open_file(f).unwrap(), &mut got).unwrap();
    assert_eq!(got, vec![7u8; SIZE]);
    assert!(!cache.fill(&store, &manifest, f).unwrap(), "filled once");
    let mode = fs::metadata(cache.dir()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(
        fs::read(cache.dir().join("FORMAT")).unwrap(),
        FILE_CACHE_MARK
    );
}

#[test]
fn a_directory_of_another_layout_is_refused() {
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("FORMAT"), b"MCASFILES 2\n").unwrap();
    let err = FileCache::open(t.path(), 1 << 30).unwrap_err().to_string();
    assert!(err.contains("MCASFILES 2"), "{err}");
}

#[test]
fn a_file_whose_sha256_does_not_match_leaves_no_entry() {
    let (store, mut manifest) = one_file_store(&vec![7u8; SIZE]);
    manifest.files[0].sha256.0[0] ^= 1;
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    let f = &manifest.files[0];
    assert!(cache.fill(&store, &manifest, f).is_err());
    assert!(cache.open_file(f).is_none());
    let leftovers: Vec<_> = walk(t.path())
        .into_iter()
        .filter(|p| !p.ends_with("FORMAT"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn an_entry_of_the_wrong_length_is_not_used() {
    let (store, manifest) = one_file_store(&vec![7u8; SIZE]);
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    let f = &manifest.files[0];
    cache.fill(&store, &manifest, f).unwrap();
    let p = t.path().join(&f.sha256_hex()[..2]).join(f.sha256_hex());
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(10)
        .unwrap();
    assert!(cache.open_file(f).is_none());
    assert!(!p.exists());
}

/// A cache holding the one file of a store of noise (several chunks), and the path of
/// its entry: filled (and so checked, and recorded) by one cache, then opened afresh
/// (as the mount of a later start: no check run yet).
fn filled() -> (
    tempfile::TempDir,
    Arc<FileCache>,
    Manifest,
    std::path::PathBuf,
) {
    let (store, manifest) = one_file_store(&crate::test_pack::noise(3 * SIZE, 11));
    let t = tempfile::tempdir().unwrap();
    let filler = FileCache::open(t.path(), 1 << 30).unwrap();
    assert!(filler.fill(&store, &manifest, &manifest.files[0]).unwrap());
    assert_eq!(filler.checks_run(), 1, "a fill checks the entry it linked");
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    let p = cache.dir.path(&manifest.files[0].sha256_hex());
    (t, cache, manifest, p)
}

/// [`filled`], without the record its fill left: the first open checks the entry.
fn filled_unrecorded() -> (
    tempfile::TempDir,
    Arc<FileCache>,
    Manifest,
    std::path::PathBuf,
) {
    let (t, cache, manifest, p) = filled();
    fs::remove_file(record_path(&cache, &manifest.files[0])).unwrap();
    (t, cache, manifest, p)
}

fn flip(p: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 1], at).unwrap();
}

fn read_all(mut f: fs::File) -> Vec<u8> {
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut got).unwrap();
    got
}

#[test]
fn an_entry_is_checked_at_its_first_open_then_trusted_by_its_stamp() {
    let (_t, cache, manifest, p) = filled_unrecorded();
    let f = &manifest.files[0];
    assert!(f.chunks.len() > 1, "several chunks");
    let want = fs::read(&p).unwrap();
    for _ in 0..3 {
        assert_eq!(read_all(cache.open_file(f).unwrap()), want);
    }
    assert_eq!(cache.checks_run(), 1);
    assert_eq!(cache.checks.recorded(&f.sha256), Some(Verdict::Good));
    // Another process (a restart) believes the record this check left.
    let again = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert!(again.open_file(f).is_some());
    assert_eq!(again.checks_run(), 0);
}

/// The record an earlier process left for the entry of `f`.
fn record_path(cache: &FileCache, f: &FileEntry) -> std::path::PathBuf {
    cache.dir().join(checked::DIR_NAME).join(f.sha256_hex())
}

/// Issue 40 (failed before: every process read and hashed each entry at its first
/// open, so a pod's second start on a node read its weights at 0.66-0.73 of the disk):
/// a new process takes an entry unread when the fill or the check of an earlier one
/// left a record under the stamp the entry still has.
#[test]
fn a_new_process_takes_an_entry_an_earlier_one_filled_or_checked_unread() {
    let (_t, cache, manifest, p) = filled();
    let f = &manifest.files[0];
    let want = fs::read(&p).unwrap();
    assert!(record_path(&cache, f).is_file(), "the fill left a record");
    let second = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert_eq!(read_all(second.open_file(f).unwrap()), want);
    assert_eq!(second.checks_run(), 0, "taken unread");
    // A record lost: the next process checks, and leaves a record of its own.
    fs::remove_file(record_path(&cache, f)).unwrap();
    let third = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert_eq!(read_all(third.open_file(f).unwrap()), want);
    assert_eq!(third.checks_run(), 1);
    let fourth = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert_eq!(read_all(fourth.open_file(f).unwrap()), want);
    assert_eq!(fourth.checks_run(), 0, "the check's record is believed");
}

/// What may make a record lie, each tried on a fresh cache: the entry written in place
/// (same length), the record damaged, another entry's record put in its place, a
/// record of another chunking of the same bytes, the entry replaced by a copy of itself
/// (another inode), the record a FIFO or a link. Each is checked by the next process,
/// and a damaged entry is dropped, never handed out.
#[test]
fn a_record_that_does_not_fit_the_entry_now_is_not_believed() {
    type Spoil = fn(&FileCache, &FileEntry, &Path);
    let spoils: [(&str, Spoil, bool); 6] = [
        ("entry written", |_, _, p| flip(p, 7), false),
        (
            "record damaged",
            |c, f, _| flip(&record_path(c, f), 40),
            true,
        ),
        (
            "another entry's record",
            |c, f, _| {
                let mut other = f.clone();
                other.sha256.0[0] ^= 1;
                let stamp = c
                    .checked
                    .stamp(&fs::File::open(c.dir.path(&f.sha256_hex())).unwrap());
                c.checked.record(&stamp.unwrap(), &other);
                fs::rename(record_path(c, &other), record_path(c, f)).unwrap();
            },
            true,
        ),
        (
            "another chunking",
            |c, f, p| {
                let mut other = f.clone();
                other.chunks[0].raw_len -= 1;
                other.chunks[1].raw_len += 1;
                c.checked.record(
                    &c.checked.stamp(&fs::File::open(p).unwrap()).unwrap(),
                    &other,
                );
            },
            true,
        ),
        (
            "entry copied over itself",
            |_, _, p| {
                let copy = p.with_file_name(".tmp-copy");
                fs::copy(p, &copy).unwrap();
                fs::rename(&copy, p).unwrap();
            },
            true,
        ),
        (
            "record a FIFO",
            |c, f, _| {
                let r = record_path(c, f);
                fs::remove_file(&r).unwrap();
                let path = std::ffi::CString::new(r.as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: a C string we own, outliving the call.
                assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
            },
            true,
        ),
    ];
    for (what, spoil, still_good) in spoils {
        let (_t, cache, manifest, p) = filled();
        let f = &manifest.files[0];
        spoil(&cache, f, &p);
        let next = FileCache::open(cache.dir(), 1 << 30).unwrap();
        let got = next.open_file(f);
        assert_eq!(next.checks_run(), 1, "{what}: checked");
        assert_eq!(got.is_some(), still_good, "{what}");
        if !still_good {
            assert!(!p.exists(), "{what}: dropped");
            assert!(
                !record_path(&cache, f).exists(),
                "{what}: record gone with it"
            );
        }
    }
}

/// Hostile review of issue 40 (failed before: the check recorded the entry for the
/// next process while another process held it open for writing, so that a page it had
/// dirtied through a shared mapping took a later write without moving the stamp, and
/// the next mount served that write unchecked): an entry open for writing, by a
/// descriptor or a writable shared mapping, is not used and not recorded.
#[test]
fn an_entry_open_for_writing_is_neither_used_nor_recorded() {
    let (_t, cache, manifest, p) = filled_unrecorded();
    let f = &manifest.files[0];
    let rw = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    // SAFETY: a new shared mapping of an open fd, unmapped below.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            rw.as_raw_fd(),
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    drop(rw);
    assert!(cache.open_file(f).is_none(), "a writable mapping holds it");
    assert!(!record_path(&cache, f).exists(), "nothing recorded");
    assert!(p.exists(), "not dropped: its bytes were not found wrong");
    // SAFETY: the mapping made above, unmapped once.
    unsafe { libc::munmap(at, 4096) };
    assert!(cache.open_file(f).is_some());
    assert!(record_path(&cache, f).is_file());
}

/// Hostile review of issue 40 (failed before: records were read, written and pruned
/// through a symbolic link put in place of `.checked`, and pruning removed every file
/// of the directory it pointed to): records are off, nothing outside is touched.
#[test]
fn a_checked_directory_that_is_a_link_is_not_followed() {
    let (t, cache, manifest, _p) = filled_unrecorded();
    let f = &manifest.files[0];
    let elsewhere = t.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::write(elsewhere.join("precious"), b"keep me").unwrap();
    fs::remove_dir_all(cache.dir().join(checked::DIR_NAME)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, cache.dir().join(checked::DIR_NAME)).unwrap();
    let again = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert!(again.open_file(f).is_some());
    assert!(again.open_file(f).is_some());
    let third = FileCache::open(cache.dir(), 1 << 30).unwrap();
    assert!(third.open_file(f).is_some());
    assert_eq!(third.checks_run(), 1, "no record believed through the link");
    let names: Vec<_> = fs::read_dir(&elsewhere)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["precious"], "nothing written or removed there");
}

#[test]
fn records_whose_entry_is_gone_are_removed_when_a_cache_opens() {
    let (_t, cache, manifest, p) = filled();
    let f = &manifest.files[0];
    let stray = cache.dir().join(checked::DIR_NAME).join("not-a-record");
    fs::write(&stray, b"x").unwrap();
    // Pruned on a thread of its own: waited for.
    let gone = |p: &Path| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while p.exists() {
            assert!(Instant::now() < deadline, "{} never removed", p.display());
            std::thread::yield_now();
        }
    };
    let _ = FileCache::open(cache.dir(), 1 << 30).unwrap();
    gone(&stray);
    assert!(record_path(&cache, f).is_file(), "kept beside its entry");
    fs::remove_file(&p).unwrap(); // evicted by another process
    let _ = FileCache::open(cache.dir(), 1 << 30).unwrap();
    gone(&record_path(&cache, f));
    assert_eq!(
        cache.dir.bytes(),
        3 * SIZE as u64,
        "records are not entries"
    );
}

#[test]
fn an_entry_with_one_flipped_bit_is_dropped_at_its_first_open() {
    let len = 3 * SIZE as u64;
    // The first byte, a byte in the middle, the last byte.
    for at in [0, len / 2, len - 1] {
        let (_t, cache, manifest, p) = filled();
        flip(&p, at);
        assert!(cache.open_file(&manifest.files[0]).is_none(), "bit at {at}");
        assert!(!p.exists(), "dropped");
        assert_eq!(cache.checks_run(), 1);
    }
}

#[test]
fn an_entry_changed_after_its_check_is_checked_again_and_dropped() {
    let (_t, cache, manifest, p) = filled_unrecorded();
    let f = &manifest.files[0];
    assert!(cache.open_file(f).is_some());
    flip(&p, 5);
    assert!(cache.open_file(f).is_none());
    assert_eq!(cache.checks_run(), 2);
    assert_eq!(cache.checks.recorded(&f.sha256), Some(Verdict::Damaged));
    assert!(!p.exists());
}

#[test]
fn an_entry_replaced_by_rename_is_checked_again() {
    let (_t, cache, manifest, p) = filled_unrecorded();
    let f = &manifest.files[0];
    assert!(cache.open_file(f).is_some());
    // The same bytes under a new inode: checked again, then used.
    let copy = p.with_file_name(".tmp-copy");
    fs::copy(&p, &copy).unwrap();
    fs::rename(&copy, &p).unwrap();
    assert!(cache.open_file(f).is_some());
    assert_eq!(cache.checks_run(), 2);
    // Other bytes of the same length (another file's): dropped.
    fs::write(&copy, crate::test_pack::noise(f.size as usize, 12)).unwrap();
    fs::rename(&copy, &p).unwrap();
    assert!(cache.open_file(f).is_none());
    assert_eq!(cache.checks_run(), 3);
    assert!(!p.exists());
}

#[test]
fn a_truncated_or_extended_entry_is_dropped_unread() {
    for delta in [-1i64, 1] {
        let (_t, cache, manifest, p) = filled_unrecorded();
        let f = &manifest.files[0];
        assert!(cache.open_file(f).is_some(), "checked first");
        let file = fs::OpenOptions::new().write(true).open(&p).unwrap();
        file.set_len(f.size.checked_add_signed(delta).unwrap())
            .unwrap();
        assert!(cache.open_file(f).is_none(), "{delta}");
        assert!(!p.exists());
        assert_eq!(cache.checks_run(), 1, "the length alone condemns it");
    }
}

#[test]
fn concurrent_opens_of_a_damaged_entry_all_read_the_store() {
    let (_t, cache, manifest, p) = filled();
    flip(&p, 7);
    let manifest = Arc::new(manifest);
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (cache, manifest) = (cache.clone(), manifest.clone());
            std::thread::spawn(move || cache.open_file(&manifest.files[0]).is_some())
        })
        .collect();
    for o in opens {
        assert!(!o.join().unwrap(), "a damaged entry was handed out");
    }
    assert!(!p.exists());
}

#[test]
fn a_second_claim_waits_for_the_first_check_and_a_dropped_check_frees_the_entry() {
    use verify::{Checks, Claim};
    let (_t, _cache, _manifest, p) = filled();
    let stamp = Stamp::of(&fs::File::open(&p).unwrap()).unwrap();
    let checks = Arc::new(Checks::default());
    let sha = Sha256([9; 32]);
    let Claim::Mine(first) = checks.claim(&sha, &stamp) else {
        panic!("the first claim checks");
    };
    let second = {
        let checks = checks.clone();
        std::thread::spawn(move || match checks.claim(&sha, &stamp) {
            Claim::Waited => "waited",
            Claim::Known(Verdict::Good) => "good",
            _ => "checks too",
        })
    };
    first.finish(Some((stamp, Verdict::Good)));
    // Whether it came during the check or after: never the right to check while one
    // runs; then the verdict.
    assert_ne!(second.join().unwrap(), "checks too");
    assert!(matches!(
        checks.claim(&sha, &stamp),
        Claim::Known(Verdict::Good)
    ));
    // A check that ends without a verdict (a panic): the next caller checks.
    let other = Sha256([8; 32]);
    let Claim::Mine(p1) = checks.claim(&other, &stamp) else {
        panic!()
    };
    drop(p1);
    assert!(matches!(checks.claim(&other, &stamp), Claim::Mine(_)));
}

#[test]
fn background_requests_fill_once_and_skip_what_does_not_fit() {
    let (store, manifest) = one_file_store(&vec![3u8; SIZE]);
    let manifest = Arc::new(manifest);
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    for _ in 0..3 {
        cache.request(&store, manifest.clone(), 0);
    }
    cache.wait_idle();
    assert!(cache.open_file(&manifest.files[0]).is_some());
    assert_eq!(cache.fills_finished(), 1, "three requests, one fill");
    assert_eq!(cache.fills_deferred(), 0, "no read to wait for");
    let small = FileCache::open(&t.path().join("small"), 2 * SIZE as u64 - 1).unwrap();
    small.request(&store, manifest.clone(), 0);
    small.wait_idle();
    assert!(
        small.open_file(&manifest.files[0]).is_none(),
        "over half the cache"
    );
    assert_eq!(small.fills_finished(), 0);
}

#[test]
fn a_file_below_the_minimum_is_never_kept() {
    let (store, manifest) = one_file_store(&vec![5u8; MIN_FILE_BYTES as usize - 1]);
    let manifest = Arc::new(manifest);
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    let f = &manifest.files[0];
    assert!(!cache.fits(f));
    assert!(!cache.fill(&store, &manifest, f).unwrap());
    cache.request(&store, manifest.clone(), 0);
    cache.wait_idle();
    assert_eq!(cache.fills_finished(), 0);
    // An entry put there by hand (an older modelcas kept small files) is not looked up.
    let p = t.path().join(&f.sha256_hex()[..2]).join(f.sha256_hex());
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, vec![5u8; MIN_FILE_BYTES as usize - 1]).unwrap();
    assert!(cache.open_file(f).is_none());
}

/// Waits until the fill thread has either deferred a fill or finished one.
/// (Fails after a minute rather than hang.)
fn deferred_or_finished(cache: &FileCache) -> (u64, u64) {
    let started = Instant::now();
    let mut p = cache.pending.lock();
    while p.deferred == 0 && p.finished == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no fill started"
        );
        cache.wake.wait_for(&mut p, Duration::from_secs(1));
    }
    (p.deferred, p.finished)
}

/// A cache asked to fill a file of `byte`s while the mount reads (an hour's quiet
/// period and cap), once its fill thread waits; and when it was asked.
fn fill_asked_during_reads(
    byte: u8,
) -> (tempfile::TempDir, Arc<FileCache>, Arc<Manifest>, Instant) {
    let (store, manifest) = one_file_store(&vec![byte; SIZE]);
    let manifest = Arc::new(manifest);
    let t = tempfile::tempdir().unwrap();
    let cache = FileCache::open(t.path(), 1 << 30).unwrap();
    cache.set_deferral(Duration::from_secs(3600), Duration::from_secs(3600));
    cache.note_read();
    let asked = Instant::now();
    cache.request(&store, manifest.clone(), 0);
    assert_eq!(
        deferred_or_finished(&cache),
        (1, 0),
        "the fill ran during reads"
    );
    (t, cache, manifest, asked)
}

#[test]
fn a_fill_waits_until_the_mount_has_stopped_reading() {
    let (_t, cache, manifest, _) = fill_asked_during_reads(9);
    assert!(cache.open_file(&manifest.files[0]).is_none());
    // The reads have stopped long enough (the quiet period now zero): the fill runs.
    cache.set_deferral(Duration::ZERO, Duration::from_secs(3600));
    cache.wait_idle();
    assert_eq!(cache.fills_finished(), 1);
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut cache.open_file(&manifest.files[0]).unwrap(), &mut got)
        .unwrap();
    assert_eq!(got, vec![9u8; SIZE]);
}

#[test]
fn a_fill_waits_no_longer_than_its_cap() {
    // The fill thread is waiting (whatever the load of the machine)...
    let (_t, cache, manifest, asked) = fill_asked_during_reads(4);
    // ...and a cap shorter than the reads' quiet period ends its wait.
    let cap = Duration::from_millis(300);
    cache.set_deferral(Duration::from_secs(3600), cap);
    cache.wait_idle();
    assert!(asked.elapsed() >= cap, "started before its cap");
    assert_eq!((cache.fills_deferred(), cache.fills_finished()), (1, 1));
    assert!(cache.open_file(&manifest.files[0]).is_some());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
