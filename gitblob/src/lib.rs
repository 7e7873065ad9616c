//! The git blob id: `sha1("blob {len}\0" || content)`, how git (and so the Hugging Face Hub)
//! names a file's content: the id of a small file, and of the pointer file of an LFS file.
//! The one implementation the Hub client (checking what it downloads) and serve (naming
//! what it serves) share. A pure function of bytes, computed as they stream: the header
//! needs the length first, so a [`GitBlob`] is made for the length the content will have.

use sha1::{Digest, Sha1};

/// A git blob id being computed over content that streams in.
#[derive(Clone)]
pub struct GitBlob(Sha1);

impl GitBlob {
    /// Starts the id of a blob of `len` bytes.
    pub fn new(len: u64) -> GitBlob {
        let mut h = Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        GitBlob(h)
    }

    /// Adds content.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The 20-byte id. It is the id of the content only if the content added was exactly
    /// the length given to [`GitBlob::new`].
    pub fn finish(self) -> [u8; 20] {
        self.0.finalize().into()
    }

    /// The id as 40 lowercase hex digits.
    pub fn finish_hex(self) -> String {
        hex::encode(self.finish())
    }
}

/// The git blob id of `data`, as 40 lowercase hex digits.
pub fn git_blob_id(data: &[u8]) -> String {
    let mut b = GitBlob::new(data.len() as u64);
    b.update(data);
    b.finish_hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`, and `git hash-object /dev/null`.
        assert_eq!(
            git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn streaming_gives_the_same_id_however_the_content_is_cut() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = git_blob_id(&data);
        for cut in [1, 63, 64, 65, 4096, 9_999] {
            let mut b = GitBlob::new(data.len() as u64);
            for part in data.chunks(cut) {
                b.update(part);
            }
            assert_eq!(b.finish_hex(), whole, "cut {cut}");
        }
        // The length is part of the id: content that is not the announced length gets
        // another id.
        let mut short = GitBlob::new(data.len() as u64 + 1);
        short.update(&data);
        assert_ne!(short.finish_hex(), whole);
    }
}
