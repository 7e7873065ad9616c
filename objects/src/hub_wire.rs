//! The names of the hub's store API (issue 43, docs/design/fleet-hub.md §2): the routes a
//! node reads a store through a `modelcas serve` by, and the messages they answer. Pure:
//! the hub (`serve`) and the node's `HubStore` build and parse the same paths here, so
//! that each block and each (key, tag) has exactly one URL, hence one entry in any HTTP
//! cache between them.
//!
//! Packs are read in blocks of [`BLOCK_LEN`] bytes named by pack id and block number;
//! every other object as (key, tag), answered only while the object still has that tag.
//! Both are immutable, so every cacheable URL has one content forever.

use format::layout::{pack_key, parse_pack_key, PACKS_PREFIX};
use format::pack::PackId;
use serde::{Deserialize, Serialize};

/// Where the store API lives on a hub.
pub const API: &str = "/api/modelcas/v1";
/// The length of a pack block (the last block of a pack is shorter).
pub const BLOCK_LEN: u64 = 1 << 20;
/// The most objects one listing page names.
pub const LIST_PAGE: usize = 10_000;
/// Every answer of the store API names the store it reads (32 hex digits).
pub const HEADER_STORE: &str = "Modelcas-Store";
/// A request sent again past every cache (the bytes a cache gave failed their check).
pub const HEADER_FRESH: &str = "Modelcas-Fresh";
/// The size of the pack, on a block request past its end (`416`).
pub const HEADER_PACK_SIZE: &str = "Modelcas-Pack-Size";

/// A path the store API does not serve, or spells another way.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a store API path: {0}")]
pub struct BadPath(pub String);

/// The blocks that hold bytes `[offset, offset + len)` of a pack: the first and last
/// block numbers, inclusive; `None` for an empty range.
pub fn blocks(offset: u64, len: u64) -> Option<(u64, u64)> {
    let end = offset.checked_add(len)?;
    (len > 0).then(|| (offset / BLOCK_LEN, (end - 1) / BLOCK_LEN))
}

/// The byte range `[start, end)` of block `n` of a pack of `size` bytes; `None` when the
/// block lies past the end.
pub fn block_range(n: u64, size: u64) -> Option<(u64, u64)> {
    let start = n.checked_mul(BLOCK_LEN).filter(|s| *s < size)?;
    Some((start, (start + BLOCK_LEN).min(size)))
}

/// The path (under [`API`]) of block `n` of pack `id`: `packs/<2 hex>/<64 hex>/<n>`.
pub fn block_path(id: &PackId, n: u64) -> String {
    format!("{}/{n}", pack_key(id))
}

/// The pack and block a block path names. Only the one spelling [`block_path`] writes is
/// accepted (lower-case hex, the right directory, `n` in decimal without leading zeros),
/// so that a cache keeps one entry per block.
pub fn parse_block_path(path: &str) -> Result<(PackId, u64), BadPath> {
    let bad = || BadPath(path.to_owned());
    let (key, n) = path.rsplit_once('/').ok_or_else(bad)?;
    let id = parse_pack_key(key).ok_or_else(bad)?;
    let canonical = pack_key(&id) == key && (n == "0" || !n.starts_with('0'));
    if !canonical || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok((id, n.parse().map_err(|_| bad())?))
}

/// The path (under [`API`]) of object `key` as it is while its tag is `tag`. Keys are the
/// store's (`/`-separated, checked by `check_key`); the tag is a hub tag ([`hub_tag`]).
pub fn object_path(key: &str, tag: &str) -> String {
    format!("objects/{key}?tag={tag}")
}

/// Whether the store API serves reads of `key` at all: the objects reading commands need
/// (the config, features, packs, forwarding records and repositories), never the ones only
/// writers use (locks, gc's records, runs, temporary objects).
pub fn served_key(key: &str) -> bool {
    const SERVED: [&str; 3] = [PACKS_PREFIX, "moved/", "repos/"];
    key == "config" || key == "features" || SERVED.iter().any(|p| key.starts_with(p))
}

/// The tag the hub gives an object whose bucket tag is `bucket_tag`: `t-` and 32 hex
/// digits of its BLAKE3, safe in a header and a query whatever the bucket's tag holds, and
/// the same on every replica of the hub over one bucket.
pub fn hub_tag(bucket_tag: &str) -> String {
    let hash = blake3::hash(bucket_tag.as_bytes()).to_hex();
    format!("t-{}", &hash[..32])
}

/// Whether `tag` is spelled as [`hub_tag`] writes it.
pub fn is_hub_tag(tag: &str) -> bool {
    tag.strip_prefix("t-").is_some_and(|h| {
        h.len() == 32
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What `GET /store` answers: the protocol's version, the store's id and the block length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreInfo {
    pub version: u32,
    /// The store id, 32 hex digits (the config's).
    pub store_id: String,
    pub block_len: u64,
}

/// The version of the store API this build speaks.
pub const VERSION: u32 = 1;

impl StoreInfo {
    /// Checks that a node can read through a hub that sent this.
    pub fn check(&self) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!(
                "the hub speaks store API version {}, this build {VERSION}",
                self.version
            ));
        }
        if self.block_len != BLOCK_LEN {
            return Err(format!(
                "blocks of {} bytes, not {BLOCK_LEN}",
                self.block_len
            ));
        }
        let hex = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex(&self.store_id) {
            return Err(format!("a malformed store id {:?}", self.store_id));
        }
        Ok(())
    }
}

/// One object of a listing or a stat, as the hub sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireMeta {
    pub key: String,
    pub size: u64,
    /// The hub tag ([`hub_tag`]).
    pub tag: String,
    /// When the store wrote it, milliseconds since the Unix epoch, if the store says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_ms: Option<u64>,
}

/// A page of a listing: at most [`LIST_PAGE`] objects, sorted by key, and the key to
/// list after for the next page (`None`: the last page).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub objects: Vec<WireMeta>,
    pub next: Option<String>,
}

impl ListPage {
    /// Checks a page a hub sent: no more than [`LIST_PAGE`] objects, sorted, each after
    /// `after` and under `prefix`, and `next` the last key when there is one.
    pub fn check(&self, prefix: &str, after: Option<&str>) -> Result<(), String> {
        if self.objects.len() > LIST_PAGE {
            return Err(format!("{} objects in a page", self.objects.len()));
        }
        let mut last = after;
        for m in &self.objects {
            if !m.key.starts_with(prefix) || last.is_some_and(|l| m.key.as_str() <= l) {
                return Err(format!(
                    "key {:?} out of order or outside {prefix:?}",
                    m.key
                ));
            }
            last = Some(&m.key);
        }
        match &self.next {
            Some(n) if Some(n.as_str()) != last || self.objects.is_empty() => {
                Err(format!("next {n:?} is not the page's last key"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
