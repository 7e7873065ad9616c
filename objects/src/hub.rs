//! [`HubStore`]: a store read through one or more `modelcas serve` hubs (issue 43,
//! docs/format/hub-protocol.md), for the commands that only read (mount, CSI volumes,
//! checkout, cat, ls, verify, export). The node holds a hub token, never bucket
//! credentials; every write is refused before a request ([`ObjectError::ReadOnly`]), but
//! for last-use records, which the hub writes for the node.
//!
//! Addresses are tried in the order given; one that fails (connection, timeout, 5xx, 429,
//! a body cut short, another store) is marked down for [`DOWN_FOR`] (doubled for each
//! failure in a row, up to [`DOWN_MAX`]) and the same request goes to the next at once,
//! each address holding it at most its share of the time left (a hub that accepts and never
//! answers); when all are down the request waits and goes round again until `retry_for`.
//! A token the hub refuses makes the node read its token file again (a rotated secret). Packs are read in the hub's immutable 1 MiB blocks (the last few
//! kept in memory, so that neighbouring ranges share their edge block); other objects by
//! (key, tag). Bytes are never trusted here: the read path checks every chunk and object
//! and asks again ([`ObjectStore::get_range_again`]) past every cache, at the next address.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use format::layout::{parse_pack_key, parse_used_key};
use format::pack::PackId;
use parking_lot::{Mutex, RwLock};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use ureq::http::HeaderMap;

use crate::error::{ObjectError, Result};
use crate::hub_wire::{
    self, blocks, ListPage, StoreInfo, WireMeta, API, BLOCK_LEN, HEADER_FRESH, HEADER_STORE,
};
use crate::requests::HUB_REQUESTS;
use crate::store::{check_key, ObjectMeta, ObjectStore};

/// How long an address that failed is passed over.
pub const DOWN_FOR: Duration = Duration::from_secs(10);
/// The longest an address is passed over after failures in a row.
pub const DOWN_MAX: Duration = Duration::from_secs(300);
/// Memory for the blocks read last (a 1 MiB block fits one of its 4 parts).
const RECENT_BLOCKS: u64 = 32 << 20;
/// The most bytes of a whole object (the envelope's cap).
const OBJECT_CAP: u64 = 1 << 30;
/// The most bytes of a listing page, a stat or the store's description.
const PAGE_CAP: u64 = 16 << 20;
/// The most bytes of an error's body that are read (for its message).
const ERROR_CAP: u64 = 16 << 10;

/// Characters of a key segment sent as they are (RFC 3986 unreserved).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// How to reach the hubs.
#[derive(Clone, Debug)]
pub struct HubOptions {
    /// The token sent as `Authorization: Bearer` (`None`: none).
    pub token: Option<String>,
    /// Where the token came from, read again once after a `401` (a rotated secret).
    pub token_file: Option<PathBuf>,
    /// How long a request goes round the addresses before it fails.
    pub retry_for: Duration,
    /// PEM certificates to trust besides the system's (an internal CA).
    pub ca_bundle: Option<PathBuf>,
}

impl Default for HubOptions {
    fn default() -> HubOptions {
        HubOptions {
            token: None,
            token_file: None,
            retry_for: Duration::from_secs(60),
            ca_bundle: None,
        }
    }
}

/// Reads a token file (`--hub-token-file`): its first line that is neither empty nor a
/// comment (a byte-order mark before it is dropped).
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    let bad =
        |why: String| ObjectError::Invalid(format!("--hub-token-file {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let token = text
        .trim_start_matches('\u{feff}')
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().next().unwrap_or(l).to_string())
        .ok_or_else(|| bad("no token in the file".into()))?;
    check_token(&token).map_err(bad)?;
    Ok(token)
}

/// A token must fit an `Authorization` header: printable ASCII without spaces.
pub fn check_token(token: &str) -> std::result::Result<(), String> {
    if !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    Err("the token holds characters other than printable ASCII".into())
}

