//! Ingest of files the index knows unchanged since an earlier ingest read them: taken from
//! the index unread (same device, inode, size, mtime and ctime, in the same boot and mount,
//! every chunk still stored), read again as soon as anything about them moved or the file
//! system was mounted again (a power cut included: `common::loopfs`), and never when
//! `--reread` says so.
//! Each test ingests through the real binary into a real store and index.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::gc::{gc, resume};
use common::*;
use serde_json::Value;

/// A snapshot directory: a file of several chunks, a small one and an empty one. It lies
/// in the build directory, on the disk: files are taken unread only from file systems
/// that move a file's ctime on every write (ext4, xfs, btrfs), and the system's temporary
/// directory may be a tmpfs.
fn snapshot() -> tempfile::TempDir {
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let kind = fs_type(parent);
    assert!(
        [0xEF53, 0x5846_5342, 0x9123_683E].contains(&kind),
        "{} is on a file system (f_type {kind:#x}) where ingest takes no stamps; these tests \
         need ext4, xfs or btrfs: put CARGO_TARGET_DIR on one",
        parent.display()
    );
    assert!(
        names_mounts_uniquely(parent),
        "statx gives no STATX_MNT_ID_UNIQUE here (Linux 6.8 and later do): ingest takes no \
         stamps on this kernel, and these tests need them"
    );
    snapshot_in(parent)
}

/// Whether `statx` names the mount of `p` by an id never reused (`STATX_MNT_ID_UNIQUE`),
/// without which ingest takes no stamp.
fn names_mounts_uniquely(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statx is plain old data, for which all zero bytes are valid.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `sx` ours, both outliving the call.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            0,
            libc::STATX_MNT_ID_UNIQUE,
            &mut sx,
        )
    };
    rc == 0 && sx.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0
}

fn snapshot_in(parent: &Path) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("unchanged-")
        .tempdir_in(parent)
        .unwrap();
    fill(dir.path());
    dir
}

/// Writes the snapshot's three files into `dir`.
fn fill(dir: &Path) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let big: Vec<u8> = (0..600_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(dir.join("model.safetensors"), big).unwrap();
    std::fs::write(dir.join("config.json"), b"{\"hidden_size\": 64}").unwrap();
    std::fs::write(dir.join("empty.txt"), b"").unwrap();
}

