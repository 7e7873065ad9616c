//! A small ext4 file system on a loop device, and a power cut of it (root only).
//!
//! [`LoopExt4::power_cut`] shuts the file system down with `EXT4_IOC_SHUTDOWN` and
//! `EXT4_GOING_FLAGS_NOLOGFLUSH`: from then on every I/O on it fails, and nothing still in
//! memory (dirty pages, inode changes not yet committed to the journal) reaches the disk,
//! as if the power had gone. [`LoopExt4::unmount`] and [`LoopExt4::mount`] then bring the
//! file system back as a reboot would: with what the disk held, replayed from its journal.
//! The file system is mounted with `commit=300`: the journal commits every 5 minutes
//! instead of 5 seconds, so what a test left uncommitted stays so until its power cut
//! (a commit in between would make the test's outcome a matter of timing).
//!
//! The same, for scripts: `bench/powercut.py` (a module and a command line).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `EXT4_IOC_SHUTDOWN`: `_IOR('X', 125, __u32)`.
const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587D;
/// Shut down without flushing the journal: what was not committed is lost.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// An ext4 file system in an image file, attached to a loop device and mounted; unmounted,
/// detached and deleted when dropped.
pub struct LoopExt4 {
    scratch: tempfile::TempDir,
    device: Option<String>,
    mounted: bool,
}

impl LoopExt4 {
    /// A new, empty file system of `size_mib` MiB, mounted. Panics, saying why, when not
    /// run as root.
    pub fn new(size_mib: u64) -> LoopExt4 {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "this test needs root (loop devices, mount, EXT4_IOC_SHUTDOWN); it runs as root in CI"
        );
        let scratch = tempfile::Builder::new()
            .prefix("loop-ext4-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let image = scratch.path().join("image");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(size_mib << 20)
            .unwrap();
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        std::fs::create_dir(scratch.path().join("mnt")).unwrap();
        let mut fs = LoopExt4 {
            scratch,
            device: None,
            mounted: false,
        };
        fs.attach();
        fs.mount();
        fs
    }

    /// Where the file system is mounted.
    pub fn root(&self) -> PathBuf {
        self.scratch.path().join("mnt")
    }

    /// The loop device holding the image.
    pub fn device(&self) -> &str {
        self.device.as_deref().expect("attached")
    }

    /// Makes everything written so far durable (`syncfs`).
    pub fn sync(&self) {
        let dir = std::fs::File::open(self.root()).unwrap();
        // SAFETY: syncfs takes an fd open for `dir`'s life and touches no memory of ours.
        assert_eq!(unsafe { libc::syncfs(dir.as_raw_fd()) }, 0, "syncfs");
    }

    /// Cuts the power of the file system: shuts it down without flushing its journal.
    /// Every I/O on it fails from now on; unmount and mount it again to go on.
    pub fn power_cut(&self) {
        power_cut(&self.root());
    }

    /// Unmounts the file system (after a power cut too).
    pub fn unmount(&mut self) {
        if self.mounted {
            run("umount", &[self.root().to_str().unwrap()]);
            self.mounted = false;
        }
    }

    /// Mounts the file system (again), from its loop device.
    pub fn mount(&mut self) {
        assert!(!self.mounted);
        let root = self.root();
        run(
            "mount",
            &[
                "-t",
                "ext4",
                "-o",
                "commit=300",
                self.device(),
                root.to_str().unwrap(),
            ],
        );
        self.mounted = true;
    }

    /// Moves the (unmounted) image to another loop device: the next mount has another
    /// device number.
    pub fn move_to_another_device(&mut self) {
        assert!(!self.mounted);
        let old = self.device.take().expect("attached");
        self.attach(); // while `old` is attached: another device
        run("losetup", &["-d", &old]);
    }

    fn attach(&mut self) {
        let image = self.scratch.path().join("image");
        let out = Command::new("losetup")
            .args(["-f", "--show", image.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.device = Some(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount")
                .args(["-l", self.root().to_str().unwrap()])
                .status();
        }
        if let Some(dev) = &self.device {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// Shuts down the ext4 file system holding `path` without flushing its journal (see the
/// module's doc).
pub fn power_cut(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
    // SAFETY: the ioctl reads one u32 through the pointer, which outlives the call; the fd
    // is open for `f`'s life.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), EXT4_IOC_SHUTDOWN as _, &flags) };
    assert_eq!(
        rc,
        0,
        "EXT4_IOC_SHUTDOWN on {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