/// One hub address and what is known of it.
struct Address {
    /// `http://host:port` (no trailing slash).
    base: String,
    /// Passed over until then.
    down_until: Mutex<Option<Instant>>,
    /// It answers for another store, or has the store API off: never used again.
    unusable: AtomicBool,
    /// Failures in a row: each doubles how long it is passed over.
    failures: std::sync::atomic::AtomicU32,
}

impl Address {
    /// How long to pass over the address after one more failure: [`DOWN_FOR`], doubled
    /// for each failure in a row, at most [`DOWN_MAX`] (a hub that stays broken, or takes
    /// connections and never answers, costs a reader one wait per period, not one every
    /// [`DOWN_FOR`]).
    fn down_for(&self) -> Duration {
        let n = self.failures.fetch_add(1, Ordering::Relaxed).min(5);
        (DOWN_FOR * (1u32 << n)).min(DOWN_MAX)
    }
}

/// A request: the path under [`API`] (already encoded), and how it is read.
struct Req<'a> {
    method: &'static str,
    path: String,
    /// Query pairs (encoded by the client).
    query: Vec<(&'a str, String)>,
    /// The most bytes of a successful body.
    cap: u64,
    /// Sent past every cache (`Modelcas-Fresh`, a nonce).
    fresh: bool,
    /// For errors: what was asked.
    op: &'static str,
    key: &'a str,
}

/// An answer: the status, headers and body, and the address that gave it.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// Why an address gave no answer.
enum Failure {
    /// Try the next address.
    Next(String),
    /// An answer that another address would give too: fail the request.
    Stop(ObjectError),
}

