//! The messages between the holder, its server and its clients, and how they travel: a
//! frame is a 4-byte little-endian length and that many bytes of JSON, with the file
//! descriptors it carries (SCM_RIGHTS) attached to its first byte. At most [`MAX_FDS`]
//! descriptors and [`MAX_FRAME`] bytes per frame; anything else is a protocol error.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 4;
/// Largest frame.
pub const MAX_FRAME: usize = 16 << 20;
/// The most descriptors Linux passes in one message (`SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// A volume: a connection mounted at `target`, showing one revision (or, with no
/// `commit`, every repository: the plain `modelcas mount`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Unique on the node (`<CSI volume id>@<target>`, or `mount:<path>`).
    pub id: String,
    pub target: PathBuf,
    /// `org/name`; empty for a full mount.
    pub repo: String,
    /// The revision as asked (a ref, a sha or a prefix).
    pub revision: String,
    /// The commit the volume is pinned to (40 hex digits); `None`: every repository.
    pub commit: Option<String>,
    /// Whether users other than the owner may read it (CSI volumes: always).
    pub allow_other: bool,
    /// Free-form labels (the pod it serves), shown by `list`.
    #[serde(default)]
    pub labels: Vec<(String, String)>,
    /// In a `Serve`: which keeping of the volume by the holder this is (a number the holder
    /// never gives twice), echoed in the `Served` answer, so that a late answer about an
    /// earlier volume of the same id is not taken for this one's. Absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u64>,
}

#[cfg(test)]
impl Volume {
    /// A volume named `id` of no repository, at `target`, for the unit tests.
    pub(crate) fn for_test(id: &str, target: &std::path::Path) -> Volume {
        Volume {
            id: id.into(),
            target: target.to_path_buf(),
            repo: "org/name".into(),
            revision: "main".into(),
            commit: None,
            allow_other: false,
            labels: Vec::new(),
            instance: None,
        }
    }
}

/// What a client (the CSI plugin, a new mountd) asks the holder, and what the
/// holder asks its server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// Keep this volume (its FUSE descriptor attached) and have it served; answered once
    /// the server answered the kernel's FUSE_INIT, or failed.
    Add(Volume),
    /// Forget a volume (its mount is gone or going).
    Remove { id: String },
    /// The volumes held.
    List,
    /// Holder to server: serve this volume (descriptors: FUSE, takeover state).
    Serve(Volume),
    /// Hand every volume over to a new holder (descriptors follow in `Volumes` frames) and
    /// exit: the upgrade of the holder itself.
    Handover,
}

/// The answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Reply {
    Ok,
    Error(String),
    Volumes(Vec<Volume>),
    /// Server to holder: volume `id` is served (or could not be).
    Served {
        id: String,
        error: Option<String>,
        /// The `instance` of the `Serve` answered (absent from servers before it was added).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<u64>,
    },
    /// One handed-over volume (descriptors: FUSE, takeover state); `last` ends the list,
    /// and carries the old holder's servers so far (absent from holders before they were
    /// added: then the new holder counts from zero).
    HandedOver {
        volume: Option<Volume>,
        last: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        servers_started: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_server_end_us: Option<u64>,
    },
}

/// Why a frame could not be sent or read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("mountd socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("mountd socket: the other side closed it")]
    Closed,
    #[error("mountd protocol: {0}")]
    Protocol(String),
}

fn nix_io(e: nix::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// Sends `msg` with `fds` attached.
pub fn send<T: Serialize>(sock: &UnixStream, msg: &T, fds: &[RawFd]) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Protocol(e.to_string()))?;
    if body.len() > MAX_FRAME || fds.len() > MAX_FDS {
        return Err(WireError::Protocol("frame too large".into()));
    }
    let len = (body.len() as u32).to_le_bytes();
    let frame = [&len[..], &body].concat();
    // One message: a small frame reaches the other side whole or not at all (the handover's
    // acknowledgement relies on it).
    let iov = [IoSlice::new(&frame)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    let sent = sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map_err(nix_io)?;
    let mut w = sock;
    w.write_all(&frame[sent..])?;
    Ok(())
}

