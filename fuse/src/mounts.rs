//! The kernel's mount table (`/proc/self/mountinfo`), read without touching the mounts
//! themselves: a `stat` of a FUSE mount asks its server, and one whose server is being
//! replaced, or hangs, would make the caller wait.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The source (`fsname`) of every modelcas mount in the table; its type is `fuse` (a
/// mount made by mount(2)) or `fuse.modelcas` (one made by fusermount3).
pub const SOURCE: &str = "modelcas";

/// One line of the table: what is mounted where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The kernel's mount id (unique among the mounts that exist now).
    pub id: u64,
    /// The mount point, as the kernel spells it (escapes undone).
    pub path: PathBuf,
    /// The filesystem type: `fuse` or `fuse.modelcas` for ours.
    pub fstype: String,
    /// What is mounted: `modelcas` for ours.
    pub source: String,
}

impl Mount {
    /// Whether this is a modelcas FUSE mount.
    pub fn is_modelcas(&self) -> bool {
        (self.fstype == "fuse" || self.fstype.starts_with("fuse.")) && self.source == SOURCE
    }
}

/// Every mount in the table, in its order (later lines are mounted over earlier ones at
/// the same path); `None` when the table cannot be read.
pub fn table() -> Option<Vec<Mount>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    Some(info.lines().filter_map(parse_line).collect())
}

fn parse_line(line: &str) -> Option<Mount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let id = fields.first()?.parse().ok()?;
    let path = PathBuf::from(unescape(fields.get(4)?));
    // Optional fields end with a lone "-"; the filesystem type follows it.
    let dash = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    let fstype = fields.get(dash + 1)?.to_string();
    let source = unescape(fields.get(dash + 2)?);
    Some(Mount {
        id,
        path,
        fstype,
        source,
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` as the kernel's table spells a mount point: absolute and resolved. Only the
/// parent is resolved: the path itself may be a mount, which is not touched.
pub fn kernel_spelling(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            parent
                .canonicalize()
                .map(|p| p.join(name))
                .unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

/// The topmost mount at `path` now, if any.
pub fn mount_at(path: &Path) -> Option<Mount> {
    let want = kernel_spelling(path);
    table()?.into_iter().rev().find(|m| m.path == want)
}

/// The ids of every mount that exists now; `None` when the table cannot be read.
pub fn mount_ids() -> Option<HashSet<u64>> {
    Some(table()?.into_iter().map(|m| m.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_and_without_optional_fields() {
        let l = "36 35 0:52 / /var/lib/kubelet/pods/a\\040b/mount ro,nosuid shared:1 master:2 - fuse modelcas ro,user_id=0";
        let m = parse_line(l).unwrap();
        assert_eq!(m.id, 36);
        assert_eq!(m.path, Path::new("/var/lib/kubelet/pods/a b/mount"));
        assert!(m.is_modelcas());
        let l = "37 35 0:53 / /models ro - fuse.modelcas modelcas ro";
        assert!(parse_line(l).unwrap().is_modelcas());
        let l = "38 35 0:54 / /other ro - fuse.sshfs host:/x ro";
        assert!(!parse_line(l).unwrap().is_modelcas());
        let l = "22 1 0:21 / /tmp rw - tmpfs tmpfs rw";
        let m = parse_line(l).unwrap();
        assert_eq!((m.id, m.fstype.as_str()), (22, "tmpfs"));
        assert!(parse_line("garbage").is_none());
        assert_eq!(unescape("a\\134b\\011c\\"), "a\\b\tc\\");
    }

    #[test]
    fn the_root_is_in_the_table() {
        let root = mount_at(Path::new("/")).expect("/ is mounted");
        assert!(mount_ids().unwrap().contains(&root.id));
    }
}