/// `ingest DIR --repo o/m --ref REF --json`, with files recorded once still for `settle_ms`.
fn ingest(env: &Env, dir: &Path, r: &str, settle_ms: u64, extra: &[&str]) -> Value {
    let out = env
        .cmd()
        .env("MODELCAS_TEST_SETTLE_MS", settle_ms.to_string())
        .args([
            "ingest",
            dir.to_str().unwrap(),
            "--repo",
            "o/m",
            "--ref",
            r,
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// [`ingest`], asserting that `unread` of its files were taken from the index unread.
fn ingest_taking(
    env: &Env,
    dir: &Path,
    r: &str,
    settle_ms: u64,
    extra: &[&str],
    unread: u64,
) -> Value {
    let report = ingest(env, dir, r, settle_ms, extra);
    assert_eq!(report["files_unchanged"], unread, "{report:#}");
    report
}

fn commit(report: &Value) -> String {
    report["snapshots"][0]["commit"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Checks out `o/m@r` and returns its files' hashes.
fn checked_out(env: &Env, r: &str) -> Vec<(String, String)> {
    let out = env.path(&format!("co-{r}"));
    env.ok(&["checkout", &format!("o/m@{r}"), out.to_str().unwrap()]);
    tree_hashes(&out)
}

/// Waits until the file system's clock has passed the ctime of `file` (it may tick
/// coarsely): a write after this gives it another ctime.
fn until_the_clock_passes(file: &Path) {
    use std::os::unix::fs::MetadataExt;
    let ctime = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let probe = file.with_extension("probe");
    let before = ctime(file);
    wait_until(
        "the file system's clock to pass a file's ctime",
        Duration::from_secs(60),
        || {
            std::fs::write(&probe, b"x").unwrap();
            (ctime(&probe) > before).then_some(())
        },
    );
    std::fs::remove_file(probe).unwrap();
}

#[test]
fn a_second_ingest_takes_unchanged_files_from_the_index_unread() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest_taking(&env, dir, "a", 0, &[], 0);
    let second = ingest(&env, dir, "b", 0, &[]);
    assert_eq!(second["files_read"], 3, "{second:#}");
    assert_eq!(second["files_unchanged"], 3, "{second:#}");
    assert_eq!(second["bytes_unchanged"], 600_000 + 19, "{second:#}");
    assert_eq!(second["chunks"], first["chunks"], "{second:#}");
    assert_eq!(second["pack_bytes_written"], 0);
    assert_eq!(commit(&second), commit(&first));
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
    env.verifies("o/m@b");
    // The same files under another repository: a new manifest, still nothing read.
    let out = env
        .cmd()
        .env("MODELCAS_TEST_SETTLE_MS", "0")
        .args([
            "ingest",
            dir.to_str().unwrap(),
            "--repo",
            "o/other",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(other["files_unchanged"], 3, "{other:#}");
    assert_eq!(other["snapshots"][0]["new"], true);
    env.verifies(&format!("o/other@{}", commit(&other)));
    // --reread reads them all, and finds the same content.
    let reread = ingest_taking(&env, dir, "c", 0, &["--reread"], 0);
    assert_eq!(commit(&reread), commit(&first));
}

#[test]
fn a_file_written_since_its_last_read_is_read_again() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest(&env, dir, "a", 0, &[]);
    // Same size, new bytes, the old mtime put back: only the ctime tells.
    let f = dir.join("config.json");
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    until_the_clock_passes(&f);
    std::fs::write(&f, b"{\"hidden_size\": 65}").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().modified().unwrap(), mtime);
    let second = ingest_taking(&env, dir, "b", 0, &[], 2);
    assert_ne!(commit(&second), commit(&first));
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
    // A file replaced by another (a new inode) is read too.
    let m = dir.join("model.safetensors");
    let bytes = std::fs::read(&m).unwrap();
    std::fs::remove_file(&m).unwrap();
    std::fs::write(&m, &bytes).unwrap();
    let third = ingest_taking(&env, dir, "c", 0, &[], 2);
    assert_eq!(commit(&third), commit(&second));
}

#[test]
fn a_file_not_still_long_enough_before_its_read_is_not_recorded() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    // An hour of stillness asked: the files just written never qualify.
    for r in ["a", "b"] {
        ingest_taking(&env, dir, r, 3_600_000, &[], 0);
    }
    // Nor are they taken unread later from the reads that did not record them.
    ingest_taking(&env, dir, "c", 0, &[], 0);
    ingest_taking(&env, dir, "d", 0, &[], 3);
}

#[test]
fn a_file_whose_chunks_gc_condemned_or_deleted_is_read_again() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest(&env, dir, "a", 0, &[]);
    env.ok(&["rm", &format!("o/m@{}", commit(&first)), "--force"]);
    let g = gc(&env, &["--keep-last", "0"]);
    assert!(g["packs_condemned"].as_u64().unwrap() > 0, "{g:#}");
    // Condemned, not yet deleted: the index forgets those packs when it syncs, so only
    // the empty file (no chunks) is taken unread.
    let b = ingest_taking(&env, dir, "b", 0, &[], 1);
    assert!(b["pack_bytes_written"].as_u64().unwrap() > 0, "{b:#}");
    // The condemned packs go, or, where the ingest wrote the same frames into the same
    // lanes (a pack is named by its bytes), are rescued as the new revision's own.
    let g = gc(&env, &["--keep-last", "0"]);
    let gone = g["packs_deleted"].as_u64().unwrap() + g["packs_rescued"].as_u64().unwrap();
    assert!(gone > 0, "{g:#}\n{b:#}");
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
    fsck_clean(&env, true);
    // Deleted: the same.
    env.ok(&["rm", &format!("o/m@{}", commit(&b)), "--force"]);
    gc(&env, &["--keep-last", "0"]);
    let g = gc(&env, &["--keep-last", "0"]);
    assert!(g["packs_deleted"].as_u64().unwrap() > 0, "{g:#}");
    let c = ingest_taking(&env, dir, "c", 0, &[], 1);
    assert!(c["pack_bytes_written"].as_u64().unwrap() > 0, "{c:#}");
    assert_eq!(checked_out(&env, "c"), tree_hashes(dir));
    fsck_clean(&env, true);
}

/// gc condemns the packs of a removed revision while an ingest of the same files, past
/// its index sync, is paused: the ingest takes the files unread from what the index knew
/// when it synced, and gc must not delete those packs under its lease.
#[test]
fn gc_beside_an_ingest_of_unchanged_files_loses_nothing() {
    let env = Env::new();
    let pause = env.path("pause");
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest(&env, dir, "a", 0, &[]);
    env.ok(&["rm", &format!("o/m@{}", commit(&first)), "--force"]);
    let point = "ingest-after-sync";
    let args = [
        "ingest",
        dir.to_str().unwrap(),
        "--repo",
        "o/m",
        "--ref",
        "b",
        "--json",
    ];
    let child = spawn_paused(
        env.cmd().env("MODELCAS_TEST_SETTLE_MS", "0").args(args),
        point,
        &pause,
    );
    let g1 = gc(&env, &["--keep-last", "0"]);
    assert!(g1["packs_condemned"].as_u64().unwrap() > 0, "{g1:#}");
    let g2 = gc(&env, &["--keep-last", "0"]);
    assert_eq!(
        g2["packs_deleted"], 0,
        "deleted under a live ingest lease: {g2:#}"
    );
    let out = resume(child, point, &pause);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["files_unchanged"], 3,
        "the files were read: {report:#}"
    );
    for _ in 0..3 {
        gc(&env, &["--keep-last", "0"]);
    }
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
    env.verifies("o/m@b");
    fsck_clean(&env, true);
}

/// A page written through a shared mapping takes further writes without a fault, so
/// without moving the file's times, until it is written back. A writer that keeps such a
/// mapping open across an ingest and writes again after it: the next ingest reads the file
/// again. (Before ingest wrote a file's dirty pages back before taking its stamp, the
/// second ingest took the file unread and stored the bytes of the first.)
#[test]
fn a_file_written_through_a_shared_mapping_after_its_read_is_read_again() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let f = dir.join("model.safetensors");
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let map = Mapping::new(&file, len);
    map.write(0, b'A');
    until_the_clock_passes(&f);
    let first = ingest(&env, dir, "a", 0, &[]);
    assert_eq!(checked_out(&env, "a"), tree_hashes(dir));
    // The page written before the ingest, again (a page never written through the
    // mapping before would fault and move the times anyway).
    map.write(1, b'B');
    let second = ingest_taking(&env, dir, "b", 0, &[], 2);
    assert_ne!(commit(&second), commit(&first));
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
}

