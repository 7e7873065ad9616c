//! What one FUSE server of a mount leaves for the next: the state file of a connection.
//!
//! A mount's `/dev/fuse` descriptor is kept open by a holder process (`modelcas mountd`, or
//! `modelcas mount` itself) that never serves; the server that answers the kernel may die
//! or be replaced at any moment, and its successor serves the same connection
//! (`fuser::Session::resume`). For the kernel nothing changed, so the successor must answer
//! the node ids and file handles the kernel already holds exactly as before. This module
//! owns the small memory file (a memfd, kept by the holder beside the descriptor) that
//! makes that possible, written by each server *before* the reply that depends on it:
//!
//! * the header: whether the connection is initialised and what its FUSE_INIT negotiated
//!   (protocol version, passthrough, resend), the mount time, and the generation (how many
//!   servers have served it, so each server's file handles differ from its predecessors');
//! * the inode journal: every node handed out, in order (inode numbers are positions);
//! * the open table: every inode the kernel holds open now, how (cached or passthrough with
//!   its backing id) and by how many handles, since the kernel refuses an open of an inode
//!   in the other mode.
//!
//! The layout is docs/format/takeover-state.md (version 1). The file lives in memory only
//! (a reboot ends every mount anyway), but a server of another modelcas version may read
//! it after an upgrade: a version it does not know is refused (the server reports the
//! volume as not served, and its readers wait until a server that reads it runs: roll
//! back, or unpublish and publish again). Writes are ordered so that a server killed
//! between any two leaves a file its successor reads: a journal record counts once the
//! header's committed length covers it; an open-table slot is one 16-byte write.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use parking_lot::Mutex;

/// The first bytes of a state file.
pub const MAGIC: &[u8; 8] = b"MCASTKO\0";
/// The layout version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes reserved for the header.
const HEADER: u64 = 4096;
/// Slots of the open table: at most this many inodes open at once (more are refused
/// `ENFILE`, so that no open the kernel holds is unknown to a successor).
pub const OPEN_SLOTS: usize = 65536;
const SLOT: u64 = 16;
/// Where the inode journal begins.
const JOURNAL: u64 = HEADER + OPEN_SLOTS as u64 * SLOT;
/// A journal record larger than this is damage (a node is a path and a few ids).
const MAX_RECORD: u32 = 1 << 20;

/// Header flag: FUSE_INIT was answered.
pub const INITIALIZED: u32 = 1;
/// Header flag: the kernel announced FUSE_HAS_RESEND (Linux 6.9+).
pub const HAS_RESEND: u32 = 2;
/// Header flag: passthrough was negotiated.
pub const PASSTHROUGH: u32 = 4;

/// Backing id recorded for an inode open in the cached mode (no backing file).
const CACHED: u32 = u32::MAX;

/// Why a state file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("takeover state: {0}")]
    Io(#[from] std::io::Error),
    #[error("takeover state is not a modelcas state file (bad magic)")]
    Magic,
    #[error("takeover state has layout version {0}; this modelcas reads version {VERSION}")]
    Version(u32),
    #[error("takeover state is damaged: {0}")]
    Damaged(String),
}

/// The header's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub flags: u32,
    pub proto_major: u32,
    pub proto_minor: u32,
    pub generation: u32,
    pub mounted_at: u64,
    pub journal_len: u64,
}

impl Header {
    fn encode(&self) -> [u8; 48] {
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..20].copy_from_slice(&self.proto_major.to_le_bytes());
        b[20..24].copy_from_slice(&self.proto_minor.to_le_bytes());
        b[24..28].copy_from_slice(&self.generation.to_le_bytes());
        b[32..40].copy_from_slice(&self.mounted_at.to_le_bytes());
        b[40..48].copy_from_slice(&self.journal_len.to_le_bytes());
        b
    }

    fn decode(b: &[u8; 48]) -> Result<Header, StateError> {
        if &b[..8] != MAGIC {
            return Err(StateError::Magic);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(StateError::Version(version));
        }
        Ok(Header {
            flags: u32_at(12),
            proto_major: u32_at(16),
            proto_minor: u32_at(20),
            generation: u32_at(24),
            mounted_at: u64_at(32),
            journal_len: u64_at(40),
        })
    }

    /// Whether FUSE_INIT was answered.
    pub fn initialized(&self) -> bool {
        self.flags & INITIALIZED != 0
    }
}