/// Reads one frame: the message and the descriptors attached (close-on-exec).
pub fn recv<T: for<'de> Deserialize<'de>>(
    sock: &UnixStream,
) -> Result<(T, Vec<OwnedFd>), WireError> {
    let mut len = [0u8; 4];
    // Room for every descriptor one message can carry (the kernel's SCM_MAX_FD), so that
    // none is closed unseen: each is wrapped (closed when dropped) before a frame with
    // more than MAX_FDS is refused.
    let mut cbuf = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let (got, fds) = {
        let mut iov = [IoSliceMut::new(&mut len)];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cbuf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(nix_io)?;
        let mut fds = Vec::new();
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            // Cannot happen with a buffer for SCM_MAX_FD (nix refuses to iterate then).
            return Err(WireError::Protocol("control message truncated".into()));
        }
        for c in msg.cmsgs().map_err(nix_io)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed this descriptor for us; we own it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        if fds.len() > MAX_FDS {
            return Err(WireError::Protocol(format!(
                "{} descriptors in a frame (at most {MAX_FDS})",
                fds.len()
            )));
        }
        (msg.bytes, fds)
    };
    if got == 0 {
        return Err(WireError::Closed);
    }
    let mut r = sock;
    r.read_exact(&mut len[got..])?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(WireError::Protocol(format!("frame of {n} bytes")));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    let msg = serde_json::from_slice(&body).map_err(|e| WireError::Protocol(e.to_string()))?;
    Ok((msg, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn frames_carry_messages_and_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = tempfile::tempfile().unwrap();
        (&f).write_all(b"hello").unwrap();
        send(
            &a,
            &Request::Remove { id: "v1".into() },
            &[f.as_fd().as_raw_fd()],
        )
        .unwrap();
        send(&a, &Reply::Ok, &[]).unwrap();
        let (m, fds): (Request, _) = recv(&b).unwrap();
        assert!(matches!(m, Request::Remove { id } if id == "v1"));
        assert_eq!(fds.len(), 1);
        let mut s = String::new();
        let mut got = std::fs::File::from(fds.into_iter().next().unwrap());
        std::io::Seek::rewind(&mut got).unwrap();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        let (m, fds): (Reply, _) = recv(&b).unwrap();
        assert!(matches!(m, Reply::Ok) && fds.is_empty());
        drop(a);
        assert!(matches!(recv::<Reply>(&b), Err(WireError::Closed)));
    }

    /// How many of this process's descriptors are open on one of `files`.
    fn open_on(files: &[std::fs::File]) -> usize {
        use std::os::unix::fs::MetadataExt;
        let ids: Vec<_> = files
            .iter()
            .map(|f| f.metadata().map(|m| (m.dev(), m.ino())).unwrap())
            .collect();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| ids.contains(&(m.dev(), m.ino())))
            .count()
    }

    #[test]
    fn a_frame_with_too_many_descriptors_is_refused_and_closes_them_all() {
        // Failed before: the kernel installed MAX_FDS of them, nix refused to iterate a
        // truncated control message, and they leaked (hostile review, finding 25).
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<_> = (0..10).map(|_| tempfile::tempfile().unwrap()).collect();
        let raw: Vec<RawFd> = files.iter().map(|f| f.as_fd().as_raw_fd()).collect();
        let body = serde_json::to_vec(&Reply::Ok).unwrap();
        let len = (body.len() as u32).to_le_bytes();
        for _ in 0..5 {
            let iov = [IoSlice::new(&len)];
            let cmsg = [ControlMessage::ScmRights(&raw)];
            sendmsg::<()>(a.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).unwrap();
            (&a).write_all(&body).unwrap();
            assert!(matches!(recv::<Reply>(&b), Err(WireError::Protocol(_))));
            // The refused frame's body is still in the socket: read it away.
            let mut rest = vec![0u8; body.len()];
            (&b).read_exact(&mut rest).unwrap();
        }
        assert_eq!(open_on(&files), files.len(), "descriptors leaked");
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(matches!(recv::<Reply>(&b), Err(WireError::Protocol(_))));
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&3u32.to_le_bytes()).unwrap();
        (&a).write_all(b"{x}").unwrap();
        assert!(matches!(recv::<Reply>(&b), Err(WireError::Protocol(_))));
    }
}
