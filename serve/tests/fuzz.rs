//! Property tests: the decoders, the router and the whole HTTP stack driven with arbitrary
//! input never panic and always answer well-formed.
//!
//! - decoders: arbitrary strings and bytes through path, range and header functions;
//! - router: arbitrary methods, paths (non-ASCII, `%`-escapes, CR/LF), `Range` and
//!   `Authorization` values against a small store; every reply has a sane status, headers
//!   without CR/LF, and a body of exactly the length announced with the right bytes;
//! - stack: arbitrary bytes, and requests built from arbitrary parts, written to one
//!   connection (an in-memory pipe through hyper); the answer is nothing or HTTP/1.x
//!   responses, and no handler panicked.
//!
//! CI runs [`CASES`] cases of each. The soak (`bench/serve_fuzz.sh N`) runs the same
//! properties `N` times: `SERVE_FUZZ_INPUTS=N cargo test --release -p modelcas-serve
//! --test fuzz -- --ignored soak --nocapture`.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use http::{HeaderMap, HeaderValue, Method};
use http_body_util_shim::collect;
use hubserve::body::Body;
use hubserve::decode;
use hubserve::hub::{Head, Hub};
use hubserve::Limits;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use store::ingest::{ingest, IngestOptions, NoProgress};
use store::source::{discover, DiscoverOptions};
use store::{ChunkParams, CreateOptions, Index, MemoryStore, RepoId, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Cases per property in a normal run.
const CASES: u32 = 2000;

const REPO: &str = "org/model";
const TOKEN: &str = "t0ken";

/// The files of the fixture revision: small and LFS-sized, nested, non-ASCII names.
fn files() -> Vec<(&'static str, Vec<u8>)> {
    let big: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    vec![
        ("config.json", b"{\"a\": 1}\n".to_vec()),
        ("model.safetensors", big.clone()),
        ("sub/dir/tokenizer.model", big[..70_000].to_vec()),
        ("données/modèle ☃ \"q\".bin", big[1000..90_000].to_vec()),
        ("naïve.txt", "é\r\nInjected: yes\n".as_bytes().to_vec()),
    ]
}

struct Fixture {
    hub: Arc<Hub>,
    /// Each file's path and bytes.
    files: Vec<(String, Vec<u8>)>,
    rt: tokio::runtime::Runtime,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for (p, data) in files() {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, data).unwrap();
        }
        let store = Store::open_or_create(
            Arc::new(MemoryStore::new()),
            CreateOptions {
                chunk: ChunkParams::tiny(),
                pack_target: 64 * 1024,
            },
        )
        .unwrap();
        let idx = tempfile::tempdir().unwrap();
        let index = Index::open(idx.path(), &store.config().store_id).unwrap();
        let opts = DiscoverOptions {
            repo: Some(RepoId::parse(REPO).unwrap()),
            refs: vec!["main".into()],
            ..Default::default()
        };
        let snaps = discover(dir.path(), &opts).unwrap().snapshots;
        ingest(
            &store,
            &index,
            &snaps,
            IngestOptions {
                threads: 2,
                ..Default::default()
            },
            &NoProgress,
        )
        .unwrap();
        let tokens: HashSet<String> = [TOKEN.to_string()].into();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Fixture {
            hub: Arc::new(Hub::new(
                store.clone(),
                Arc::new(read::cache::ChunkCache::new(store, 64 << 20, 2).unwrap()),
                Some(tokens),
            )),
            files: files()
                .into_iter()
                .map(|(p, d)| (p.to_string(), d))
                .collect(),
            rt,
        }
    })
}

/// Collecting a body without http-body-util: polls frames until the end.
mod http_body_util_shim {
    use std::future::poll_fn;
    use std::pin::Pin;

    use bytes::Bytes;
    use http_body::Body as _;
    use hubserve::body::Body;

    /// The body's bytes, or the error that cut it short.
    pub async fn collect(mut b: Body) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        loop {
            match poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await {
                None => return Ok(out),
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        out.extend_from_slice(&Bytes::from(d));
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
    }
}

/// Path segments: route words, file names, and arbitrary text with escapes.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "api",
            "models",
            "org",
            "model",
            "resolve",
            "tree",
            "revision",
            "refs",
            "main",
            "metrics",
            "config.json",
            "model.safetensors",
            "sub",
            "dir",
            "tokenizer.model",
            "na%C3%AFve.txt",
            "donn%C3%A9es",
            "mod%C3%A8le%20%E2%98%83%20%22q%22.bin",
            "%2F",
            "%0D%0A",
            "%aé",
            "%",
            "%ff",
            "%C3",
            "é",
            "\r\n",
            "..",
            "",
            "refs%2Fpr%2F1",
        ])
        .prop_map(String::from),
        any::<String>(),
        "[%a-fA-F0-9/\\\\\r\n .é]{0,12}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        // Shaped like the routes, with arbitrary parts.
        (
            segment(),
            segment(),
            segment(),
            prop::collection::vec(segment(), 0..4)
        )
            .prop_map(|(rev, a, b, rest)| {
                let mut p = format!("/org/model/resolve/{rev}/{a}");
                for s in [b].iter().chain(rest.iter()) {
                    p.push('/');
                    p.push_str(s);
                }
                p
            }),
        (segment(), prop::collection::vec(segment(), 0..3))
            .prop_map(|(rev, rest)| format!("/api/models/org/model/tree/{rev}/{}", rest.join("/"))),
        prop::collection::vec(segment(), 0..8).prop_map(|s| format!("/{}", s.join("/"))),
        any::<String>(),
    ]
}

