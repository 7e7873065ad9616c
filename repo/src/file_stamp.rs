//! The stamp of a file on this node's disk ([`FileStamp`]): what `statx` says of an open
//! file (device, inode, size, mtime, ctime), bound to the boot and the unique id of the
//! mount it was opened through, so that a record of what a file held, made under its
//! stamp, is trusted only while that stamp has not moved (docs/format/node.md, "Files
//! taken unread"). Used by ingest (files taken unread) and by the node file cache (entries
//! checked by an earlier process).
//!
//! A stamp is bound to the boot and the mount it was taken in: the times a write sets can
//! live in memory only while its data is already durable, and a crash then leaves the new
//! bytes under the old times. Every crash ends the mount (a reboot, or a shutdown file
//! system mounted again), so a record of another boot or mount is never trusted. Where the
//! kernel cannot name the mount by an id it never reuses (`STATX_MNT_ID_UNIQUE`, Linux
//! 6.8) or the boot id cannot be read, no stamp is taken.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;

use format::index::FileStamp;
use parking_lot::Mutex;

/// `fcntl`'s command that sets the signal sent for a lease break (Linux, `<fcntl.h>`;
/// not in the libc crate).
const F_SETSIG: libc::c_int = 10;

/// Where the kernel gives the id of this boot, a UUID made anew at every boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// File systems known to move a file's ctime on every write, writes through a shared
/// mapping included (their first write to a clean page faults, and the fault moves the
/// times): ext4 (and ext2/3), xfs, btrfs. Elsewhere no stamp is taken: a tmpfs moves no
/// time on writes through a mapping, and network and FUSE file systems may serve cached
/// attributes.
const STAMPED_FILE_SYSTEMS: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];

/// Stamps files, asking each file system (by device) once whether it is one of
/// [`STAMPED_FILE_SYSTEMS`].
pub struct Stamper {
    /// This boot's id; `None` where it cannot be read (no stamps then).
    boot_id: Option<[u8; 16]>,
    stamped_devices: Mutex<HashMap<u64, bool>>,
}

impl Default for Stamper {
    fn default() -> Stamper {
        Stamper::new()
    }
}

impl Stamper {
    /// A stamper for this boot.
    pub fn new() -> Stamper {
        let boot_id = std::fs::read_to_string(BOOT_ID)
            .ok()
            .and_then(|t| parse_boot_id(&t));
        Stamper {
            boot_id,
            stamped_devices: Mutex::new(HashMap::new()),
        }
    }

    /// The stamp of the open file `f`, on a file system in [`STAMPED_FILE_SYSTEMS`].
    pub fn stamp_of(&self, f: &File) -> Option<FileStamp> {
        let stamp = self.stamp_again(f)?;
        let mut devices = self.stamped_devices.lock();
        let stamped = *devices
            .entry(stamp.dev)
            .or_insert_with(|| on_a_stamped_file_system(f));
        stamped.then_some(stamp)
    }

    /// The stamp of `f`, whose file system [`Stamper::stamp_of`] accepted already: its
    /// `statx`, with the unique id of the mount it was opened through, in this boot.
    pub fn stamp_again(&self, f: &File) -> Option<FileStamp> {
        let boot_id = self.boot_id?;
        // SAFETY: statx writes into the zeroed struct we own; the fd is open for `f`'s life
        // and the path is an empty C string (AT_EMPTY_PATH: the fd itself).
        let mut sx: libc::statx = unsafe { std::mem::zeroed() };
        let asked = libc::STATX_BASIC_STATS | libc::STATX_MNT_ID_UNIQUE;
        let flags = libc::AT_EMPTY_PATH | libc::AT_STATX_SYNC_AS_STAT;
        // SAFETY: as above: an fd open for `f`'s life, an empty C string, and `sx` ours.
        if unsafe { libc::statx(f.as_raw_fd(), c"".as_ptr(), flags, asked, &mut sx) } != 0 {
            return None;
        }
        let needed = libc::STATX_TYPE
            | libc::STATX_INO
            | libc::STATX_SIZE
            | libc::STATX_MTIME
            | libc::STATX_CTIME
            | libc::STATX_MNT_ID_UNIQUE;
        if sx.stx_mask & needed != needed || u32::from(sx.stx_mode) & libc::S_IFMT != libc::S_IFREG
        {
            return None;
        }
        let ns = |t: libc::statx_timestamp| {
            t.tv_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(i64::from(t.tv_nsec))
        };
        Some(FileStamp {
            boot_id,
            mount_id: sx.stx_mnt_id,
            dev: libc::makedev(sx.stx_dev_major, sx.stx_dev_minor),
            ino: sx.stx_ino,
            size: sx.stx_size,
            mtime_ns: ns(sx.stx_mtime),
            ctime_ns: ns(sx.stx_ctime),
        })
    }
}

/// The 16 bytes of a boot id as the kernel writes it (`8-4-4-4-12` hex digits and a
/// newline).
fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let digits: String = text.trim().chars().filter(|c| *c != '-').collect();
    let mut id = [0u8; 16];
    hex::decode_to_slice(digits, &mut id).ok()?;
    (id != [0; 16]).then_some(id)
}

