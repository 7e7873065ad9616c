#!/usr/bin/env python3
"""A power cut of an ext4 file system on a loop device (root only), for reliability runs.

`power_cut(path)` shuts the ext4 file system holding `path` down with EXT4_IOC_SHUTDOWN and
EXT4_GOING_FLAGS_NOLOGFLUSH: every I/O on it fails from then on, and nothing still in
memory (dirty pages, inode changes the journal has not committed) reaches the disk, as if
the power had gone. Unmounting and mounting it again is the reboot: the file system comes
back with what the disk held, its journal replayed. Unlike SIGKILL, which keeps the page
cache, this tests every fsync, fdatasync and rename a writer relies on.

    with LoopExt4(size_mib=256) as fs:       # mkfs.ext4, losetup, mount (commit=300)
        ...write under fs.root...
        fs.power_cut()                       # processes still writing there now get EIO
        fs.remount()                         # umount, mount: the state after the reboot
        ...check under fs.root...

The file system is mounted with commit=300 (the journal commits every 5 minutes instead of
5 seconds) so that what was not made durable stays so until the cut: a test's outcome does
not depend on where a periodic commit fell. Kill the processes using the file system (or
let them fail on EIO) before `remount`: umount refuses a busy file system.

Command line (the same, for shell scripts):

    powercut.py make IMAGE SIZE_MIB MOUNTPOINT   # prints the loop device
    powercut.py cut MOUNTPOINT
    powercut.py remount DEVICE MOUNTPOINT
    powercut.py destroy DEVICE MOUNTPOINT        # umount (if mounted), losetup -d
"""
import fcntl
import os
import struct
import subprocess
import sys
import tempfile

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
MOUNT_OPTIONS = "commit=300"


def power_cut(path):
    """Shuts down, without flushing its journal, the ext4 file system holding `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def make(image, size_mib, mountpoint):
    """Makes an ext4 image of `size_mib` MiB, attaches it to a free loop device and mounts
    it on `mountpoint`; returns the device."""
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
    dev = subprocess.run(["losetup", "-f", "--show", image], check=True,
                         capture_output=True, text=True).stdout.strip()
    os.makedirs(mountpoint, exist_ok=True)
    mount(dev, mountpoint)
    return dev


def mount(dev, mountpoint):
    subprocess.run(["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, dev, mountpoint], check=True)


def remount(dev, mountpoint):
    """The reboot after a power cut: unmount, mount again from the device."""
    subprocess.run(["umount", mountpoint], check=True)
    mount(dev, mountpoint)


def destroy(dev, mountpoint):
    """Unmounts (if mounted) and detaches the loop device."""
    if os.path.ismount(mountpoint):
        subprocess.run(["umount", mountpoint], check=True)
    subprocess.run(["losetup", "-d", dev], check=True)


class LoopExt4:
    """An ext4 file system on a loop device in a scratch directory (under `parent`), mounted
    at `.root`; unmounted, detached and deleted on exit."""

    def __init__(self, size_mib=256, parent=None):
        if os.geteuid() != 0:
            raise SystemExit("powercut: needs root (loop devices, mount, EXT4_IOC_SHUTDOWN)")
        self.scratch = tempfile.TemporaryDirectory(prefix="powercut-", dir=parent)
        self.image = os.path.join(self.scratch.name, "image")
        self.root = os.path.join(self.scratch.name, "mnt")
        self.dev = make(self.image, size_mib, self.root)

    def sync(self):
        """Makes everything written so far durable (syncfs)."""
        subprocess.run(["sync", "-f", self.root], check=True)

    def power_cut(self):
        power_cut(self.root)

    def remount(self):
        remount(self.dev, self.root)

    def close(self):
        if self.dev:
            destroy(self.dev, self.root)
            self.dev = None
        self.scratch.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main(argv):
    cmds = {
        "make": (3, lambda a: print(make(a[0], int(a[1]), a[2]))),
        "cut": (1, lambda a: power_cut(a[0])),
        "remount": (2, lambda a: remount(a[0], a[1])),
        "destroy": (2, lambda a: destroy(a[0], a[1])),
    }
    if len(argv) < 1 or argv[0] not in cmds or len(argv) - 1 != cmds[argv[0]][0]:
        sys.exit("usage:\n" + __doc__.split("shell scripts):\n")[1])
    cmds[argv[0]][1](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
