//! The Xet side of serve, without I/O (docs/format/xet.md): read tokens and signed fetch
//! URLs (keyed BLAKE3 MACs, expiring), and the layout of a file as Xet sees it: its
//! modelcas chunks split into chunk records of at most 128 KiB, grouped into "xorbs" of
//! consecutive chunks, and the reconstruction (v1 or v2) of a byte range over them.
//!
//! [`crate::hub`] routes the requests (`hub/xet.rs`) and reads the bytes through the one
//! read path; everything here is a total function of its inputs.

use std::time::Duration;

use format::XetHash;
use repo::manifest::FileEntry;
use serde_json::{json, Value};

/// Largest chunk record payload Xet clients accept (uncompressed, scheme none).
pub const RECORD_MAX: u64 = 128 * 1024;
/// Header of a chunk record: version, compressed length (u24 LE), scheme, uncompressed
/// length (u24 LE).
pub const RECORD_HEADER: u64 = 8;
/// A xorb ends after the modelcas chunk that brings it to at least this many bytes: small
/// enough that a client fetches a file in many parallel ranges, large enough that the
/// reconstruction of a large file stays short.
pub const XORB_TARGET: u64 = 8 << 20;

/// When something issued at `now` (whole seconds, rounded down) with lifetime `ttl`
/// expires: at least `ttl` (and at least a second) from the true instant of issue, at most a
/// second more. `now + ttl` alone gave a token issued at x.9 s with a 1 s lifetime only a
/// tenth of a second (whatever has `exp <= now` is refused).
pub fn expiry(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(ttl.as_secs().max(1)).saturating_add(1)
}

/// Xet's settings: the MAC secret and lifetimes.
#[derive(Clone)]
pub struct XetOptions {
    /// Key of every token and URL signature (from `--xet-secret-file`, or made once and
    /// kept in the index directory by the binary).
    pub secret: [u8; 32],
    /// Lifetime of a read token.
    pub token_ttl: Duration,
    /// Lifetime of a fetch URL in a reconstruction.
    pub url_ttl: Duration,
    /// The CAS URL handed to clients (default: `http://` and the request's `Host`).
    pub cas_url: Option<String>,
}

impl std::fmt::Debug for XetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XetOptions")
            .field("token_ttl", &self.token_ttl)
            .field("url_ttl", &self.url_ttl)
            .field("cas_url", &self.cas_url)
            .finish_non_exhaustive()
    }
}