fn range() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        (any::<u64>(), any::<u64>())
            .prop_map(|(a, b)| Some(format!("bytes={}-{}", a % 400_000, b % 400_000).into_bytes())),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Some(format!("bytes={a}-{b}").into_bytes())),
        any::<u64>().prop_map(|n| Some(format!("bytes=-{}", n % 400_000).into_bytes())),
        any::<u64>().prop_map(|n| Some(format!("bytes={n}-").into_bytes())),
        "[bytes=0-9, \\-]{0,20}".prop_map(|s| Some(s.into_bytes())),
        prop::collection::vec(any::<u8>(), 0..24).prop_map(Some),
        Just(Some(b"bytes=99999999999999999999999-".to_vec())),
    ]
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        4 => Just(Method::GET),
        2 => Just(Method::HEAD),
        1 => Just(Method::POST),
        1 => Just(Method::DELETE),
        1 => "[A-Z]{1,8}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap_or(Method::PUT)),
    ]
}

fn auth() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        3 => Just(Some(format!("Bearer {TOKEN}").into_bytes())),
        1 => Just(None),
        1 => prop::collection::vec(any::<u8>(), 0..20).prop_map(Some),
        1 => any::<String>().prop_map(|s| Some(format!("Bearer {s}").into_bytes())),
    ]
}

/// One routed request and everything checked about its reply.
fn check_route(
    method: &Method,
    path: &str,
    query: &str,
    range: Option<&[u8]>,
    auth: Option<&[u8]>,
) -> Result<(), TestCaseError> {
    let f = fixture();
    let mut headers = HeaderMap::new();
    for (name, v) in [("range", range), ("authorization", auth)] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(name, v);
        }
    }
    let head = Head {
        method,
        path,
        query,
        headers: &headers,
        client: "fuzz",
    };
    let reply = f.hub.route(&head);
    let status = reply.status.as_u16();
    prop_assert!((200..600).contains(&status), "status {status}");
    for (k, v) in &reply.headers {
        prop_assert!(
            !v.as_bytes()
                .iter()
                .any(|b| *b == b'\r' || *b == b'\n' || *b == 0),
            "{k}: {v:?}"
        );
    }
    let len = reply
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let is_stream = matches!(reply.body, Body::Stream { .. });
    let body = f.rt.block_on(collect(reply.body));
    let body = body.map_err(|e| TestCaseError::fail(format!("body failed: {e}")))?;
    if is_stream {
        prop_assert_eq!(Some(body.len() as u64), len);
        // The bytes are the file's, at the range announced.
        let (_, file) = path.rsplit_once("/resolve/").unwrap_or(("", ""));
        let (_, file) = file.split_once('/').unwrap_or(("", ""));
        let name: String = decode::segments(file).unwrap_or_default().join("/");
        let (_, data) =
            f.files.iter().find(|(p, _)| *p == name).ok_or_else(|| {
                TestCaseError::fail(format!("streamed {name:?}, not a fixture file"))
            })?;
        let from = reply
            .headers
            .get("content-range")
            .and_then(|v| {
                v.to_str()
                    .ok()?
                    .strip_prefix("bytes ")?
                    .split('-')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0);
        prop_assert!(
            data[from..from + body.len()] == body[..],
            "wrong bytes for {name}"
        );
    }
    Ok(())
}

/// Writes `input` to one connection through hyper and reads everything back.
fn check_stack(input: &[u8]) -> Result<(), TestCaseError> {
    let f = fixture();
    let limits = Limits {
        header_timeout: std::time::Duration::from_secs(5),
        ..Limits::default()
    };
    let out = f.rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let conn = tokio::spawn(hubserve::server::serve_connection(
            f.hub.clone(),
            limits.clone(),
            server,
            "fuzz".into(),
        ));
        // Write and read at once: a reply may come before the whole input went in.
        let (mut rd, mut wr) = tokio::io::split(&mut client);
        let write = async {
            let _ = wr.write_all(input).await;
            let _ = wr.shutdown().await;
        };
        let mut out = Vec::new();
        let read = rd.read_to_end(&mut out);
        let (_, r) = tokio::join!(write, read);
        let joined = conn.await;
        (out, r.is_ok(), joined.map_err(|e| e.is_panic()))
    });
    let (out, _, joined) = out;
    prop_assert!(joined.is_ok(), "connection task panicked");
    prop_assert_eq!(f.hub.metrics().panics(), 0);
    if !out.is_empty() {
        prop_assert!(
            out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
            "{:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        );
        let code = &out[9..out.len().min(12)];
        prop_assert!(
            code.len() == 3 && code.iter().all(u8::is_ascii_digit),
            "{:?}",
            code
        );
    }
    Ok(())
}