fn on_a_stamped_file_system(f: &File) -> bool {
    // SAFETY: fstatfs writes into the zeroed struct we own; the fd is open for `f`'s life.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for `f`'s life and `fs` is ours, outliving the call.
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut fs) } != 0 {
        return false;
    }
    #[allow(
        trivial_numeric_casts,
        clippy::unnecessary_cast,
        reason = "f_type's type differs between targets (i64 here, u32 or i32 elsewhere)"
    )]
    let kind = fs.f_type as i64;
    STAMPED_FILE_SYSTEMS.contains(&kind)
}

/// Whether a record of what `f` holds may be made under its stamp: its dirty pages are
/// written back and no process has it open for writing ([`open_for_writing`]). A page
/// written through a shared mapping takes further writes without a fault, so without moving
/// the file's times, until writeback cleans it; a writer that opens the file after this
/// moves the times with its first write. False where either cannot be done or told.
pub fn no_writers(f: &File) -> bool {
    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a system call on an fd open for `f`'s life; no memory is passed.
    if unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, how) } != 0 {
        return false;
    }
    open_for_writing(f) == Some(false)
}

/// Whether any process has the file of `f` (open read-only here) open for writing, a
/// writable shared mapping included: asked of the kernel by taking a read lease, which it
/// refuses (`EAGAIN`) exactly then, and giving it back at once. `None` where it cannot
/// tell: leases off (`fs.leases-enable = 0`), a file this user does not own without
/// `CAP_LEASE`, or a file system without leases; no stamp is recorded then.
///
/// While the lease is held (two system calls), a writer's `open` waits for it to be given
/// back; the kernel tells the lease holder with a signal, `SIGIO` by default, whose default
/// action ends the process. The descriptor's lease signal is therefore set to `SIGURG`
/// first, which is ignored unless a process asks for it.
pub fn open_for_writing(f: &File) -> Option<bool> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd open for `f`'s life, with integer arguments only.
    if unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) } != 0 {
        return None;
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0 {
        // SAFETY: as above; gives back the lease just taken.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_boot_id_is_read_as_the_kernel_writes_it() {
        let id = parse_boot_id("7be9a0bc-cd8b-420f-86b5-da4775441715\n").unwrap();
        assert_eq!(id[..3], [0x7b, 0xe9, 0xa0]);
        assert_eq!(id[15], 0x15);
        for bad in [
            "",
            "7be9a0bc-cd8b-420f-86b5-da47754417",
            "x".repeat(36).as_str(),
        ] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
        assert_eq!(parse_boot_id(&"0".repeat(32)), None);
    }

    /// The stamp of an open file names this boot and the file's mount, the same for two
    /// files of one directory, and moves with a write of the same size whose mtime is put
    /// back (the ctime tells).
    #[test]
    fn the_stamp_of_a_real_file_names_its_boot_and_mount_and_moves_with_a_write() {
        let stamper = Stamper::new();
        let boot = std::fs::read_to_string(BOOT_ID).unwrap();
        assert_eq!(stamper.boot_id, parse_boot_id(&boot));
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("f"), dir.path().join("g"));
        std::fs::write(&p, b"abc").unwrap();
        std::fs::write(&q, b"def").unwrap();
        let f = File::open(&p).unwrap();
        let a = stamper
            .stamp_again(&f)
            .expect("a kernel with STATX_MNT_ID_UNIQUE (Linux 6.8+)");
        let b = stamper.stamp_again(&File::open(&q).unwrap()).unwrap();
        assert_eq!(
            (a.boot_id, a.mount_id, a.dev),
            (b.boot_id, b.mount_id, b.dev)
        );
        assert_ne!(a.ino, b.ino);
        assert_eq!(a, stamper.stamp_again(&f).unwrap());
        assert_eq!(a.size, 3);
        // Wait for the file system's clock to move (it may tick coarsely), then write the
        // same number of bytes and put the mtime back: the ctime still tells.
        let probe = dir.path().join("probe");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            std::fs::write(&probe, b"x").unwrap();
            let probed = stamper.stamp_again(&File::open(&probe).unwrap()).unwrap();
            if probed.ctime_ns > a.ctime_ns {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the clock never moved"
            );
            std::thread::yield_now();
        }
        let w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        std::io::Write::write_all(&mut &w, b"xyz").unwrap();
        let old = std::time::UNIX_EPOCH + Duration::from_nanos(a.mtime_ns as u64);
        w.set_modified(old).unwrap();
        let after = stamper.stamp_again(&f).unwrap();
        assert_eq!(
            (after.ino, after.size, after.mtime_ns, after.mount_id),
            (a.ino, a.size, a.mtime_ns, a.mount_id)
        );
        assert_ne!(after.ctime_ns, a.ctime_ns, "ctime moved");
        // Not a regular file: no stamp.
        assert_eq!(stamper.stamp_again(&File::open(dir.path()).unwrap()), None);
    }

    /// The lease asks the kernel whether anyone has the file open for writing: a writer's
    /// descriptor, or a shared writable mapping outliving its descriptor.
    #[test]
    fn open_for_writing_sees_writers_and_mappings() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let reader = File::open(&p).unwrap();
        assert_eq!(open_for_writing(&reader), Some(false));
        let writer = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert_eq!(open_for_writing(&reader), Some(true));
        drop(writer);
        assert_eq!(open_for_writing(&reader), Some(false));
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        // SAFETY: a new shared mapping of an open fd, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                rw.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        drop(rw);
        assert_eq!(
            open_for_writing(&reader),
            Some(true),
            "a mapping outlives its fd"
        );
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(at, 8192) };
        assert_eq!(open_for_writing(&reader), Some(false));
    }
}
