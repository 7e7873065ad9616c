//! Node-local state outside the store and its index (`docs/FORMAT.md`, "Node file cache"):
//! the marker of the node's whole-file cache. Its entries have no header (each is a file's
//! bytes exactly, named `<2 hex>/<64 hex sha256>`), and the node's chunk cache holds frames
//! ([`crate::frame`]) named by chunk id; reading and writing both is the `read` and `repo`
//! crates'.

/// Name of the file that marks a directory as a node file cache of a known layout.
pub const FILE_CACHE_MARK_NAME: &str = "FORMAT";

/// The content of that file: layout version 1.
pub const FILE_CACHE_MARK: &[u8] = b"MCASFILES 1\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_is_the_documented_twelve_bytes() {
        assert_eq!(FILE_CACHE_MARK, b"MCASFILES 1\n");
        assert_eq!(FILE_CACHE_MARK.len(), 12);
        assert_eq!(FILE_CACHE_MARK_NAME, "FORMAT");
    }
}