/// A tmpfs moves no time on writes through a shared mapping at all: its files are read
/// every time.
#[test]
fn files_on_a_tmpfs_are_always_read() {
    let shm = Path::new("/dev/shm");
    assert_eq!(
        fs_type(shm),
        0x0102_1994,
        "/dev/shm is not a tmpfs on this machine: this test needs one"
    );
    let env = Env::new();
    let snap = snapshot_in(shm);
    let dir = snap.path();
    for r in ["a", "b"] {
        ingest_taking(&env, dir, r, 0, &[], 0);
    }
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
}

/// The mtime and ctime of `p`, to the nanosecond.
fn times(p: &Path) -> (i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
}

/// Overwrites `len` bytes of `f` at `offset` in place (the file keeps its size and inode)
/// with bytes it does not hold there, and makes them durable with `fdatasync`.
fn overwrite_in_place(f: &Path, offset: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(f)
        .unwrap();
    let mut old = vec![0; len];
    file.read_exact_at(&mut old, offset).unwrap();
    let new: Vec<u8> = old.iter().map(|b| !b).collect();
    file.write_all_at(&new, offset).unwrap();
    file.sync_data().unwrap();
}

/// A file overwritten in place and `fdatasync`ed has its new bytes on the disk, but its new
/// mtime and ctime only in memory (ext4 commits timestamps with its journal, and
/// `fdatasync` commits nothing a read does not need). A power cut then leaves the new bytes
/// under the old times, the very stamp the index recorded when it read the old bytes.
/// The ingest after the reboot must read the file. (Before stamps were bound to the boot
/// and the mount, it took the file unread and published the old content.)
#[test]
fn a_power_cut_after_an_overwrite_in_place_leaves_no_stamp_to_trust() {
    let env = Env::new();
    let mut fs = loopfs::LoopExt4::new(64);
    let dir = fs.root().join("snap");
    std::fs::create_dir(&dir).unwrap();
    fill(&dir);
    fs.sync();
    ingest_taking(&env, &dir, "a", 0, &[], 0);
    // Stamps are taken on this file system (else this test would prove nothing).
    ingest_taking(&env, &dir, "b", 0, &[], 3);
    let f = dir.join("model.safetensors");
    let old_times = times(&f);
    until_the_clock_passes(&f);
    overwrite_in_place(&f, 100_000, 4096);
    assert_ne!(times(&f), old_times, "the write moved the times in memory");
    let written = tree_hashes(&dir);
    fs.power_cut();
    fs.unmount();
    fs.mount();
    // What the reboot finds: the new bytes under the old stamp.
    assert_eq!(tree_hashes(&dir), written, "the new bytes were durable");
    assert_eq!(times(&f), old_times, "the new times were not");
    let after = ingest(&env, &dir, "c", 0, &[]);
    assert_eq!(checked_out(&env, "c"), written, "{after:#}");
    assert_eq!(after["files_unchanged"], 0, "{after:#}");
    env.verifies("o/m@c");
}

