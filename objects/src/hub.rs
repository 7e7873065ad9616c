//! [`HubStore`]: a store read through one or more `modelcas serve` hubs (issue 43,
//! docs/format/hub-protocol.md), for the commands that only read (mount, CSI volumes,
//! checkout, cat, ls, verify, export). The node holds a hub token, never bucket
//! credentials; every write is refused before a request ([`ObjectError::ReadOnly`]), but
//! for last-use records, which the hub writes for the node.
//!
//! Packs are read in the hub's immutable 1 MiB blocks (the last few kept in memory, so that
//! neighbouring ranges share their edge block); other objects by (key, tag). Which address
//! answers, and what counts as its failure, is `crate::hub_client`'s. Bytes are never
//! trusted here: the read path checks every chunk and object and asks again
//! ([`ObjectStore::get_range_again`]) past every cache, at the next address.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use format::layout::{parse_pack_key, parse_used_key};
use format::pack::PackId;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::error::{ObjectError, Result};
use crate::hub_client::{
    bad_answer, count, expect_ok, json, Client, HubOptions, Req, ERROR_CAP, PAGE_CAP,
};
use crate::hub_wire::{self, blocks, ListPage, WireMeta, BLOCK_LEN};
use crate::requests::HUB_REQUESTS;
use crate::store::{check_key, ObjectMeta, ObjectStore};

/// Memory for the blocks read last (a 1 MiB block fits one of its 4 parts).
const RECENT_BLOCKS: u64 = 32 << 20;
/// The most bytes of a whole object (the envelope's cap).
const OBJECT_CAP: u64 = 1 << 30;
/// Characters of a key segment sent as they are (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A store read through hubs.
pub struct HubStore {
    client: Client,
    /// The blocks read last, so that ranges next to each other share their edge block.
    recent: Cache<(PackId, u64), Arc<Vec<u8>>, BlockWeight>,
}

#[derive(Clone)]
struct BlockWeight;

impl Weighter<(PackId, u64), Arc<Vec<u8>>> for BlockWeight {
    fn weight(&self, _: &(PackId, u64), v: &Arc<Vec<u8>>) -> u64 {
        v.len() as u64 + 64
    }
}

impl HubStore {
    /// Whether `location` names hubs (`http://` or `https://`, comma-separated).
    pub fn is_hub_location(location: &str) -> bool {
        location.starts_with("http://") || location.starts_with("https://")
    }

    /// Connects to the hubs at `location` (`http://H1:P,http://H2:P`): asks the first that
    /// answers which store it serves, and keeps to that store.
    pub fn new(location: &str, opts: HubOptions) -> Result<HubStore> {
        Ok(HubStore {
            client: Client::open(location, opts)?,
            recent: Cache::with_weighter(4096, RECENT_BLOCKS, BlockWeight),
        })
    }

    /// The store id the hubs answer for (32 hex digits).
    pub fn store_id(&self) -> &str {
        &self.client.store_id
    }

    fn read_only_error(&self, op: &'static str, key: &str) -> ObjectError {
        ObjectError::ReadOnly {
            location: self.client.location.clone(),
            op,
            key: key.to_string(),
        }
    }

    fn stat_from(&self, key: &str, start: usize, fresh: bool) -> Result<Option<WireMeta>> {
        let mut req = Req::get(format!("stat/{}", encode_key(key)), PAGE_CAP, "stat", key);
        req.fresh = fresh;
        let a = self.client.send(&req, start)?;
        if a.status == 404 {
            return Ok(None);
        }
        let a = expect_ok(a, "stat", key)?;
        let m: WireMeta = json(&a.body, "stat", key)?;
        if m.key != key || !hub_wire::is_hub_tag(&m.tag) && !m.tag.starts_with("p-") {
            return Err(bad_answer("stat", key, "another key or a malformed tag"));
        }
        Ok(Some(m))
    }

    fn get_from(&self, key: &str, start: usize, fresh: bool) -> Result<Vec<u8>> {
        for _ in 0..3 {
            let meta = self
                .stat_from(key, start, fresh)?
                .ok_or_else(|| ObjectError::NotFound(key.to_string()))?;
            let path = format!("objects/{}", encode_key(key));
            let mut req = Req::get(path, OBJECT_CAP, "get", key);
            req.query.push(("tag", meta.tag.clone()));
            req.fresh = fresh;
            let a = self.client.send(&req, start)?;
            match a.status {
                404 => return Err(ObjectError::NotFound(key.to_string())),
                412 => continue,
                _ => {}
            }
            let a = expect_ok(a, "get", key)?;
            if a.body.len() as u64 != meta.size {
                return Err(bad_answer(
                    "get",
                    key,
                    "a body of another size than its stat",
                ));
            }
            return Ok(a.body);
        }
        Err(bad_answer(
            "get",
            key,
            "replaced three times while being read",
        ))
    }

    /// Block `n` of pack `id`: from memory, else from the hubs.
    fn block(&self, id: &PackId, n: u64, key: &str) -> Result<Arc<Vec<u8>>> {
        if let Some(b) = self.recent.get(&(*id, n)) {
            count(&HUB_REQUESTS.recent_block_hits);
            return Ok(b);
        }
        let b = Arc::new(self.block_from(id, n, key, self.client.preferred(), false)?);
        self.recent.insert((*id, n), b.clone());
        Ok(b)
    }

    fn block_from(
        &self,
        id: &PackId,
        n: u64,
        key: &str,
        start: usize,
        fresh: bool,
    ) -> Result<Vec<u8>> {
        let mut req = Req::get(hub_wire::block_path(id, n), BLOCK_LEN, "get_range", key);
        req.fresh = fresh;
        let a = self.client.send(&req, start)?;
        match a.status {
            404 => Err(ObjectError::NotFound(key.to_string())),
            416 => Ok(Vec::new()),
            _ => Ok(expect_ok(a, "get_range", key)?.body),
        }
    }