/// How the kernel holds an inode open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Reads come to the server (and the kernel may cache pages).
    Cached,
    /// The kernel reads the backing file registered as this id.
    Passthrough(u32),
}

/// An inode the kernel holds open, from the open table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenInode {
    pub ino: u64,
    pub mode: OpenMode,
    pub count: u32,
}

struct Inner {
    header: Header,
    /// Slot of each inode in the open table.
    slots: HashMap<u64, usize>,
    free: Vec<usize>,
}

/// A connection's state file, as one server uses it.
pub struct State {
    file: File,
    inner: Mutex<Inner>,
}

impl State {
    /// A new, empty state file for a connection not yet initialised.
    pub fn create(mounted_at: u64) -> Result<State, StateError> {
        // SAFETY: the name is a NUL-terminated literal; the call touches no other memory.
        let fd = unsafe { libc::memfd_create(c"modelcas-mount-state".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(JOURNAL)?;
        let header = Header {
            mounted_at,
            ..Header::default()
        };
        file.write_all_at(&header.encode(), 0)?;
        Ok(State {
            file,
            inner: Mutex::new(Inner {
                header,
                slots: HashMap::new(),
                free: (0..OPEN_SLOTS).rev().collect(),
            }),
        })
    }

    /// The state file `file` as an earlier server left it.
    pub fn open(file: File) -> Result<State, StateError> {
        let mut b = [0u8; 48];
        file.read_exact_at(&mut b, 0)?;
        let header = Header::decode(&b)?;
        let mut table = vec![0u8; OPEN_SLOTS * SLOT as usize];
        file.read_exact_at(&mut table, HEADER)?;
        let mut slots = HashMap::new();
        let mut free = Vec::new();
        for i in (0..OPEN_SLOTS).rev() {
            let s = &table[i * SLOT as usize..(i + 1) * SLOT as usize];
            let ino = u64::from_le_bytes(s[..8].try_into().unwrap_or_default());
            if ino == 0 {
                free.push(i);
            } else if slots.insert(ino, i).is_some() {
                return Err(StateError::Damaged(format!(
                    "inode {ino} in two open slots"
                )));
            }
        }
        Ok(State {
            file,
            inner: Mutex::new(Inner {
                header,
                slots,
                free,
            }),
        })
    }

    /// The memory file, to hand to the holder.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The header as last written.
    pub fn header(&self) -> Header {
        self.inner.lock().header
    }

    fn write_header(&self, inner: &Inner) -> std::io::Result<()> {
        self.file.write_all_at(&inner.header.encode(), 0)
    }

    /// Records what FUSE_INIT negotiated (`flags`: [`HAS_RESEND`], [`PASSTHROUGH`]).
    pub fn set_initialized(&self, flags: u32, proto: (u32, u32)) -> std::io::Result<()> {
        let mut inner = self.inner.lock();
        inner.header.flags = flags | INITIALIZED;
        inner.header.proto_major = proto.0;
        inner.header.proto_minor = proto.1;
        self.write_header(&inner)
    }

    /// Starts the next server's generation and returns it.
    pub fn next_generation(&self) -> std::io::Result<u32> {
        let mut inner = self.inner.lock();
        inner.header.generation = inner.header.generation.wrapping_add(1);
        self.write_header(&inner)?;
        Ok(inner.header.generation)
    }

    /// Appends one record to the inode journal; it counts once this returns.
    pub fn append(&self, record: &[u8]) -> std::io::Result<()> {
        self.append_all(&[record])
    }

    /// Appends `records` to the inode journal, in order, with one write and then the
    /// header's committed length: they count once this returns, and a server killed
    /// between the two writes leaves none of them counted (the kernel heard of none).
    pub fn append_all<R: AsRef<[u8]>>(&self, records: &[R]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for record in records {
            let record = record.as_ref();
            let len = u32::try_from(record.len())
                .ok()
                .filter(|l| *l <= MAX_RECORD)
                .ok_or_else(|| std::io::Error::other("takeover journal record too large"))?;
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(record);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let mut inner = self.inner.lock();
        let at = JOURNAL + inner.header.journal_len;
        self.file.write_all_at(&buf, at)?;
        inner.header.journal_len += buf.len() as u64;
        self.write_header(&inner)
    }

    /// Every record of the inode journal, in order.
    pub fn records(&self) -> Result<Vec<Vec<u8>>, StateError> {
        let end = self.inner.lock().header.journal_len;
        let mut out = Vec::new();
        let mut at = 0u64;
        while at < end {
            let mut len = [0u8; 4];
            self.file.read_exact_at(&mut len, JOURNAL + at)?;
            let len = u32::from_le_bytes(len);
            if len > MAX_RECORD || at + 4 + u64::from(len) > end {
                return Err(StateError::Damaged(format!("journal record at {at}")));
            }
            let mut rec = vec![0u8; len as usize];
            self.file.read_exact_at(&mut rec, JOURNAL + at + 4)?;
            out.push(rec);
            at += 4 + u64::from(len);
        }
        Ok(out)
    }

    /// Records that the kernel holds `ino` open `count` times in `mode` (0: not open).
    /// `Err` with `ENFILE` when the table is full.
    pub fn set_open(&self, ino: u64, mode: OpenMode, count: u32) -> std::io::Result<()> {
        let mut inner = self.inner.lock();
        let slot = match (inner.slots.get(&ino).copied(), count) {
            (None, 0) => return Ok(()),
            (Some(s), 0) => {
                inner.slots.remove(&ino);
                inner.free.push(s);
                return self.file.write_all_at(&[0u8; 16], HEADER + s as u64 * SLOT);
            }
            (Some(s), _) => s,
            (None, _) => {
                let s = inner
                    .free
                    .pop()
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENFILE))?;
                inner.slots.insert(ino, s);
                s
            }
        };
        let id = match mode {
            OpenMode::Cached => CACHED,
            OpenMode::Passthrough(id) => id,
        };
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&ino.to_le_bytes());
        b[8..12].copy_from_slice(&id.to_le_bytes());
        b[12..16].copy_from_slice(&count.to_le_bytes());
        self.file.write_all_at(&b, HEADER + slot as u64 * SLOT)
    }