/// The MAC key from a secret file's contents (surrounding whitespace ignored; at least 32
/// bytes), or, without a file, 32 random bytes (tokens and URLs then die with the process).
pub fn load_secret(path: Option<&std::path::Path>) -> Result<[u8; 32], String> {
    use std::io::Read;
    let Some(path) = path else {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        return Ok(key);
    };
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    secret_from_text(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The MAC key from a secret's text (surrounding whitespace ignored; at least 32 bytes).
pub fn secret_from_text(bytes: &[u8]) -> Result<[u8; 32], String> {
    let text = bytes.trim_ascii();
    if text.len() < 32 {
        return Err(
            "a Xet secret needs at least 32 bytes (e.g. `head -c 32 /dev/urandom | base64`)".into(),
        );
    }
    Ok(blake3::derive_key("modelcas serve xet secret v1", text))
}

impl XetOptions {
    /// A MAC over `parts` (each ended by a NUL), hex.
    fn mac(&self, kind: &str, parts: &[&str]) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.secret);
        h.update(kind.as_bytes());
        for p in parts {
            h.update(&[0]);
            h.update(p.as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    /// Whether `mac` is the MAC of `parts` (compared in constant time).
    fn check(&self, kind: &str, parts: &[&str], mac: &str) -> bool {
        let want = self.mac(kind, parts);
        match (blake3::Hash::from_hex(&want), blake3::Hash::from_hex(mac)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// A read token for `repo@commit` expiring at `exp` (unix seconds):
    /// `{repo}:{commit}:{exp}:{mac}`.
    pub fn token(&self, repo: &str, commit: &str, exp: u64) -> String {
        let e = exp.to_string();
        format!(
            "{repo}:{commit}:{e}:{}",
            self.mac("token", &[repo, commit, &e])
        )
    }

    /// The repository and commit of a token, if it is one of ours and not expired at `now`.
    pub fn open_token(&self, token: &str, now: u64) -> Result<(String, String), Refusal> {
        let mut it = token.rsplitn(4, ':');
        let (Some(mac), Some(exp), Some(commit), Some(repo)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(Refusal::BadToken);
        };
        if !self.check("token", &[repo, commit, exp], mac) {
            return Err(Refusal::BadToken);
        }
        match exp.parse::<u64>() {
            Ok(e) if e > now => Ok((repo.to_string(), commit.to_string())),
            Ok(_) => Err(Refusal::Expired),
            Err(_) => Err(Refusal::BadToken),
        }
    }

    /// The path of a signed fetch URL for the xorb with id `xorb` of the file whose Xet
    /// hash is `file` in `repo@commit`, expiring at `exp`. The URL names content, never a
    /// place in the commit's file list: a commit replaced meanwhile (`rm --force` and an
    /// ingest, a partial pull completed) answers these bytes or nothing. The file hash is
    /// spelled Xet's way, the xorb id in plain byte order (as URLs always spelled it).
    pub fn xorb_path(
        &self,
        repo: &str,
        commit: &str,
        file: &XetHash,
        xorb: &XetHash,
        exp: u64,
    ) -> String {
        let (f, xs, e) = (file.hex(), hex::encode(xorb.0), exp.to_string());
        let mac = self.mac("xorb", &[repo, commit, &f, &xs, &e]);
        format!("/xet/xorbs/{repo}/{commit}/{f}/{xs}/{e}/{mac}")
    }

    /// Checks the parts of a fetch URL's path (after `/xet/xorbs/`): what it names.
    pub fn open_xorb_path(&self, parts: [&str; 7], now: u64) -> Result<XorbUrl, Refusal> {
        let [org, name, commit, f, x, e, mac] = parts;
        let repo = format!("{org}/{name}");
        if !self.check("xorb", &[&repo, commit, f, x, e], mac) {
            return Err(Refusal::BadSignature);
        }
        let exp: u64 = e.parse().map_err(|_| Refusal::BadSignature)?;
        if exp <= now {
            return Err(Refusal::Expired);
        }
        let mut xorb = XetHash::default();
        match (XetHash::parse(f), hex::decode_to_slice(x, &mut xorb.0)) {
            (Ok(file), Ok(())) => Ok(XorbUrl {
                repo,
                commit: commit.to_string(),
                file,
                xorb,
            }),
            _ => Err(Refusal::BadSignature),
        }
    }
}

/// What a signed fetch URL names: a xorb (by id) of a file (by Xet hash) of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XorbUrl {
    pub repo: String,
    pub commit: String,
    /// The file's Xet hash.
    pub file: XetHash,
    /// The xorb's id ([`Xorb::id`]).
    pub xorb: XetHash,
}

/// Why a token or a URL is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a token this server made (or altered).
    BadToken,
    /// A URL whose signature does not match (altered).
    BadSignature,
    /// Past its expiry.
    Expired,
}

impl Refusal {
    /// The message sent with the 401/403.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::BadToken => "not a valid Xet read token",
            Refusal::BadSignature => "fetch URL signature does not match",
            Refusal::Expired => "expired",
        }
    }
}

/// One xorb of a file: consecutive modelcas chunks `[first, end)`, bytes
/// `[file_start, file_end)` of the file, and its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xorb {
    pub first: usize,
    pub end: usize,
    pub file_start: u64,
    pub file_end: u64,
    /// BLAKE3 (derive-key "modelcas xet xorb v1") over the chunk ids and lengths: the same
    /// chunks give the same id, so an id always names the same bytes. A Xet client knows
    /// it as the xorb's hash.
    pub id: XetHash,
}

/// The xorbs of a file.
pub fn xorbs(f: &FileEntry) -> Vec<Xorb> {
    let mut out = Vec::new();
    let (mut first, mut start, mut at) = (0, 0u64, 0u64);
    let mut h = blake3::Hasher::new_derive_key("modelcas xet xorb v1");
    for (i, c) in f.chunks.iter().enumerate() {
        h.update(&c.id.0);
        h.update(&c.raw_len.to_le_bytes());
        at += u64::from(c.raw_len);
        if at - start >= XORB_TARGET || i + 1 == f.chunks.len() {
            out.push(Xorb {
                first,
                end: i + 1,
                file_start: start,
                file_end: at,
                id: XetHash(*h.finalize().as_bytes()),
            });
            h = blake3::Hasher::new_derive_key("modelcas xet xorb v1");
            (first, start) = (i + 1, at);
        }
    }
    out
}