/// A file system unmounted cleanly and mounted again, or mounted from another device: its
/// files are read once again (a record is bound to the mount it was taken on), then taken
/// unread again.
#[test]
fn files_on_a_file_system_mounted_again_or_from_another_device_are_read_again() {
    let env = Env::new();
    let mut fs = loopfs::LoopExt4::new(64);
    let dir = fs.root().join("snap");
    std::fs::create_dir(&dir).unwrap();
    fill(&dir);
    ingest_taking(&env, &dir, "a", 0, &[], 0);
    ingest_taking(&env, &dir, "b", 0, &[], 3);
    fs.unmount();
    fs.mount();
    ingest_taking(&env, &dir, "c", 0, &[], 0);
    ingest_taking(&env, &dir, "d", 0, &[], 3);
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(&dir).unwrap().dev();
    fs.unmount();
    fs.move_to_another_device();
    fs.mount();
    assert_ne!(std::fs::metadata(&dir).unwrap().dev(), dev);
    ingest_taking(&env, &dir, "e", 0, &[], 0);
    ingest_taking(&env, &dir, "f", 0, &[], 3);
    assert_eq!(checked_out(&env, "f"), tree_hashes(&dir));
}

/// `touch -r` puts a file's mtime (and atime) back to another file's; its ctime still moves.
#[test]
fn a_file_whose_mtime_touch_r_put_back_is_read_again() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest(&env, dir, "a", 0, &[]);
    let f = dir.join("config.json");
    let saved = snap.path().with_extension("times");
    let touch = |args: &[&Path]| {
        let st = std::process::Command::new("touch")
            .arg("-r")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success());
    };
    let before = times(&f);
    touch(&[&f, &saved]);
    until_the_clock_passes(&f);
    std::fs::write(&f, b"{\"hidden_size\": 99}").unwrap();
    touch(&[&saved, &f]);
    std::fs::remove_file(&saved).unwrap();
    let after = times(&f);
    assert_eq!(
        (after.0, after.1),
        (before.0, before.1),
        "the mtime put back"
    );
    let second = ingest_taking(&env, dir, "b", 0, &[], 2);
    assert_ne!(commit(&second), commit(&first));
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
}