    /// `len` bytes from `offset` of pack `id`, from its blocks (each through `block`).
    fn pack_range(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        mut block: impl FnMut(u64) -> Result<Arc<Vec<u8>>>,
    ) -> Result<Vec<u8>> {
        let Some((first, last)) = blocks(offset, len) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(len as usize);
        for n in first..=last {
            let b = block(n)?;
            let start = n * BLOCK_LEN;
            let from = offset.max(start) - start;
            let to = (offset + len).min(start + BLOCK_LEN) - start;
            let Some(piece) = b.get(from as usize..to as usize) else {
                return Err(ObjectError::CorruptObject {
                    key: key.to_string(),
                    reason: format!("the pack ends before byte {}", offset + len),
                });
            };
            out.extend_from_slice(piece);
        }
        Ok(out)
    }
}

impl ObjectStore for HubStore {
    fn put(&self, key: &str, _data: &[u8]) -> Result<()> {
        check_key(key)?;
        let Some((repo, commit)) = parse_used_key(key) else {
            return Err(self.read_only_error("put", key));
        };
        let path = format!(
            "used/{}/{}/{}",
            encode_segment(repo.org()),
            encode_segment(repo.name()),
            commit.to_hex()
        );
        let mut req = Req::get(path, ERROR_CAP, "put", key);
        req.method = "POST";
        let a = self.client.send(&req, self.client.preferred())?;
        expect_ok(a, "put", key).map(|_| ())
    }
    fn put_deferred(&self, key: &str, _data: &[u8]) -> Result<()> {
        Err(self.read_only_error("put", key))
    }
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let key = objects.first().map(|o| o.0.as_str()).unwrap_or("");
        Err(self.read_only_error("put", key))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        check_key(key)?;
        if let Some(id) = parse_pack_key(key) {
            let size = self
                .size(key)?
                .ok_or_else(|| ObjectError::NotFound(key.into()))?;
            return self.pack_range(key, 0, size, |n| self.block(&id, n, key));
        }
        self.get_from(key, self.client.preferred(), false)
    }
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        check_key(key)?;
        if let Some(id) = parse_pack_key(key) {
            return self.pack_range(key, offset, len, |n| self.block(&id, n, key));
        }
        let all = self.get(key)?;
        let end = offset.checked_add(len).filter(|e| *e <= all.len() as u64);
        let Some(end) = end else {
            return Err(ObjectError::CorruptObject {
                key: key.into(),
                reason: format!("{} bytes, asked for {len} from {offset}", all.len()),
            });
        };
        Ok(all[offset as usize..end as usize].to_vec())
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut req = Req::get("list".into(), PAGE_CAP, "list", prefix);
            req.query.push(("prefix", prefix.to_string()));
            if let Some(a) = &after {
                req.query.push(("after", a.clone()));
            }
            let a = expect_ok(
                self.client.send(&req, self.client.preferred())?,
                "list",
                prefix,
            )?;
            let page: ListPage = json(&a.body, "list", prefix)?;
            page.check(prefix, after.as_deref())
                .map_err(|e| bad_answer("list", prefix, &e))?;
            out.extend(page.objects.into_iter().map(meta));
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }
    fn delete(&self, key: &str) -> Result<()> {
        Err(self.read_only_error("delete", key))
    }
    fn size(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.stat(key)?.map(|m| m.size))
    }
    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        check_key(key)?;
        Ok(self
            .stat_from(key, self.client.preferred(), false)?
            .map(meta))
    }
    fn now(&self) -> Result<SystemTime> {
        Err(self.read_only_error("judge a lease with the clock of", "the store"))
    }
    fn remove_temporary(&self, t: &crate::store::Temporary) -> Result<()> {
        Err(self.read_only_error("remove", &t.name))
    }
    fn location(&self) -> String {
        self.client.location.clone()
    }
    fn read_only(&self) -> bool {
        true
    }
    fn get_again(&self, key: &str, attempt: u32) -> Result<Option<Vec<u8>>> {
        let Some(start) = self.client.again_address(attempt) else {
            return Ok(None);
        };
        if parse_pack_key(key).is_some() {
            let size = self.stat_from(key, start, true)?.map(|m| m.size);
            let size = size.ok_or_else(|| ObjectError::NotFound(key.to_string()))?;
            return self.get_range_again(key, 0, size, attempt);
        }
        count(&HUB_REQUESTS.bad_answers);
        self.get_from(key, start, true).map(Some)
    }
    fn get_range_again(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        attempt: u32,
    ) -> Result<Option<Vec<u8>>> {
        let Some(start) = self.client.again_address(attempt) else {
            return Ok(None);
        };
        count(&HUB_REQUESTS.bad_answers);
        let Some(id) = parse_pack_key(key) else {
            let all = self.get_from(key, start, true)?;
            let end = offset.saturating_add(len).min(all.len() as u64);
            return Ok(Some(all[offset.min(end) as usize..end as usize].to_vec()));
        };
        let range = self.pack_range(key, offset, len, |n| {
            // The kept block may be the wrong one: never answer from it, and keep what
            // comes fresh only if it is asked for normally again.
            self.recent.remove(&(id, n));
            self.block_from(&id, n, key, start, true).map(Arc::new)
        })?;
        Ok(Some(range))
    }
}

fn meta(m: WireMeta) -> ObjectMeta {
    ObjectMeta {
        key: m.key,
        size: m.size,
        tag: m.tag,
        modified: m
            .modified_ms
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
    }
}

fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A key as path segments, each percent-encoded (a ref key's `%2F` travels as `%252F`).
fn encode_key(key: &str) -> String {
    key.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}
