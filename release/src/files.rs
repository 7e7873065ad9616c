//! The check's one input: the files of a revision, listed with their sizes and read by
//! range or whole. [`DirFiles`] serves a snapshot directory (`modelcas check DIR`, tests);
//! the store serves stored files through its checked read path.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One file of a revision.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileInfo {
    /// Relative to the revision's root, '/'-separated.
    pub path: String,
    pub size: u64,
}

/// The files of one revision.
pub trait Files {
    /// Every file, sorted by path.
    fn list(&self) -> &[FileInfo];
    /// `len` bytes from `offset`; fewer only where the file ends.
    fn read_at(&self, path: &str, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// The whole file, in order.
    fn reader(&self, path: &str) -> io::Result<Box<dyn Read + '_>>;
}

/// The regular files under a directory: recursive, symlinks to files followed (a Hugging
/// Face cache snapshot is made of them), `.git/` and `.cache/` left out.
#[derive(Debug)]
pub struct DirFiles {
    root: PathBuf,
    files: Vec<FileInfo>,
}

/// Directories that are never part of a revision: git's, and huggingface_hub's
/// `local_dir` metadata (`.cache/huggingface/`).
const SKIPPED_DIRS: &[&str] = &[".git", ".cache"];

impl DirFiles {
    pub fn open(dir: &Path) -> io::Result<DirFiles> {
        let mut files = Vec::new();
        walk(dir, "", &mut files)?;
        files.sort();
        Ok(DirFiles {
            root: dir.to_path_buf(),
            files,
        })
    }

    fn full(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<FileInfo>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().into_string().map_err(|name| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: a file name that is not UTF-8",
                    Path::new(&name).display()
                ),
            )
        })?;
        let rel = format!("{prefix}{name}");
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_str()) {
                walk(&entry.path(), &format!("{rel}/"), out)?;
            }
        } else if kind.is_file() {
            out.push(FileInfo {
                path: rel,
                size: entry.metadata()?.len(),
            });
        } else if kind.is_symlink() {
            // Followed to files only: a link to a directory could make a loop.
            match fs::metadata(entry.path()) {
                Ok(meta) if meta.is_file() => out.push(FileInfo {
                    path: rel,
                    size: meta.len(),
                }),
                Ok(_) => {}
                // A dangling link is no file of the revision.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

impl Files for DirFiles {
    fn list(&self) -> &[FileInfo] {
        &self.files
    }

    fn read_at(&self, path: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut file = fs::File::open(self.full(path))?;
        file.seek(SeekFrom::Start(offset))?;
        let mut out = Vec::with_capacity(len);
        file.take(len as u64).read_to_end(&mut out)?;
        Ok(out)
    }

    fn reader(&self, path: &str) -> io::Result<Box<dyn Read + '_>> {
        Ok(Box::new(fs::File::open(self.full(path))?))
    }
}