/// A store read through hubs.
pub struct HubStore {
    addresses: Vec<Address>,
    location: String,
    agent: ureq::Agent,
    opts: HubOptions,
    token: RwLock<Option<String>>,
    store_id: String,
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
        let addresses = parse_addresses(location)?;
        let agent = agent(&opts)?;
        let token = match (&opts.token, &opts.token_file) {
            (Some(t), _) => {
                check_token(t).map_err(|e| ObjectError::Invalid(format!("HF_TOKEN: {e}")))?;
                Some(t.clone())
            }
            (None, Some(f)) => Some(read_token_file(f)?),
            (None, None) => None,
        };
        let mut hub = HubStore {
            addresses,
            location: location.to_string(),
            agent,
            opts,
            token: RwLock::new(token),
            store_id: String::new(),
            recent: Cache::with_weighter(4096, RECENT_BLOCKS, BlockWeight),
        };
        let info = hub.send(&Req::get("store".into(), PAGE_CAP, "open", ""), 0)?;
        let info = expect_ok(info, "open", "")?;
        let info: StoreInfo = json(&info.body, "open", "")?;
        info.check()
            .map_err(|e| ObjectError::Invalid(format!("{location}: {e}")))?;
        hub.store_id = info.store_id;
        hub.same_store_everywhere()?;
        Ok(hub)
    }

    /// Asks every other address that answers now which store it serves: addresses of two
    /// stores are a mistake that would read one or the other by which is up. (One that is
    /// down now is checked at its first answer, by `judge`.)
    fn same_store_everywhere(&self) -> Result<()> {
        let req = Req::get("store".into(), PAGE_CAP, "open", "");
        let deadline = Instant::now() + Duration::from_secs(5);
        for (i, a) in self.addresses.iter().enumerate() {
            let Ok(answer) = self.try_once(i, &req, deadline) else {
                continue;
            };
            let theirs = answer
                .headers
                .get(HEADER_STORE)
                .and_then(|v| v.to_str().ok());
            if answer.status == 200 && theirs != Some(self.store_id.as_str()) {
                return Err(ObjectError::Invalid(format!(
                    "--store {}: {} serves store {}, another address store {}: give the \
                     addresses of one store's hubs",
                    self.location,
                    a.base,
                    theirs.unwrap_or("(none)"),
                    self.store_id
                )));
            }
        }
        Ok(())
    }

    /// The store id the hubs answer for (32 hex digits).
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    fn read_only_error(&self, op: &'static str, key: &str) -> ObjectError {
        ObjectError::ReadOnly {
            location: self.location.clone(),
            op,
            key: key.to_string(),
        }
    }

    /// Sends `req`, starting at address `start`, moving on as the module doc says.
    fn send(&self, req: &Req<'_>, start: usize) -> Result<Answer> {
        let deadline = Instant::now() + self.opts.retry_for;
        let n = self.addresses.len();
        let mut delay = Duration::from_millis(200);
        let mut reasons: Vec<String> = Vec::new();
        let mut first = true;
        loop {
            let now = Instant::now();
            let usable: Vec<usize> = (0..n)
                .map(|k| (start + k) % n)
                .filter(|i| !self.addresses[*i].unusable.load(Ordering::Relaxed))
                .collect();
            let up: Vec<usize> = usable
                .iter()
                .copied()
                .filter(|i| {
                    self.addresses[*i]
                        .down_until
                        .lock()
                        .is_none_or(|t| t <= now)
                })
                .collect();
            let round = if up.is_empty() { usable } else { up };
            let tries = round.len();
            for (k, i) in round.into_iter().enumerate() {
                if !first {
                    count(&HUB_REQUESTS.failovers);
                }
                first = false;
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                // An address that takes no answer (a frozen hub) holds the request at most
                // its share of the time left, so the next ones still get theirs.
                let share = deadline.saturating_duration_since(now) / (tries - k) as u32;
                let a = &self.addresses[i];
                match self.try_address(i, req, now + share) {
                    Ok(answer) => {
                        a.failures.store(0, Ordering::Relaxed);
                        return Ok(answer);
                    }
                    Err(Failure::Stop(e)) => return Err(e),
                    Err(Failure::Next(why)) => {
                        tracing::warn!("hub {}: {why}", a.base);
                        *a.down_until.lock() = Some(Instant::now() + a.down_for());
                        reasons.push(format!("{}: {why}", a.base));
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                reasons.dedup();
                let last: Vec<String> = reasons.iter().rev().take(n.max(1)).cloned().collect();
                return Err(ObjectError::Backend {
                    op: req.op,
                    key: req.key.to_string(),
                    reason: format!(
                        "no hub answered within {:?} ({})",
                        self.opts.retry_for,
                        last.join("; ")
                    ),
                });
            }
            std::thread::sleep(jitter(delay).min(left));
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// One request to address `i`; once more when the hub refused the token, with the
    /// token file read again (a rotated secret).
    fn try_address(
        &self,
        i: usize,
        req: &Req<'_>,
        deadline: Instant,
    ) -> std::result::Result<Answer, Failure> {
        let a = self.try_once(i, req, deadline)?;
        let (Some(f), true) = (&self.opts.token_file, token_refused(&a)) else {
            return self.judge(i, a, req);
        };
        match read_token_file(f) {
            Ok(t) => *self.token.write() = Some(t),
            Err(e) => return Err(Failure::Stop(e)),
        }
        let a = self.try_once(i, req, deadline)?;
        self.judge(i, a, req)
    }

    /// One request to address `i`, ending by `deadline` whatever the hub does (one that
    /// accepts connections and never answers holds a reader no longer than that).
    fn try_once(
        &self,
        i: usize,
        req: &Req<'_>,
        deadline: Instant,
    ) -> std::result::Result<Answer, Failure> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(500));
        count(&HUB_REQUESTS.requests);
        let url = format!("{}{API}/{}", self.addresses[i].base, req.path);
        let mut query = req.query.clone();
        if req.fresh {
            query.push(("fresh", format!("{:016x}", nonce())));
        }
        let token = self.token.read().clone();
        let response = if req.method == "POST" {
            let mut r = self.agent.post(&url);
            for (k, v) in &query {
                r = r.query(*k, v);
            }
            if let Some(t) = &token {
                r = r.header("Authorization", format!("Bearer {t}"));
            }
            r.config().timeout_global(Some(left)).build().send_empty()
        } else {
            let mut r = self.agent.get(&url);
            for (k, v) in &query {
                r = r.query(*k, v);
            }
            if let Some(t) = &token {
                r = r.header("Authorization", format!("Bearer {t}"));
            }
            if req.fresh {
                r = r.header(HEADER_FRESH, "1");
            }
            r.config().timeout_global(Some(left)).build().call()
        };
        let mut response = response.map_err(|e| Failure::Next(e.to_string()))?;
        let status = response.status().as_u16();
        let cap = if status < 300 { req.cap } else { ERROR_CAP };
        let body = response
            .body_mut()
            .with_config()
            .limit(cap)
            .read_to_vec()
            .map_err(|e| Failure::Next(format!("{} {}: body: {e}", req.method, req.path)))?;
        Ok(Answer {
            status,
            headers: response.headers().clone(),
            body,
        })
    }

    /// Whether an answer of address `i` is one, or a failure of the address.
    fn judge(&self, i: usize, a: Answer, req: &Req<'_>) -> std::result::Result<Answer, Failure> {
        let store = a.headers.get(HEADER_STORE).and_then(|v| v.to_str().ok());
        let message = || error_message(&a.body);
        if a.status >= 500 || a.status == 429 {
            return Err(Failure::Next(format!(
                "{} {}: {}",
                a.status,
                req.path,
                message()
            )));
        }
        if a.status == 403
            && a.headers
                .get("x-error-code")
                .is_some_and(|c| c == "StoreApiOff")
        {
            self.addresses[i].unusable.store(true, Ordering::Relaxed);
            return Err(Failure::Next(format!(
                "the store API is off: {}",
                message()
            )));
        }
        if a.status == 401 || a.status == 403 {
            let base = &self.addresses[i].base;
            let reason = if self.token.read().is_none() {
                format!("hub {base} asks for a node token: set --hub-token-file or HF_TOKEN")
            } else if token_refused(&a) {
                format!(
                    "hub {base} refused the token (--hub-token-file or HF_TOKEN): it is not \
                     one of the hub's node tokens (--node-token-file): {}",
                    message()
                )
            } else {
                format!("hub {base} refused: {}", message())
            };
            return Err(Failure::Stop(ObjectError::Backend {
                op: req.op,
                key: req.key.to_string(),
                reason,
            }));
        }
        match store {
            Some(s) if self.store_id.is_empty() || s == self.store_id => Ok(a),
            other => {
                self.addresses[i].unusable.store(true, Ordering::Relaxed);
                Err(Failure::Next(format!(
                    "answers for store {:?}, not {}",
                    other.unwrap_or("(none)"),
                    self.store_id
                )))
            }
        }
    }

    /// The address tried first now: the first not down.
    fn preferred(&self) -> usize {
        let now = Instant::now();
        (0..self.addresses.len())
            .find(|i| {
                let a = &self.addresses[*i];
                !a.unusable.load(Ordering::Relaxed) && a.down_until.lock().is_none_or(|t| t <= now)
            })
            .unwrap_or(0)
    }

    /// The address attempt `k` of asking again goes to, if any is left.
    fn again_address(&self, attempt: u32) -> Option<usize> {
        let n = self.addresses.len();
        let k = attempt.checked_sub(1)? as usize;
        (k < n).then(|| (self.preferred() + k) % n)
    }

    fn stat_from(&self, key: &str, start: usize, fresh: bool) -> Result<Option<WireMeta>> {
        let mut req = Req::get(format!("stat/{}", encode_key(key)), PAGE_CAP, "stat", key);
        req.fresh = fresh;
        let a = self.send(&req, start)?;
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
            let a = self.send(&req, start)?;
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
        let b = Arc::new(self.block_from(id, n, key, self.preferred(), false)?);
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
        let a = self.send(&req, start)?;
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
        let a = self.send(&req, self.preferred())?;
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
        self.get_from(key, self.preferred(), false)
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
            let a = expect_ok(self.send(&req, self.preferred())?, "list", prefix)?;
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
        Ok(self.stat_from(key, self.preferred(), false)?.map(meta))
    }
    fn now(&self) -> Result<SystemTime> {
        Err(self.read_only_error("judge a lease with the clock of", "the store"))
    }
    fn remove_temporary(&self, t: &crate::store::Temporary) -> Result<()> {
        Err(self.read_only_error("remove", &t.name))
    }
    fn location(&self) -> String {
        self.location.clone()
    }
    fn read_only(&self) -> bool {
        true
    }
    fn get_again(&self, key: &str, attempt: u32) -> Result<Option<Vec<u8>>> {
        let Some(start) = self.again_address(attempt) else {
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
        let Some(start) = self.again_address(attempt) else {
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

/// Whether the hub refused the token sent (none, or not a node token).
fn token_refused(a: &Answer) -> bool {
    let code = a.headers.get("x-error-code").and_then(|c| c.to_str().ok());
    a.status == 401 || (a.status == 403 && code == Some("NotANodeToken"))
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

impl<'a> Req<'a> {
    fn get(path: String, cap: u64, op: &'static str, key: &'a str) -> Req<'a> {
        Req {
            method: "GET",
            path,
            query: Vec::new(),
            cap,
            fresh: false,
            op,
            key,
        }
    }
}

fn expect_ok(a: Answer, op: &'static str, key: &str) -> Result<Answer> {
    if (200..300).contains(&a.status) {
        return Ok(a);
    }
    Err(ObjectError::Backend {
        op,
        key: key.to_string(),
        reason: format!("hub answered {}: {}", a.status, error_message(&a.body)),
    })
}

fn bad_answer(op: &'static str, key: &str, why: &str) -> ObjectError {
    ObjectError::Backend {
        op,
        key: key.to_string(),
        reason: format!("the hub's answer is malformed: {why}"),
    }
}

fn json<T: serde::de::DeserializeOwned>(body: &[u8], op: &'static str, key: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| bad_answer(op, key, &e.to_string()))
}

/// The `error` of a JSON error body, else its text (control characters dropped).
fn error_message(body: &[u8]) -> String {
    let text = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    text.chars().filter(|c| !c.is_control()).take(500).collect()
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

fn parse_addresses(location: &str) -> Result<Vec<Address>> {
    let mut out = Vec::new();
    for item in location.split(',').map(str::trim) {
        let base = item.trim_end_matches('/');
        let host = base
            .strip_prefix("http://")
            .or_else(|| base.strip_prefix("https://"))
            .unwrap_or("");
        if host.is_empty() || host.contains('/') || host.contains('?') || host.contains('@') {
            return Err(ObjectError::Invalid(format!(
                "--store {location}: {item:?} is not a hub address (http://HOST:PORT or \
                 https://HOST:PORT, comma-separated, no path)"
            )));
        }
        out.push(Address {
            base: base.to_string(),
            down_until: Mutex::new(None),
            unusable: AtomicBool::new(false),
            failures: std::sync::atomic::AtomicU32::new(0),
        });
    }
    Ok(out)
}

fn agent(opts: &HubOptions) -> Result<ureq::Agent> {
    let mut tls = ureq::tls::TlsConfig::builder();
    if let Some(path) = &opts.ca_bundle {
        let pem = std::fs::read(path).map_err(|e| ObjectError::io(path, e))?;
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(ObjectError::Invalid(format!(
                "{}: no PEM certificate in the CA bundle",
                path.display()
            )));
        }
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
    }
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .accept_encoding("identity")
        .user_agent(concat!("modelcas/", env!("CARGO_PKG_VERSION")))
        .timeout_connect(Some(Duration::from_secs(3)))
        .timeout_recv_response(Some(Duration::from_secs(15)))
        .timeout_per_read(Some(Duration::from_secs(20)))
        .tls_config(tls.build())
        .build();
    Ok(ureq::Agent::new_with_config(config))
}

/// A nonce for a fresh request (no two the same in a process, unpredictable across).
fn nonce() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    u64::from_le_bytes(
        blake3::hash(&[t.to_le_bytes(), n.to_le_bytes()].concat()).as_bytes()[..8]
            .try_into()
            .unwrap_or([0; 8]),
    )
}

/// `d` give or take a quarter, so that nodes do not come back in step.
fn jitter(d: Duration) -> Duration {
    let spread = (nonce() % 500) as f64 / 1000.0 + 0.75;
    d.mul_f64(spread)
}