/// A file renamed over the source (same size, the old mtime given to it first): another
/// inode, read again.
#[test]
fn a_file_renamed_over_the_source_is_read_again() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let first = ingest(&env, dir, "a", 0, &[]);
    let f = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[300_000] ^= 0xFF;
    let tmp = snap.path().with_extension("new");
    std::fs::write(&tmp, &bytes).unwrap();
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    let second = ingest_taking(&env, dir, "b", 0, &[], 2);
    assert_ne!(commit(&second), commit(&first));
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
}

/// Two names of one inode in the snapshot, and a third outside it: both names are taken
/// unread while the inode is unchanged, and both are read again after a write through the
/// third (same size, mtime put back).
#[test]
fn hard_links_share_a_stamp_and_a_write_through_any_of_them_is_seen() {
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let f = dir.join("model.safetensors");
    std::fs::hard_link(&f, dir.join("link.safetensors")).unwrap();
    let outside = snap.path().with_extension("outside");
    std::fs::hard_link(&f, &outside).unwrap();
    ingest_taking(&env, dir, "a", 0, &[], 0);
    ingest_taking(&env, dir, "b", 0, &[], 4);
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    until_the_clock_passes(&f);
    overwrite_in_place(&outside, 0, 10);
    std::fs::File::options()
        .write(true)
        .open(&outside)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    ingest_taking(&env, dir, "c", 0, &[], 2);
    std::fs::remove_file(&outside).unwrap();
    let c = checked_out(&env, "c");
    assert_eq!(c, tree_hashes(dir));
    assert_eq!(c[2].0, "link.safetensors");
    assert_eq!(c[2].1, c[3].1, "both names have the new content");
    assert_ne!(c, checked_out(&env, "b"));
}