    /// Every inode the kernel holds open, as recorded.
    pub fn opens(&self) -> Result<Vec<OpenInode>, StateError> {
        let inner = self.inner.lock();
        let mut out = Vec::with_capacity(inner.slots.len());
        for (&ino, &s) in &inner.slots {
            let mut b = [0u8; 16];
            self.file.read_exact_at(&mut b, HEADER + s as u64 * SLOT)?;
            let id = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
            let count = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
            let mode = if id == CACHED {
                OpenMode::Cached
            } else {
                OpenMode::Passthrough(id)
            };
            out.push(OpenInode { ino, mode, count });
        }
        Ok(out)
    }
}

/// Asks the kernel to send again every request a dead server had read and not answered
/// (FUSE_NOTIFY_RESEND, Linux 6.9+): they go back to the head of the queue, with bit 63
/// set in their unique id, and the new server answers them as any other.
pub fn notify_resend(fuse: &File) -> std::io::Result<()> {
    // struct fuse_out_header { u32 len; i32 error (the notify code); u64 unique = 0 }
    const FUSE_NOTIFY_RESEND: i32 = 7;
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&16u32.to_le_bytes());
    b[4..8].copy_from_slice(&FUSE_NOTIFY_RESEND.to_le_bytes());
    use std::io::Write;
    (&*fuse).write_all(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records appended together (a listing's new inodes) read back in order after those
    /// appended one by one; a batch with a record too large appends none of them.
    #[test]
    fn records_appended_together_count_together() {
        let s = State::create(1).unwrap();
        s.append(b"one").unwrap();
        s.append_all(&[b"two".to_vec(), Vec::new(), b"four".to_vec()])
            .unwrap();
        s.append_all::<Vec<u8>>(&[]).unwrap();
        let big = vec![0u8; MAX_RECORD as usize + 1];
        assert!(s.append_all(&[b"five".to_vec(), big]).is_err());
        let dup = s.file().try_clone().unwrap();
        let t = State::open(dup).unwrap();
        let want: Vec<Vec<u8>> = vec![b"one".to_vec(), b"two".to_vec(), vec![], b"four".to_vec()];
        assert_eq!(t.records().unwrap(), want);
    }

    #[test]
    fn a_successor_reads_what_a_server_wrote() {
        let s = State::create(1234).unwrap();
        s.set_initialized(HAS_RESEND | PASSTHROUGH, (7, 45))
            .unwrap();
        assert_eq!(s.next_generation().unwrap(), 1);
        s.append(b"first").unwrap();
        s.append(b"").unwrap();
        s.append(b"third record").unwrap();
        s.set_open(5, OpenMode::Passthrough(3), 2).unwrap();
        s.set_open(9, OpenMode::Cached, 1).unwrap();
        s.set_open(11, OpenMode::Cached, 1).unwrap();
        s.set_open(11, OpenMode::Cached, 0).unwrap();
        let dup = s.file().try_clone().unwrap();
        let t = State::open(dup).unwrap();
        let h = t.header();
        assert_eq!(h.flags, INITIALIZED | HAS_RESEND | PASSTHROUGH);
        assert_eq!((h.proto_major, h.proto_minor, h.generation), (7, 45, 1));
        assert_eq!(h.mounted_at, 1234);
        assert_eq!(
            t.records().unwrap(),
            vec![b"first".to_vec(), vec![], b"third record".to_vec()]
        );
        let mut opens = t.opens().unwrap();
        opens.sort_by_key(|o| o.ino);
        assert_eq!(
            opens,
            vec![
                OpenInode {
                    ino: 5,
                    mode: OpenMode::Passthrough(3),
                    count: 2
                },
                OpenInode {
                    ino: 9,
                    mode: OpenMode::Cached,
                    count: 1
                },
            ]
        );
        assert_eq!(t.next_generation().unwrap(), 2);
    }

    #[test]
    fn an_uncommitted_record_is_not_read() {
        let s = State::create(0).unwrap();
        s.append(b"kept").unwrap();
        // A server killed after writing a record's bytes, before the header's length.
        s.file()
            .write_all_at(&[4, 0, 0, 0, b'l', b'o', b's', b't'], JOURNAL + 8)
            .unwrap();
        let t = State::open(s.file().try_clone().unwrap()).unwrap();
        assert_eq!(t.records().unwrap(), vec![b"kept".to_vec()]);
    }

    #[test]
    fn damage_and_unknown_versions_are_refused() {
        let s = State::create(0).unwrap();
        s.file().write_all_at(&2u32.to_le_bytes(), 8).unwrap();
        assert!(matches!(
            State::open(s.file().try_clone().unwrap()),
            Err(StateError::Version(2))
        ));
        s.file().write_all_at(b"NOTMINE!", 0).unwrap();
        assert!(matches!(
            State::open(s.file().try_clone().unwrap()),
            Err(StateError::Magic)
        ));
        let s = State::create(0).unwrap();
        s.append(b"abc").unwrap();
        s.file()
            .write_all_at(&u32::MAX.to_le_bytes(), JOURNAL)
            .unwrap();
        let t = State::open(s.file().try_clone().unwrap()).unwrap();
        assert!(matches!(t.records(), Err(StateError::Damaged(_))));
    }

    #[test]
    fn a_full_open_table_refuses_with_enfile() {
        let s = State::create(0).unwrap();
        for ino in 1..=OPEN_SLOTS as u64 {
            s.set_open(ino, OpenMode::Cached, 1).unwrap();
        }
        let e = s.set_open(u64::MAX, OpenMode::Cached, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENFILE));
        s.set_open(1, OpenMode::Cached, 0).unwrap();
        s.set_open(u64::MAX, OpenMode::Cached, 1).unwrap();
    }
}
