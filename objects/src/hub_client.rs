//! Talking to hubs: the addresses of a hub store, tried in order; a failing one passed
//! over; the node token, read again when a hub refuses it; each request's deadline; what
//! counts as an answer and what as a failure of the address (docs/format/hub-protocol.md,
//! "What a node must do"). [`crate::HubStore`] reads a store through a [`Client`].
//!
//! Addresses are tried in the order given; one that fails (connection, timeout, 5xx, 429,
//! a body cut short, another store) is marked down for [`DOWN_FOR`], doubled for each
//! failure in a row up to [`DOWN_MAX`], and the same request goes to the next at once, each
//! address holding it at most its share of the time left (a hub that accepts and never
//! answers); when all are down the request waits and goes round again until `retry_for`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Mutex, RwLock};
use ureq::http::HeaderMap;

use crate::error::{ObjectError, Result};
use crate::hub_wire::{StoreInfo, API, HEADER_FRESH, HEADER_STORE};
use crate::requests::HUB_REQUESTS;

/// How long an address that failed is passed over.
pub const DOWN_FOR: Duration = Duration::from_secs(10);
/// The longest an address is passed over after failures in a row.
pub const DOWN_MAX: Duration = Duration::from_secs(300);
/// The most bytes of an error's body that are read (for its message).
pub(crate) const ERROR_CAP: u64 = 16 << 10;
/// The most bytes of a listing page, a stat or the store's description.
pub(crate) const PAGE_CAP: u64 = 16 << 20;

/// Counts one in `c` (the process's hub request counts).
pub(crate) fn count(c: &AtomicU64) {
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
pub(crate) struct Req<'a> {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    /// Query pairs (encoded by the client).
    pub(crate) query: Vec<(&'a str, String)>,
    /// The most bytes of a successful body.
    pub(crate) cap: u64,
    /// Sent past every cache (`Modelcas-Fresh`, a nonce).
    pub(crate) fresh: bool,
    /// For errors: what was asked.
    pub(crate) op: &'static str,
    pub(crate) key: &'a str,
}

/// An answer: the status, headers and body, and the address that gave it.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

/// Why an address gave no answer.
enum Failure {
    /// Try the next address.
    Next(String),
    /// An answer that another address would give too: fail the request.
    Stop(ObjectError),
}

/// The hubs of one store, as a node reaches them.
pub(crate) struct Client {
    addresses: Vec<Address>,
    /// The addresses as given (`--store`).
    pub(crate) location: String,
    agent: ureq::Agent,
    opts: HubOptions,
    token: RwLock<Option<String>>,
    /// The store the hubs serve (32 hex digits), met at open.
    pub(crate) store_id: String,
}

impl Client {
    /// Connects to the hubs at `location` (`http://H1:P,http://H2:P`): asks the first that
    /// answers which store it serves, keeps to that store, and refuses addresses that
    /// answer for another.
    pub(crate) fn open(location: &str, opts: HubOptions) -> Result<Client> {
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
        let mut c = Client {
            addresses,
            location: location.to_string(),
            agent,
            opts,
            token: RwLock::new(token),
            store_id: String::new(),
        };
        let info = c.send(&Req::get("store".into(), PAGE_CAP, "open", ""), 0)?;
        let info = expect_ok(info, "open", "")?;
        let info: StoreInfo = json(&info.body, "open", "")?;
        info.check()
            .map_err(|e| ObjectError::Invalid(format!("{location}: {e}")))?;
        c.store_id = info.store_id;
        c.same_store_everywhere()?;
        Ok(c)
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

    /// Sends `req`, starting at address `start`, moving on as the module doc says.
    pub(crate) fn send(&self, req: &Req<'_>, start: usize) -> Result<Answer> {
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
        let (token, fresh) = (token.as_deref(), req.fresh);
        let response = if req.method == "POST" {
            dress(self.agent.post(&url), &query, token, fresh, left).send_empty()
        } else {
            dress(self.agent.get(&url), &query, token, fresh, left).call()
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
    pub(crate) fn preferred(&self) -> usize {
        let now = Instant::now();
        (0..self.addresses.len())
            .find(|i| {
                let a = &self.addresses[*i];
                !a.unusable.load(Ordering::Relaxed) && a.down_until.lock().is_none_or(|t| t <= now)
            })
            .unwrap_or(0)
    }

    /// The address attempt `k` of asking again goes to, if any is left.
    pub(crate) fn again_address(&self, attempt: u32) -> Option<usize> {
        let n = self.addresses.len();
        let k = attempt.checked_sub(1)? as usize;
        (k < n).then(|| (self.preferred() + k) % n)
    }
}

/// What every request carries, whatever its method: the query, the token, the header of
/// a fresh request, and the time it may take.
fn dress<B>(
    mut r: ureq::RequestBuilder<B>,
    query: &[(&str, String)],
    token: Option<&str>,
    fresh: bool,
    left: Duration,
) -> ureq::RequestBuilder<B> {
    for (k, v) in query {
        r = r.query(*k, v);
    }
    if let Some(t) = token {
        r = r.header("Authorization", format!("Bearer {t}"));
    }
    if fresh {
        r = r.header(HEADER_FRESH, "1");
    }
    r.config().timeout_global(Some(left)).build()
}

/// Whether the hub refused the token sent (none, or not a node token).
fn token_refused(a: &Answer) -> bool {
    let code = a.headers.get("x-error-code").and_then(|c| c.to_str().ok());
    a.status == 401 || (a.status == 403 && code == Some("NotANodeToken"))
}

impl<'a> Req<'a> {
    pub(crate) fn get(path: String, cap: u64, op: &'static str, key: &'a str) -> Req<'a> {
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

pub(crate) fn expect_ok(a: Answer, op: &'static str, key: &str) -> Result<Answer> {
    if (200..300).contains(&a.status) {
        return Ok(a);
    }
    Err(ObjectError::Backend {
        op,
        key: key.to_string(),
        reason: format!("hub answered {}: {}", a.status, error_message(&a.body)),
    })
}

pub(crate) fn bad_answer(op: &'static str, key: &str, why: &str) -> ObjectError {
    ObjectError::Backend {
        op,
        key: key.to_string(),
        reason: format!("the hub's answer is malformed: {why}"),
    }
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    op: &'static str,
    key: &str,
) -> Result<T> {
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
