//! The pages for people: `GET /` and `/ui/...`, server-rendered HTML, read-only.
//!
//! | route | page |
//! |---|---|
//! | `GET /`, `/ui`, `/ui/repos` | the repositories: revisions, refs, sizes, dedup, last use |
//! | `GET /ui/repos/{org}/{name}[?unused-for=30d]` (or `{org}%2F{name}`) | one repository: every revision with its refs, pin, lock, times, size, what gc would do, how to download it |
//! | `GET /ui/mirror` | the upstream, allow-list, locks, recent pulls and upstream errors |
//! | `GET /ui/store` | store-wide figures, packs, gc's condemned list, the last gc and sync runs |
//! | `GET /ui/logout` | clears the page cookie |
//!
//! No script and no asset from elsewhere: one HTML document per page with its style
//! inline, a `Content-Security-Policy` that forbids scripts, frames and outside fetches
//! (so even a markup bug could not run code), every name escaped ([`html`]).
//!
//! **Auth** (with `--token-file`): the pages take the API's bearer token
//! (`Authorization: Bearer`), or the browser's own prompt (HTTP Basic: any user name, the
//! token as password), once; the answer then sets a cookie (`HttpOnly`,
//! `SameSite=Strict`) that holds a keyed hash of the token, not the token, and opens the
//! pages only, not the API. A token in the URL is never accepted (URLs end up in logs and
//! histories). The key is drawn at start: a restart asks again.
//!
//! The figures come from an [`Inventory`] the binary implements with the functions of
//! `modelcas ls`, `stats` and `gc --dry-run` ([`facts`]); the mirror's recent activity
//! is kept in memory by the mirror ([`crate::upstream::recent`]).

mod ctx;
pub mod facts;
pub mod html;
pub mod manifest_cache;
mod pages;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use format::RepoId;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use sha2::{Digest, Sha256};

use crate::body::Body;
use crate::reply::{Head, Reply};
pub use ctx::Ctx;
pub use facts::Inventory;

/// The cookie that keeps a browser signed in.
pub const COOKIE: &str = "modelcas_ui";
/// How long the cookie lasts (a restart of serve ends it sooner).
const COOKIE_MAX_AGE: Duration = Duration::from_secs(12 * 3600);
/// `--unused-for` shown when the page is not asked for another.
pub const DEFAULT_UNUSED_FOR: Duration = Duration::from_secs(30 * 86_400);

/// The pages' source of figures, as `ServeOptions` carries it.
#[derive(Clone)]
pub struct Pages(pub Arc<dyn Inventory>);

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pages")
    }
}

/// The pages' state: where the figures come from, and the cookie key.
pub struct Ui {
    inventory: Arc<dyn Inventory>,
    /// Key of the cookie's hash; `None` (no randomness) leaves the cookie off.
    key: Option<[u8; 32]>,
}

/// Whether a path (its decoded segments) is one of the pages'. Pages have at most four
/// segments, so a download from a repository of the org `ui`
/// (`/ui/NAME/resolve/REV/FILE`, five or more) stays the API's.
pub fn is_ui_path(segs: &[&str]) -> bool {
    matches!(segs, [""] | ["ui", ..]) && segs.len() <= 4
}

impl Ui {
    pub fn new(inventory: Arc<dyn Inventory>) -> Ui {
        let mut key = [0u8; 32];
        let key = match getrandom::getrandom(&mut key) {
            Ok(()) => Some(key),
            Err(e) => {
                tracing::warn!(
                    "no randomness for the page cookie ({e}): send the token on every request"
                );
                None
            }
        };
        Ui { inventory, key }
    }