/// The chunk records of a xorb's bytes `[0, len)` of file data: their payload lengths
/// (each modelcas chunk split into pieces of [`RECORD_MAX`], the last shorter).
pub fn records(f: &FileEntry, x: &Xorb) -> Vec<u64> {
    let mut out = Vec::new();
    for c in &f.chunks[x.first..x.end] {
        let mut left = u64::from(c.raw_len);
        while left > 0 {
            let n = left.min(RECORD_MAX);
            out.push(n);
            left -= n;
        }
    }
    out
}

/// The header of a chunk record of `len` payload bytes, scheme none.
pub fn record_header(len: u64) -> [u8; 8] {
    let l = (len as u32).to_le_bytes();
    [0, l[0], l[1], l[2], 0, l[0], l[1], l[2]]
}

/// A xorb's serialized length: every record's header and payload.
pub fn xorb_len(records: &[u64]) -> u64 {
    records.iter().map(|r| RECORD_HEADER + r).sum()
}

/// A part of a xorb range as sent: bytes of a record header, or file bytes `[from, to)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XorbPart {
    Header(Vec<u8>),
    File { from: u64, to: u64 },
}

/// Bytes `[from, to)` of the serialized xorb `x` (whose records are `recs`), as the parts
/// to send in order: each record it overlaps, header then payload, cut to the range. The
/// payload is named by its place in the file, read when it is sent.
pub fn xorb_range(x: &Xorb, recs: &[u64], from: u64, to: u64) -> Vec<XorbPart> {
    let mut parts = Vec::new();
    let (mut byte, mut pos) = (0u64, x.file_start);
    for &len in recs {
        let (h_end, end) = (byte + RECORD_HEADER, byte + RECORD_HEADER + len);
        if end > from && byte < to {
            let (a, b) = (from.max(byte), to.min(h_end));
            if a < b {
                let h = record_header(len);
                parts.push(XorbPart::Header(
                    h[(a - byte) as usize..(b - byte) as usize].to_vec(),
                ));
            }
            let (a, b) = (from.max(h_end), to.min(end));
            if a < b {
                parts.push(XorbPart::File {
                    from: pos + (a - h_end),
                    to: pos + (b - h_end),
                });
            }
        }
        byte = end;
        pos += len;
    }
    parts
}

/// The reconstruction API a client asked for: v1 (`fetch_info`, one URL per range) or v2
/// (`xorbs`, per xorb a list of URLs each with the ranges it covers). Both carry the same
/// terms and `offset_into_first_range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    V1,
    V2,
}

impl Api {
    /// The key of the fetch descriptors in this API's answer.
    pub fn fetch_key(self) -> &'static str {
        match self {
            Api::V1 => "fetch_info",
            Api::V2 => "xorbs",
        }
    }
}