/// A request built from arbitrary parts, as raw bytes.
fn raw_request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just(b"GET".to_vec()),
            Just(b"HEAD".to_vec()),
            prop::collection::vec(any::<u8>(), 0..6)
        ],
        prop_oneof![
            path().prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..40)
        ],
        range(),
        auth(),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(m, target, range, auth, junk)| {
            let mut r = m;
            r.push(b' ');
            r.extend(target);
            r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n");
            for (n, v) in [(&b"Range: "[..], range), (b"Authorization: ", auth)] {
                if let Some(v) = v {
                    r.extend_from_slice(n);
                    r.extend(v);
                    r.extend_from_slice(b"\r\n");
                }
            }
            r.extend(junk);
            r.extend_from_slice(b"\r\n\r\n");
            r
        })
}

fn run(cases: u32) -> u64 {
    let mut n = 0u64;
    let cfg = |c| Config {
        cases: c,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(cfg(cases));
    runner
        .run(
            &(method(), path(), "[a-z=&]{0,20}", range(), auth()),
            |(m, p, q, r, a)| check_route(&m, &p, &q, r.as_deref(), a.as_deref()),
        )
        .unwrap();
    n += cases as u64;
    let mut runner = TestRunner::new(cfg(cases));
    runner
        .run(
            &prop_oneof![raw_request(), prop::collection::vec(any::<u8>(), 0..300)],
            |input| check_stack(&input),
        )
        .unwrap();
    n += cases as u64;
    let mut runner = TestRunner::new(cfg(cases));
    runner
        .run(
            &(
                any::<String>(),
                prop::collection::vec(any::<u8>(), 0..40),
                any::<u64>(),
            ),
            |(s, b, size)| check_decoders(&s, &b, size),
        )
        .unwrap();
    n + cases as u64
}

/// Decoders: total, and their outputs hold what they promise.
fn check_decoders(s: &str, bytes: &[u8], size: u64) -> Result<(), TestCaseError> {
    let _ = decode::segments(s);
    let _ = decode::recursive(s);
    let lossy = String::from_utf8_lossy(bytes);
    for h in [s, &lossy] {
        if let Some((a, b)) = decode::parse_range(h, size) {
            prop_assert!(a < b && b <= size);
        }
        let v = decode::header_text(h);
        prop_assert_eq!(decode::header_text_decode(v.to_str().unwrap()), h);
        let cd = decode::content_disposition(h);
        let cd = cd.to_str().unwrap();
        if let Some(star) = cd.split("filename*=UTF-8''").nth(1) {
            let name = h.rsplit('/').next().unwrap();
            prop_assert_eq!(decode::header_text_decode(star), name);
        }
    }
    Ok(())
}

#[test]
fn fuzz_router_stack_and_decoders() {
    assert_eq!(run(CASES), 3 * CASES as u64);
    assert_eq!(fixture().hub.metrics().panics(), 0);
}

/// Regression inputs from issue 11: each answered, nothing panicked.
#[test]
fn regression_issue_11_inputs() {
    let inputs: &[&[u8]] = &[
        "GET /org/model/resolve/main/é HTTP/1.1\r\n\r\n".as_bytes(),
        "GET /org/model/resolve/main/%aé HTTP/1.1\r\n\r\n".as_bytes(),
        b"GET /org/model/resolve/main/%C3%A9 HTTP/1.1\r\n\r\n",
        b"GET /org/model/resolve/main/x%0D%0AInjected:%20yes HTTP/1.1\r\n\r\n",
        b"GET /org/model/resolve/main/na%C3%AFve.txt HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n\r\n",
        b"GET /org/model/resolve/main/model.safetensors HTTP/1.1\r\nAuthorization: Bearer t0ken\r\nRange: bytes=18446744073709551615-\r\n\r\n",
    ];
    for i in inputs {
        check_stack(i).unwrap();
    }
    let auth = format!("Bearer {TOKEN}");
    check_route(
        &Method::GET,
        "/org/model/resolve/main/x%0D%0AInjected:%20yes",
        "",
        None,
        Some(auth.as_bytes()),
    )
    .unwrap();
    check_route(
        &Method::GET,
        "/org/model/resolve/main/%aé",
        "",
        None,
        Some(auth.as_bytes()),
    )
    .unwrap();
    check_route(
        &Method::GET,
        "/org/model/resolve/main/na%C3%AFve.txt",
        "",
        Some(b"bytes=1-"),
        Some(auth.as_bytes()),
    )
    .unwrap();
}

/// The soak: `SERVE_FUZZ_INPUTS` cases of each property (default a million in all).
#[test]
#[ignore]
fn soak() {
    let total: u64 = std::env::var("SERVE_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let per = total.div_ceil(3).max(1) as u32;
    let started = std::time::Instant::now();
    let n = run(per);
    let panics = fixture().hub.metrics().panics();
    println!(
        "serve fuzz: {n} inputs, {panics} handler panics, {:.0}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(panics, 0);
}