    /// The reply to a request for a page.
    pub fn route(&self, ctx: &Ctx<'_>, req: &Head<'_>, segs: &[&str]) -> Reply {
        if *req.method != Method::GET && *req.method != Method::HEAD {
            let mut r = page_reply(
                StatusCode::METHOD_NOT_ALLOWED,
                pages::message("Not allowed", "These pages are read-only: GET only."),
            );
            r.headers
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        if segs == ["ui", "logout"] {
            return self.logout();
        }
        let cookie = match self.admit(ctx.tokens, req.headers) {
            Ok(c) => c,
            Err(()) => return unauthorized(),
        };
        let mut r = self.page(ctx, req, segs);
        if let Some(c) = cookie {
            r.headers.insert(header::SET_COOKIE, c);
        }
        r
    }

    fn page(&self, ctx: &Ctx<'_>, req: &Head<'_>, segs: &[&str]) -> Reply {
        let now = repo::clock::now_secs();
        let inv = self.inventory.as_ref();
        match segs {
            [""] | ["ui"] | ["ui", ""] | ["ui", "repos"] => {
                ok(pages::repos(inv.repos(), ctx.policy, now))
            }
            // The id as two segments (the pages' links), or as one with `%2F`.
            ["ui", "repos", org, name] => self.repo_page(ctx, req, &format!("{org}/{name}"), now),
            ["ui", "repos", id] if id.contains('/') => self.repo_page(ctx, req, id, now),
            ["ui", "mirror"] => ok(pages::mirror(ctx, now)),
            ["ui", "store"] => ok(pages::store(inv.store(), now)),
            _ => not_found("No such page."),
        }
    }

    /// One repository's page (`id` as asked; found as the store spells it).
    fn repo_page(&self, ctx: &Ctx<'_>, req: &Head<'_>, id: &str, now: u64) -> Reply {
        let inv = self.inventory.as_ref();
        let Ok(id) = RepoId::parse(id) else {
            return not_found(&format!("{id} is not a repository id"));
        };
        let id = (ctx.spelling)(id);
        let unused_for = match unused_for(req.query, inv.min_unused_for()) {
            Ok(d) => d,
            Err(e) => {
                return page_reply(StatusCode::BAD_REQUEST, pages::message("Bad request", &e))
            }
        };
        match inv.repo(&id, unused_for) {
            Ok(None) => not_found(&format!("The store has no repository {id}")),
            Ok(Some(d)) => ok(pages::repo(&d, ctx, unused_for, &host(req.headers), now)),
            Err(e) => page_reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                pages::message("Error", &e),
            ),
        }
    }

    /// Whether the request may see the pages, and the cookie to set (after a token).
    #[allow(
        clippy::result_unit_err,
        reason = "the only error is 'ask for credentials'"
    )]
    pub fn admit(
        &self,
        tokens: Option<&HashSet<String>>,
        headers: &HeaderMap,
    ) -> Result<Option<HeaderValue>, ()> {
        let Some(tokens) = tokens else {
            return Ok(None);
        };
        if let Some(token) = presented_token(headers) {
            if tokens.contains(&token) {
                return Ok(self.cookie_for(&token));
            }
            return Err(());
        }
        let valid = cookies(headers, COOKIE).any(|v| {
            tokens.iter().any(|t| {
                self.seal(t)
                    .is_some_and(|s| constant_eq(s.as_bytes(), v.as_bytes()))
            })
        });
        if valid {
            Ok(None)
        } else {
            Err(())
        }
    }

    /// The cookie's value for `token`: a keyed hash, hex.
    fn seal(&self, token: &str) -> Option<String> {
        let key = self.key?;
        let mut h = Sha256::new();
        h.update(key);
        h.update(token.as_bytes());
        Some(hex::encode(h.finalize()))
    }

    fn cookie_for(&self, token: &str) -> Option<HeaderValue> {
        let v = format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
            self.seal(token)?,
            COOKIE_MAX_AGE.as_secs()
        );
        HeaderValue::from_str(&v).ok()
    }

    /// Forgets the cookie (and asks the browser to forget its Basic credentials).
    fn logout(&self) -> Reply {
        let mut r = page_reply(
            StatusCode::UNAUTHORIZED,
            pages::message("Signed out", "The page cookie is cleared. Close the browser window to forget the token typed at the prompt."),
        );
        r.headers.insert(
            header::SET_COOKIE,
            HeaderValue::from_static("modelcas_ui=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        );
        r
    }
}

/// The token of `Authorization: Bearer T` or `Authorization: Basic base64(user:T)`.
fn presented_token(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    if let Some(t) = v.strip_prefix("Bearer ") {
        return Some(t.trim().to_string());
    }
    let b = v.strip_prefix("Basic ")?.trim();
    if b.len() > 8192 {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (_, token) = s.split_once(':')?;
    Some(token.to_string())
}

/// The values of cookie `name` in every `Cookie` header.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// Equality that takes as long whatever the first difference.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `unused-for=D` of the query, checked as gc checks it; the default when absent.
fn unused_for(query: &str, min: Duration) -> Result<Duration, String> {
    let Some(v) = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("unused-for="))
    else {
        return Ok(DEFAULT_UNUSED_FOR);
    };
    let v = percent_encoding::percent_decode_str(&v.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned();
    let d = humantime::parse_duration(v.trim())
        .map_err(|e| format!("unused-for={v:?}: {e} (examples: 30d, 12h, 2w)"))?;
    if d < min {
        return Err(format!(
            "unused-for={v:?} is shorter than {}, the shortest gc accepts",
            humantime::format_duration(min)
        ));
    }
    Ok(d)
}

/// The `Host` the browser used (for the `HF_ENDPOINT` line), escaped later like any text.
fn host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && h.len() <= 255)
        .unwrap_or("HOST:PORT")
        .to_string()
}