#[allow(
    trivial_numeric_casts,
    clippy::unnecessary_cast,
    reason = "f_type's type differs between targets (i64 here, u32 or i32 elsewhere)"
)]
fn fs_type(p: &Path) -> i64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statfs is plain old data, for which all zero bytes are valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` ours, both outliving the call.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    st.f_type as i64
}

/// A shared, writable mapping of a file.
struct Mapping {
    at: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(file: &std::fs::File, len: usize) -> Mapping {
        use std::os::fd::AsRawFd;
        // SAFETY: a new mapping of an open fd; the kernel checks the arguments, failure is
        // asserted below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        Mapping {
            at: at as *mut u8,
            len,
        }
    }

    fn write(&self, offset: usize, byte: u8) {
        assert!(offset < self.len);
        // SAFETY: `offset < len` (asserted), inside the live shared writable mapping.
        unsafe { std::ptr::write_volatile(self.at.add(offset), byte) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `at` and `len` are the mapping `new` made, unmapped once, here.
        unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
    }
}

/// Issue 36 point 2: one `write(2)` sets the file's times when it starts and copies its
/// bytes afterwards. An ingest that reads the file while such a write is still copying (a
/// throttled writeback, a slow source) sees part old, part new content under times that
/// stay as they are when the write ends; it must not record that stamp, or the next ingest
/// takes the mixed content unread. The write is held in the middle of its copy, with no
/// sleep: its source buffer's second half is a userfaultfd range whose pages are handed
/// over only after the first ingest. (Before, the second ingest took the file unread and
/// its checkout differed from the file.)
#[test]
fn regression_a_file_read_during_one_long_write_is_read_again() {
    use std::os::unix::fs::FileExt;
    let env = Env::new();
    let snap = snapshot();
    let dir = snap.path();
    let path = dir.join("model.safetensors");
    let new: Vec<u8> = std::fs::read(&path).unwrap().iter().map(|b| !b).collect();
    let stall = uffd::Stalled::new(&new);
    let src = stall.buffer();
    let (target, n) = (path.clone(), new.len());
    let writer = std::thread::spawn(move || {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(target)
            .unwrap();
        // SAFETY: the buffer lives until `release` has run and this thread is joined.
        let buf = unsafe { std::slice::from_raw_parts(src.0 as *const u8, n) };
        f.write_at(buf, 0).unwrap()
    });
    stall.wait_for_the_fault();
    until_the_clock_passes(&path);
    ingest(&env, dir, "a", 0, &[]);
    stall.release(&new);
    assert_eq!(writer.join().unwrap(), new.len(), "one write(2)");
    assert_eq!(std::fs::read(&path).unwrap(), new);
    ingest(&env, dir, "b", 0, &[]);
    assert_eq!(checked_out(&env, "b"), tree_hashes(dir));
}

/// Just enough userfaultfd (Linux; root, or `vm.unprivileged_userfaultfd`) to hold a
/// `write(2)` in the middle of copying its buffer: the buffer's second half has no pages
/// until [`uffd::Stalled::release`] copies them in.
mod uffd {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
    const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
    const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;
    const EVENT_PAGEFAULT: u8 = 0x12;

    /// The buffer's address as a plain number, to move into the writer thread.
    #[derive(Clone, Copy)]
    pub struct Buffer(pub usize);

    pub struct Stalled {
        fd: OwnedFd,
        at: usize,
        len: usize,
        /// Where the pages withheld start, and how many bytes.
        held: (usize, usize),
    }

    impl Stalled {
        /// A mapping holding `data`'s first half; the rest faults until released.
        pub fn new(data: &[u8]) -> Stalled {
            let page = 4096;
            let len = data.len().div_ceil(page) * page;
            // SAFETY: a new anonymous private mapping; checked below.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            let at = at as usize;
            let half = (len / 2) / page * page;
            // SAFETY: `half <= data.len()` bytes into the new mapping of `len >= half`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at as *mut u8, half) };
            // SAFETY: the userfaultfd system call with flags only.
            let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
            assert!(
                raw >= 0,
                "userfaultfd: {} (these tests run as root, or with vm.unprivileged_userfaultfd=1)",
                std::io::Error::last_os_error()
            );
            // SAFETY: a new descriptor the call returned, owned here alone.
            let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
            let mut api = [0xAAu64, 0, 0];
            ioctl(&fd, UFFDIO_API, api.as_mut_ptr().cast());
            let mut reg = [(at + half) as u64, (len - half) as u64, 1, 0];
            ioctl(&fd, UFFDIO_REGISTER, reg.as_mut_ptr().cast());
            Stalled {
                fd,
                at,
                len,
                held: (at + half, len - half),
            }
        }

        pub fn buffer(&self) -> Buffer {
            Buffer(self.at)
        }

        /// Blocks until something touched the withheld pages.
        pub fn wait_for_the_fault(&self) {
            let mut msg = [0u8; 32];
            // SAFETY: reads one message into `msg`, ours and 32 bytes long.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), msg.as_mut_ptr().cast(), 32) };
            assert_eq!(n, 32, "{}", std::io::Error::last_os_error());
            assert_eq!(msg[0], EVENT_PAGEFAULT);
        }

        /// Copies `data`'s withheld part into place, waking whoever waits on it.
        pub fn release(&self, data: &[u8]) {
            let (dst, len) = self.held;
            let mut src = vec![0u8; len];
            let from = dst - self.at;
            let n = data.len().saturating_sub(from).min(len);
            src[..n].copy_from_slice(&data[from..from + n]);
            let mut copy = [dst as u64, src.as_ptr() as u64, len as u64, 0, 0];
            ioctl(&self.fd, UFFDIO_COPY, copy.as_mut_ptr().cast());
        }
    }

    fn ioctl(fd: &OwnedFd, req: libc::c_ulong, arg: *mut libc::c_void) {
        // SAFETY: `arg` points at the struct `req` names, ours for the call.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) };
        assert_eq!(rc, 0, "ioctl {req:#x}: {}", std::io::Error::last_os_error());
    }

    impl Drop for Stalled {
        fn drop(&mut self) {
            // SAFETY: the mapping `new` made, unmapped once, here.
            unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
        }
    }
}