/// The reconstruction of bytes `[from, to]` (inclusive, `to < size`) of file `f` in the
/// shape of `api`: `terms`, the fetch descriptors (URLs made by `url(xorb id)`) and
/// `offset_into_first_range`. Each term has one fetch of one range, listed under its
/// xorb's id (a file repeating a run of chunks names one xorb id in several terms).
pub fn reconstruction(
    f: &FileEntry,
    from: u64,
    to: u64,
    url: &dyn Fn(&XetHash) -> String,
    api: Api,
) -> Value {
    let mut terms = Vec::new();
    let mut fetch: serde_json::Map<String, Value> = serde_json::Map::new();
    let mut offset = 0;
    for x in &xorbs(f) {
        if x.file_end <= from || x.file_start > to {
            continue;
        }
        let recs = records(f, x);
        let (mut a, mut b) = (None, 0);
        let (mut pos, mut byte, mut a_byte, mut unpacked) = (x.file_start, 0u64, 0u64, 0u64);
        for (k, len) in recs.iter().enumerate() {
            let overlaps = pos + len > from && pos <= to;
            if overlaps {
                if a.is_none() {
                    a = Some(k);
                    a_byte = byte;
                    if terms.is_empty() {
                        offset = from.saturating_sub(pos);
                    }
                }
                b = k + 1;
                unpacked += len;
            }
            pos += len;
            byte += RECORD_HEADER + len;
        }
        let Some(a) = a else { continue };
        let b_byte: u64 = a_byte + recs[a..b].iter().map(|l| RECORD_HEADER + l).sum::<u64>();
        let hash = x.id.hex();
        let (chunks, bytes) = (
            json!({"start": a, "end": b}),
            json!({"start": a_byte, "end": b_byte - 1}),
        );
        terms.push(json!({"hash": hash, "range": chunks, "unpacked_length": unpacked}));
        let info = match api {
            Api::V1 => json!({"range": chunks, "url": url(&x.id), "url_range": bytes}),
            Api::V2 => json!({"url": url(&x.id), "ranges": [{"chunks": chunks, "bytes": bytes}]}),
        };
        match fetch.get_mut(&hash) {
            Some(Value::Array(v)) => v.push(info),
            _ => {
                fetch.insert(hash, Value::Array(vec![info]));
            }
        }
    }
    json!({"offset_into_first_range": offset, "terms": terms, api.fetch_key(): fetch})
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{ChunkId, Sha256};
    use repo::manifest::ChunkRef;

    fn file(lens: &[u32]) -> FileEntry {
        let chunks = lens
            .iter()
            .enumerate()
            .map(|(i, &raw_len)| ChunkRef {
                id: ChunkId([i as u8; 32]),
                pack: 0,
                offset: 16,
                frame_len: 16,
                raw_len,
            })
            .collect();
        FileEntry {
            path: "f".into(),
            size: lens.iter().map(|&l| u64::from(l)).sum(),
            sha256: Sha256([0; 32]),
            executable: false,
            chunks,
        }
    }

    fn opts() -> XetOptions {
        XetOptions {
            secret: [7; 32],
            token_ttl: Duration::from_secs(60),
            url_ttl: Duration::from_secs(60),
            cas_url: None,
        }
    }

    #[test]
    fn an_expiry_is_at_least_the_lifetime_from_any_instant_of_the_issuing_second() {
        for ttl in [0u64, 1, 2, 3600] {
            let exp = expiry(100, Duration::from_secs(ttl));
            // Issued at 100.999: still valid at 100.999 + max(ttl, 1) - 0.001, whose
            // whole second is below `exp`.
            assert!(
                100 + ttl.max(1) < exp && exp <= 101 + ttl.max(1),
                "{ttl}: {exp}"
            );
        }
        assert_eq!(expiry(u64::MAX - 1, Duration::from_secs(5)), u64::MAX);
    }

    #[test]
    fn tokens_open_only_unchanged_and_unexpired() {
        let o = opts();
        let t = o.token("org/m", "ab", 100);
        assert_eq!(o.open_token(&t, 99), Ok(("org/m".into(), "ab".into())));
        assert_eq!(o.open_token(&t, 100), Err(Refusal::Expired));
        for bad in [
            t.replace("org/m", "org/n"),
            t.replace(":100:", ":200:"),
            format!("{t}0"),
            String::new(),
            ":::".into(),
        ] {
            assert_eq!(o.open_token(&bad, 0), Err(Refusal::BadToken), "{bad}");
        }
        let other = XetOptions {
            secret: [8; 32],
            ..opts()
        };
        assert_eq!(other.open_token(&t, 0), Err(Refusal::BadToken));
        let file = XetHash(std::array::from_fn(|i| i as u8));
        let xorb = XetHash(std::array::from_fn(|i| 100 + i as u8));
        let p = o.xorb_path("org/m", "ab", &file, &xorb, 100);
        // The file hash in Xet's spelling, the xorb id in byte order.
        let spelled = format!("/{}/{}/100/", file.hex(), hex::encode(xorb.0));
        assert!(p.contains(&spelled), "{p}");
        let parts: Vec<&str> = p.trim_start_matches("/xet/xorbs/").split('/').collect();
        let parts: [&str; 7] = parts.try_into().unwrap();
        let named = XorbUrl {
            repo: "org/m".into(),
            commit: "ab".into(),
            file,
            xorb,
        };
        assert_eq!(o.open_xorb_path(parts, 5), Ok(named));
        assert_eq!(o.open_xorb_path(parts, 100), Err(Refusal::Expired));
        let other = hex::encode([5u8; 32]);
        for i in [3, 4] {
            let mut moved = parts;
            moved[i] = &other;
            assert_eq!(o.open_xorb_path(moved, 5), Err(Refusal::BadSignature));
        }
    }

    #[test]
    fn records_are_at_most_128k_and_reconstructions_cover_the_range() {
        let f = file(&[300_000, 5, 9 << 20, 131_072, 1]);
        let xs = xorbs(&f);
        assert_eq!(xs.len(), 2, "{xs:?}");
        assert_eq!(xs[0].end, 3);
        assert_eq!(xs[1].file_end, f.size);
        for x in &xs {
            let r = records(&f, x);
            assert!(r.iter().all(|&l| l > 0 && l <= RECORD_MAX));
            assert_eq!(r.iter().sum::<u64>(), x.file_end - x.file_start);
        }
        for (from, to) in [
            (0, f.size - 1),
            (299_999, 300_004),
            (f.size - 1, f.size - 1),
        ] {
            let v = reconstruction(&f, from, to, &|x| format!("u{}", x.0[0]), Api::V1);
            let terms = v["terms"].as_array().unwrap();
            let total: u64 = terms
                .iter()
                .map(|t| t["unpacked_length"].as_u64().unwrap())
                .sum();
            let skip = v["offset_into_first_range"].as_u64().unwrap();
            assert!(total >= skip + (to - from + 1), "{from}-{to}: {v}");
            for t in terms {
                // Each term names its xorb by its id in Xet's spelling.
                assert!(xs.iter().any(|x| t["hash"] == x.id.hex()), "{t}");
                let infos = v["fetch_info"][t["hash"].as_str().unwrap()]
                    .as_array()
                    .unwrap();
                assert!(infos.iter().any(|i| i["range"] == t["range"]));
            }
        }
        assert_eq!(record_header(131_072), [0, 0, 0, 2, 0, 0, 0, 2]);
    }

    /// The parts of any range of a xorb, headers and file bytes put together, are the
    /// serialized xorb's bytes of that range.
    #[test]
    fn a_xorb_range_is_its_records_bytes_cut_to_the_range() {
        let f = file(&[300_000, 5, 131_072, 1, 9 << 20]);
        let data: Vec<u8> = (0..f.size).map(|i| (i * 7 + i / 300) as u8).collect();
        for x in &xorbs(&f) {
            let recs = records(&f, x);
            let mut whole = Vec::new();
            let mut pos = x.file_start as usize;
            for &len in &recs {
                whole.extend_from_slice(&record_header(len));
                whole.extend_from_slice(&data[pos..pos + len as usize]);
                pos += len as usize;
            }
            let n = whole.len() as u64;
            for (from, to) in [
                (0, n),
                (0, 1),
                (3, 9),
                (7, 8),
                (8, 9),
                (n - 1, n),
                (131_075, 262_170),
                (5, n - 3),
            ] {
                let mut got = Vec::new();
                for p in xorb_range(x, &recs, from, to) {
                    match p {
                        XorbPart::Header(h) => got.extend_from_slice(&h),
                        XorbPart::File { from, to } => {
                            got.extend_from_slice(&data[from as usize..to as usize])
                        }
                    }
                }
                assert_eq!(
                    got,
                    &whole[from as usize..to as usize],
                    "{from}..{to} of {n}"
                );
            }
        }
    }

    /// v2 is v1 reshaped as xet-core reads it: the same terms and offset, and per xorb
    /// one URL whose `ranges` hold v1's `range` (as `chunks`) and `url_range` (as `bytes`).
    #[test]
    fn a_v2_reconstruction_is_the_v1_one_per_xorb() {
        let f = file(&[300_000, 5, 9 << 20, 131_072, 1, 8 << 20, 77]);
        let url = |x: &XetHash| format!("u{}", x.0[0]);
        for (from, to) in [
            (0, f.size - 1),
            (299_999, 9_500_000),
            (f.size - 2, f.size - 1),
        ] {
            let v1 = reconstruction(&f, from, to, &url, Api::V1);
            let v2 = reconstruction(&f, from, to, &url, Api::V2);
            assert_eq!(v1["terms"], v2["terms"]);
            assert_eq!(v1["offset_into_first_range"], v2["offset_into_first_range"]);
            assert!(v2.get("fetch_info").is_none() && v1.get("xorbs").is_none());
            let (f1, f2) = (
                v1["fetch_info"].as_object().unwrap(),
                v2["xorbs"].as_object().unwrap(),
            );
            assert_eq!(f1.len(), f2.len());
            assert!(!f1.is_empty());
            for (hash, infos) in f1 {
                let (i1, i2) = (&infos[0], &f2[hash][0]);
                assert_eq!(
                    (
                        infos.as_array().unwrap().len(),
                        f2[hash].as_array().unwrap().len()
                    ),
                    (1, 1)
                );
                assert_eq!(i1["url"], i2["url"]);
                assert_eq!(i2["ranges"].as_array().unwrap().len(), 1);
                assert_eq!(i1["range"], i2["ranges"][0]["chunks"]);
                assert_eq!(i1["url_range"], i2["ranges"][0]["bytes"]);
            }
        }
    }
}