fn ok(body: String) -> Reply {
    page_reply(StatusCode::OK, body)
}

fn not_found(msg: &str) -> Reply {
    page_reply(StatusCode::NOT_FOUND, pages::message("Not found", msg))
}

fn unauthorized() -> Reply {
    let mut r = page_reply(StatusCode::UNAUTHORIZED, pages::message(
        "Sign in",
        "This hub needs a token. Your browser asks for it: any user name, the token as the password. \
         API clients send Authorization: Bearer <token>. A token in the URL is never accepted.",
    ));
    r.headers.insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"modelcas serve\", charset=\"UTF-8\""),
    );
    r
}

/// An HTML reply with the headers every page has.
fn page_reply(status: StatusCode, body: String) -> Reply {
    let mut headers = HeaderMap::new();
    let fixed = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (k, v) in fixed {
        headers.insert(k, HeaderValue::from_static(v));
    }
    Reply {
        status,
        headers,
        body: Body::full(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::recent::Recent;
    use crate::upstream::Policy;

    struct Empty;
    impl Inventory for Empty {
        fn repos(&self) -> facts::Result<Vec<facts::RepoSummary>> {
            Ok(vec![])
        }
        fn repo(&self, _: &RepoId, _: Duration) -> facts::Result<Option<facts::RepoDetail>> {
            Ok(None)
        }
        fn store(&self) -> facts::Result<facts::StoreFacts> {
            Err("none".into())
        }
        fn min_unused_for(&self) -> Duration {
            Duration::from_secs(3600)
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_token_once_then_the_cookie_opens_the_pages_and_nothing_else_does() {
        let ui = Ui::new(Arc::new(Empty));
        let tokens: HashSet<String> = ["s3cret".to_string()].into();
        let t = Some(&tokens);
        assert_eq!(ui.admit(None, &HeaderMap::new()), Ok(None));
        assert_eq!(ui.admit(t, &HeaderMap::new()), Err(()));
        assert_eq!(
            ui.admit(t, &headers(&[("authorization", "Bearer wrong")])),
            Err(())
        );
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("me:s3cret")
        );
        let cookie = ui
            .admit(t, &headers(&[("authorization", &basic)]))
            .unwrap()
            .unwrap();
        let c = cookie.to_str().unwrap();
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict"),
            "{c}"
        );
        assert!(
            !c.contains("s3cret"),
            "the cookie holds a hash, not the token: {c}"
        );
        let value = c.split(';').next().unwrap();
        assert_eq!(
            ui.admit(t, &headers(&[("cookie", &format!("a=b; {value}"))])),
            Ok(None)
        );
        let bearer = ui
            .admit(t, &headers(&[("authorization", "Bearer s3cret")]))
            .unwrap();
        assert_eq!(bearer.as_ref().map(|v| v.to_str().unwrap()), Some(c));
        // Another server's key, a changed byte, the token itself: refused.
        let other = Ui::new(Arc::new(Empty));
        assert_eq!(other.admit(t, &headers(&[("cookie", value)])), Err(()));
        let mut flipped = value.to_string();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        assert_eq!(ui.admit(t, &headers(&[("cookie", &flipped)])), Err(()));
        assert_eq!(
            ui.admit(t, &headers(&[("cookie", "modelcas_ui=s3cret")])),
            Err(())
        );
        let bad = ["Basic !!!", "Basic bm9jb2xvbg==", "Basic", "Token s3cret"];
        for b in bad {
            assert_eq!(
                ui.admit(t, &headers(&[("authorization", b)])),
                Err(()),
                "{b}"
            );
        }
    }

    #[test]
    fn unused_for_is_checked_as_gc_checks_it() {
        let min = Duration::from_secs(3600);
        assert_eq!(unused_for("", min), Ok(DEFAULT_UNUSED_FOR));
        assert_eq!(
            unused_for("x=1&unused-for=2d", min),
            Ok(Duration::from_secs(172_800))
        );
        assert_eq!(
            unused_for("unused-for=1d%2012h", min),
            Ok(Duration::from_secs(129_600))
        );
        assert!(unused_for("unused-for=5m", min)
            .unwrap_err()
            .contains("shorter"));
        assert!(unused_for("unused-for=%3Cb%3E", min)
            .unwrap_err()
            .contains("<b>"));
    }

    const EVIL: &str = "x\"'><script>alert(1)</script><img src=x onerror=y>";

    /// Names as an upstream could send them (the store refuses most; the pages must not
    /// rely on that).
    struct Hostile;
    impl Inventory for Hostile {
        fn repos(&self) -> facts::Result<Vec<facts::RepoSummary>> {
            Ok(vec![facts::RepoSummary {
                repo: format!("org/{EVIL}"),
                revisions: 1,
                refs: vec![EVIL.into()],
                failing_refs: 1,
                ..Default::default()
            }])
        }
        fn repo(&self, _: &RepoId, _: Duration) -> facts::Result<Option<facts::RepoDetail>> {
            let rev = facts::Revision {
                commit: format::CommitId([0xab; 20]),
                ingested_at: 1,
                files: 1,
                bytes: 1,
                refs: vec![EVIL.into()],
                pinned: true,
                last_used: None,
                policy: facts::Verdict::Keep(EVIL.into()),
                unused_for: facts::Verdict::Unknown(EVIL.into()),
                // Markup in a problem message and in a label (the store's rules refuse
                // most of it; the pages must not rely on that).
                check: facts::CheckFacts {
                    verdict: facts::ReleaseVerdict::Failed,
                    errors: 1,
                    warnings: 1,
                    problems: vec![format!("config.json: {EVIL}"), EVIL.into()],
                },
                labels: [(EVIL.to_string(), EVIL.to_string())].into(),
            };
            Ok(Some(facts::RepoDetail {
                repo: format!("org/{EVIL}"),
                revisions: vec![rev],
                policy: EVIL.into(),
            }))
        }
        fn store(&self) -> facts::Result<facts::StoreFacts> {
            Err(EVIL.into())
        }
        fn min_unused_for(&self) -> Duration {
            Duration::from_secs(3600)
        }
    }

    /// Every `<` opens one of the tags the pages write, and no attribute came from data.
    fn only_our_markup(page: &str) {
        if let Some(bad) = html::foreign_markup(page) {
            panic!("{bad} in {page}");
        }
    }

    #[test]
    fn hostile_names_stay_text_in_pages_attributes_and_links() {
        let ui = Ui::new(Arc::new(Hostile));
        let recent = Recent::default();
        recent.pull(&format!("org/{EVIL}"), EVIL, Err(EVIL.into()), 5);
        recent.failure("resolve", EVIL, EVIL);
        let policy = Policy {
            allow: vec![EVIL.into()],
            upstream_repos: vec![EVIL.into()],
            ..Policy::default()
        };
        let spelling = |r: RepoId| r;
        let ctx = Ctx {
            tokens: None,
            policy: &policy,
            mirror: Some((EVIL, Duration::from_secs(60), &recent)),
            spelling: &spelling,
        };
        let mut headers = headers(&[("host", "h\"><b>")]);
        headers.append(header::COOKIE, HeaderValue::from_static("modelcas_ui=<x>"));
        for path in [
            "/",
            "/ui/repos/org/m",
            "/ui/mirror",
            "/ui/store",
            "/ui/nope%3Cb%3E",
        ] {
            let segs = crate::decode::segments(path).unwrap();
            let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
            let head = Head {
                method: &Method::GET,
                path,
                query: "",
                headers: &headers,
                client: "test",
            };
            let r = ui.route(&ctx, &head, &segs);
            let Body::Full(Some(b)) = &r.body else {
                panic!("{path}: no body")
            };
            let page = String::from_utf8(b.to_vec()).unwrap();
            only_our_markup(&page);
            if path == "/ui/repos/org/m" {
                // The download line names the current client (issue 36), not the
                // deprecated `huggingface-cli`.
                assert!(page.contains("hf download org/"), "{page}");
                assert!(!page.contains("huggingface-cli"), "{page}");
                // The release check cell and the labels cell hold the data as text.
                assert!(page.contains("data-check=\"failed\""), "{page}");
                assert!(page.contains("<summary>FAILED (1)</summary>"), "{page}");
                assert!(
                    page.contains("<li>config.json: x&quot;&#39;&gt;&lt;script&gt;"),
                    "{page}"
                );
                assert!(
                    page.contains("x&quot;&#39;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=y&gt;=x&quot;"),
                    "{page}"
                );
            }
            if path == "/" {
                // The link's path has the name percent-encoded, the attribute escaped.
                assert!(
                    page.contains("href=\"/ui/repos/org/x%22%27%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E%3Cimg%20src%3Dx%20onerror%3Dy%3E\""),
                    "{page}"
                );
                assert!(
                    page.contains("data-repo=\"org/x&quot;&#39;&gt;&lt;script&gt;"),
                    "{page}"
                );
                assert!(page.contains("data-failing-refs=\"1\""), "{page}");
            }
        }
    }
}
