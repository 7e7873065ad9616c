//! The test vectors of the format specification (docs/format/vectors.md, and a "Test
//! vectors" section of any page of docs/format/), executed: this test reads every such
//! section, takes every hex block and every annotated dump in it, and checks them against
//! this crate both ways: the value the annotations describe encodes to exactly the bytes
//! shown, and the bytes shown decode to that value. Editing a byte, an annotated value or
//! the code breaks it.
//!
//! A "Test vectors" section is a heading (any level) whose text starts with `Test vectors`,
//! up to the next heading of the same or a higher level; its subsections are the headings
//! one level below, each checked by the function its title names.
//!
//! The document's shapes, as parsed here:
//! * a label line ``` `KEY`, N bytes ``` (or `... these N bytes:` for a payload), then a
//!   fenced block of bare hex (the object), then a fenced annotated dump of the same bytes;
//! * a dump line is `OFFSET  HEX...  description`; a description `name TYPE = VALUE` is a
//!   number whose bytes are checked against the type (fixed-width little endian, or bincode's
//!   varint), `name [u8; N]` a byte array, `'text'` a string's bytes, `(continued)` more
//!   bytes of the line above, `magic XXXX` a magic, `checksum: ...` a BLAKE3-256.
//!
//! Every fenced block of those sections must be consumed by a check (the `modelcas ingest`
//! command line aside), so a vector the parser skips, or a page whose vectors have no
//! check, fails the test. A block whose fence has an info string (```` ```xet-merkle ````)
//! holds vectors in another shape: it counts as consumed only when a test file of the
//! workspace names that tag and that page (see [`claimed`]).

use std::collections::VecDeque;

use format::codec::{self, Kind};
use format::forward::{self, MovedFrame, MovedRecord};
use format::manifest::{self, ChunkRef, FileEntry, Manifest, Published, RefObject, StoreConfig};
use format::manifest::{PinObject, UsedObject};
use format::pack::{self, FooterEntry, PackBuilder, PackId};
use format::release::LabelObject;
use format::{frame, layout, ChunkId, CommitId, RepoId, Sha256};

/// The inputs of the vectors (the table at the top of "Test vectors"), in the pack's order.
fn inputs() -> Vec<Vec<u8>> {
    let a = b"hi\n".to_vec();
    let b = b"hello world, ".repeat(24);
    let c = (0..32u32)
        .flat_map(|i| [(i * 37 % 256) as u8, 0x3c])
        .collect::<Vec<u8>>();
    vec![b, c, a]
}

/// One line (or line and its continuations) of an annotated dump.
#[derive(Debug, Clone)]
struct Field {
    at: usize,
    bytes: Vec<u8>,
    desc: String,
}

impl Field {
    fn name(&self) -> &str {
        let first = self.desc.split_whitespace().next().unwrap_or("");
        first.trim_end_matches([':', ','])
    }

    /// The number after ` = `, if the description states one.
    fn value(&self) -> Option<u64> {
        let (_, rhs) = self.desc.split_once(" = ")?;
        rhs.split_whitespace().next()?.parse().ok()
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.len().is_multiple_of(2) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

/// A bincode 2 varint at the start of `b`: (value, bytes used).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let le = |n: usize| -> Option<u64> {
        let s = b.get(1..1 + n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(s);
        Some(u64::from_le_bytes(buf))
    };
    match *b.first()? {
        x @ 0..=250 => Some((u64::from(x), 1)),
        251 => Some((le(2)?, 3)),
        252 => Some((le(4)?, 5)),
        253 => Some((le(8)?, 9)),
        _ => None,
    }
}

/// Checks what a dump line says of its own bytes: a stated number, an array's length, a
/// string's text, a magic.
fn check_field(f: &Field) {
    let ctx = format!("dump line at {:04x} ({:?})", f.at, f.desc);
    if let (Some(value), Some((lhs, _))) = (f.value(), f.desc.split_once(" = ")) {
        let width = [("u8", 1), ("u16", 2), ("u32", 4), ("u64", 8)]
            .iter()
            .find(|(t, _)| lhs.split_whitespace().any(|w| w == *t))
            .map(|&(_, w)| w);
        let fixed = lhs.contains(" LE") || (width == Some(f.bytes.len()) && f.bytes.len() > 1);
        let got = if fixed {
            assert_eq!(Some(f.bytes.len()), width, "{ctx}: width");
            let mut buf = [0u8; 8];
            buf[..f.bytes.len()].copy_from_slice(&f.bytes);
            u64::from_le_bytes(buf)
        } else {
            let (v, used) = varint(&f.bytes).unwrap_or_else(|| panic!("{ctx}: not a varint"));
            assert_eq!(used, f.bytes.len(), "{ctx}: varint length");
            v
        };
        assert_eq!(got, value, "{ctx}: the bytes say {got}");
    }
    if let Some(n) = f.desc.split_once("[u8; ").map(|(_, r)| r) {
        let n: usize = n.split(']').next().unwrap().parse().unwrap();
        assert_eq!(f.bytes.len(), n, "{ctx}: array length");
    }
    if let Some(text) = f.desc.strip_prefix('\'') {
        let text = text
            .strip_suffix('\'')
            .unwrap_or_else(|| panic!("{ctx}: quote"));
        assert_eq!(f.bytes, text.as_bytes(), "{ctx}: text");
    }
    if let Some((_, m)) = f.desc.split_once("magic ") {
        let m = m.split_whitespace().next().unwrap().replace("\\0", "\0");
        assert_eq!(f.bytes, m.as_bytes(), "{ctx}: magic");
    }
}

/// Parses an annotated dump, checking that its offsets follow each other from `start`.
fn parse_dump(lines: &[String]) -> Vec<Field> {
    let mut fields: Vec<Field> = Vec::new();
    let mut next_at: Option<usize> = None;
    for line in lines {
        let (off, mut rest) = line.split_at(4);
        let at = usize::from_str_radix(off, 16).unwrap_or_else(|_| panic!("offset: {line:?}"));
        if let Some(n) = next_at {
            assert_eq!(at, n, "dump offsets do not follow each other at {line:?}");
        }
        let mut bytes = Vec::new();
        rest = rest.trim_start();
        while let Some(tok) = rest.split_whitespace().next().filter(|t| is_hex(t)) {
            bytes.extend(unhex(tok));
            rest = rest[tok.len()..].trim_start();
        }
        assert!(!bytes.is_empty(), "a dump line without bytes: {line:?}");
        next_at = Some(at + bytes.len());
        if rest == "(continued)" {
            fields
                .last_mut()
                .expect("continued what")
                .bytes
                .extend(bytes);
        } else {
            fields.push(Field {
                at,
                bytes,
                desc: rest.to_string(),
            });
        }
    }
    fields.iter().for_each(check_field);
    fields
}

/// A fenced block of the section, with the text line before it.
struct Block {
    label: String,
    /// The fence's info string (```` ```TAG ````), empty for none.
    tag: String,
    lines: Vec<String>,
}

/// What the section shows: an object (label, bytes, dump of those bytes) or a lone dump.
enum Item {
    Vector {
        label: String,
        raw: Vec<u8>,
        dump: Vec<Field>,
    },
    Dump(Vec<Field>),
    /// A block with an info string: vectors another test reads (see [`claimed`]).
    Tagged(String),
    Other(Block),
}

/// The directory of the specification's pages.
fn spec_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/format")
}

/// Whether a test other than this one reads the blocks tagged `tag` of `page`: a file
/// under `tests/` of the workspace or of one of its crates names both the tag (quoted) and
/// the page. Vectors in a format this test does not parse (the Xet hashes' generator
/// lines, say) are so executed by the test of the crate they belong to; a block tagged
/// with a name no test reads fails this test like an unchecked hex block.
fn claimed(page: &str, tag: &str) -> bool {
    let root = spec_dir().join("../..");
    let mut dirs = vec![root.join("tests")];
    for e in std::fs::read_dir(&root).unwrap() {
        dirs.push(e.unwrap().path().join("tests"));
    }
    let quoted = format!("\"{tag}\"");
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && !p.ends_with("spec_vectors.rs"))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .any(|text| text.contains(&quoted) && text.contains(page))
}

/// A heading outside fenced blocks: (level, text).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    let text = line.get(level..)?.strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, text))
}

/// Every "Test vectors" section of every page of docs/format/: (page and title, heading
/// level, the section's lines after its heading).
fn vector_sections() -> Vec<(String, usize, Vec<String>)> {
    let dir = spec_dir();
    let mut pages: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    let mut out = Vec::new();
    for page in pages {
        let doc = std::fs::read_to_string(&page).unwrap();
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        let (mut fenced, mut current): (bool, Option<(String, usize, Vec<String>)>) = (false, None);
        for line in doc.lines() {
            let h = if fenced { None } else { heading(line) };
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if let Some((level, text)) = h {
                if current.as_ref().is_some_and(|c| level <= c.1) {
                    out.extend(current.take());
                }
                if current.is_none() && text.starts_with("Test vectors") {
                    current = Some((format!("{name}: {text}"), level, Vec::new()));
                    continue;
                }
            }
            if let Some(c) = current.as_mut() {
                c.2.push(line.to_string());
            }
        }
        out.extend(current);
    }
    assert!(
        out.iter().any(|s| s.0.starts_with("vectors.md: ")),
        "no \"Test vectors\" section in docs/format/vectors.md"
    );
    out
}

/// The subsections of one "Test vectors" section (title, items), and how many fenced
/// blocks it has.
fn read_section(level: usize, lines: &[String]) -> (Vec<(String, VecDeque<Item>)>, usize) {
    let (mut subs, mut fences) = (vec![(String::new(), Vec::new())], 0usize);
    let (mut label, mut open): (String, Option<Block>) = (String::new(), None);
    for line in lines {
        if line.starts_with("```") {
            fences += 1;
            match open.take() {
                Some(b) => subs.last_mut().unwrap().1.push(b),
                None => {
                    open = Some(Block {
                        label: label.clone(),
                        tag: line.trim_start_matches('`').trim().to_string(),
                        lines: Vec::new(),
                    })
                }
            }
        } else if let Some(b) = open.as_mut() {
            b.lines.push(line.to_string());
        } else if let Some((l, t)) = heading(line) {
            assert_eq!(l, level + 1, "a heading two levels down: {line:?}");
            subs.push((t.to_string(), Vec::new()));
        } else if !line.trim().is_empty() {
            label = line.to_string();
        }
    }
    assert!(
        open.is_none() && fences.is_multiple_of(2),
        "an unclosed fence"
    );
    let subs = subs.into_iter().map(|(t, b)| (t, items(b))).collect();
    (subs, fences / 2)
}

fn is_dump(b: &Block) -> bool {
    b.lines
        .iter()
        .all(|l| l.len() > 6 && l[..4].bytes().all(|c| c.is_ascii_hexdigit()) && &l[4..6] == "  ")
}

fn items(blocks: Vec<Block>) -> VecDeque<Item> {
    let mut out = VecDeque::new();
    let mut it = blocks.into_iter().peekable();
    while let Some(b) = it.next() {
        if !b.tag.is_empty() {
            out.push_back(Item::Tagged(b.tag));
        } else if b.lines.iter().all(|l| is_hex(l)) {
            let raw = unhex(&b.lines.concat());
            let dump = it.next_if(is_dump).expect("a hex block without its dump");
            let dump = parse_dump(&dump.lines);
            let shown: Vec<u8> = dump.iter().flat_map(|f| f.bytes.clone()).collect();
            assert_eq!(dump[0].at, 0, "{}: the dump starts at 0", b.label);
            assert_eq!(hex::encode(&shown), hex::encode(&raw), "{}: dump", b.label);
            let n: usize = (b.label.split(" bytes").next().unwrap())
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no length in {:?}", b.label));
            assert_eq!(raw.len(), n, "{}: length", b.label);
            out.push_back(Item::Vector {
                label: b.label,
                raw,
                dump,
            });
        } else if is_dump(&b) {
            out.push_back(Item::Dump(parse_dump(&b.lines)));
        } else {
            out.push_back(Item::Other(b));
        }
    }
    out
}

/// The object key in a label: ``` `KEY`, N bytes ```.
fn key(label: &str) -> &str {
    label
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no key in {label:?}"))
}

fn take_vector(items: &mut VecDeque<Item>) -> (String, Vec<u8>, Vec<Field>) {
    match items.pop_front() {
        Some(Item::Vector { label, raw, dump }) => (label, raw, dump),
        _ => panic!("expected a hex block and its dump"),
    }
}

/// Reads the fields of a dump in order, each by the name the document gives it.
struct Cursor<'a> {
    fields: &'a [Field],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(fields: &'a [Field]) -> Self {
        Cursor { fields, i: 0 }
    }
    fn peek(&self) -> Option<&'a Field> {
        self.fields.get(self.i)
    }
    fn next(&mut self, name: &str) -> &'a Field {
        let f = self
            .peek()
            .unwrap_or_else(|| panic!("dump ends before {name}"));
        assert_eq!(f.name(), name, "field at {:04x}", f.at);
        self.i += 1;
        f
    }
    fn uint(&mut self, name: &str) -> u64 {
        let f = self.next(name);
        f.value()
            .unwrap_or_else(|| panic!("{name}: no value in {:?}", f.desc))
    }
    fn u32(&mut self, name: &str) -> u32 {
        u32::try_from(self.uint(name)).expect("a u32")
    }
    fn arr<const N: usize>(&mut self, name: &str) -> [u8; N] {
        let f = self.next(name);
        f.bytes.as_slice().try_into().expect("array length")
    }
    fn string(&mut self, name: &str) -> String {
        let n = self.uint(name) as usize;
        let f = self.fields.get(self.i).expect("the string's text");
        self.i += 1;
        let text = f.desc.trim_matches('\'').to_string();
        assert!(
            f.desc.starts_with('\'') && text.len() == n,
            "{name}: {:?}",
            f.desc
        );
        text
    }
    /// The envelope header: checks the magic, returns (version, flags).
    fn header(&mut self, magic_name: &str, magic: &[u8; 8]) -> (u16, u16) {
        assert_eq!(self.next(magic_name).bytes, magic);
        let version = u16::try_from(self.uint("version")).unwrap();
        (version, u16::try_from(self.uint("flags")).unwrap())
    }
    /// The envelope trailer: the BLAKE3-256 of the bytes from `start`.
    fn checksum(&mut self, start: usize, raw: &[u8]) {
        let f = self.next("checksum");
        assert_eq!(f.bytes, blake3::hash(&raw[start..f.at]).as_bytes());
    }
    fn done(&self) {
        assert_eq!(self.i, self.fields.len(), "fields left unchecked");
    }
}

/// A codec object both ways: `value` encodes to `raw`, `raw` decodes to `value`.
fn both_ways<T>(kind: Kind, value: &T, flags: u16, raw: &[u8])
where
    T: bincode::Encode + bincode::Decode<()> + PartialEq + std::fmt::Debug,
{
    assert_eq!(flags & !1, 0, "{kind:?}: unknown flags");
    let encoded = codec::encode(kind, value, flags & 1 != 0);
    assert_eq!(hex::encode(&encoded), hex::encode(raw), "{kind:?}: encoded");
    assert_eq!(
        &codec::decode::<T>(kind, raw).unwrap(),
        value,
        "{kind:?}: decoded"
    );
}

/// The payload of a codec-encoded value, uncompressed.
fn payload_of<T: bincode::Encode>(kind: Kind, value: &T) -> Vec<u8> {
    let b = codec::encode(kind, value, false);
    b[codec::HEADER_LEN..b.len() - codec::TRAILER_LEN].to_vec()
}

/// A compressed envelope's payload field: decompresses to the payload vector that follows.
fn compressed_payload(c: &mut Cursor<'_>, items: &mut VecDeque<Item>) -> (Vec<u8>, Vec<Field>) {
    let f = c.next("payload");
    let (label, plain, dump) = take_vector(items);
    assert!(label.contains("payload decompresses"), "{label:?}");
    let n: usize = f
        .desc
        .split('(')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(f.bytes.len(), n, "compressed payload length");
    assert_eq!(
        zstd::decode_all(&f.bytes[..]).unwrap(),
        plain,
        "decompressed"
    );
    (plain, dump)
}

fn check_config(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    assert_eq!(key(&label), layout::CONFIG_KEY);
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Config.magic());
    let cfg = StoreConfig {
        store_id: c.arr("store_id"),
        created_at: c.uint("created_at"),
        chunk_min: c.u32("chunk_min"),
        chunk_avg: c.u32("chunk_avg"),
        chunk_max: c.u32("chunk_max"),
        pack_target: c.u32("pack_target"),
    };
    c.checksum(0, &raw);
    c.done();
    assert_eq!(version, Kind::Config.version());
    both_ways(Kind::Config, &cfg, flags, &raw);
    1
}

fn check_ref(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let (repo, name) = (key(&label).strip_prefix("repos/").unwrap())
        .split_once("/refs/")
        .unwrap();
    let repo = RepoId::parse(repo).unwrap();
    assert_eq!(layout::ref_key(&repo, name), key(&label));
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Ref.magic());
    let r = RefObject {
        commit: CommitId(c.arr("commit")),
        updated_at: c.uint("updated_at"),
    };
    c.checksum(0, &raw);
    c.done();
    assert_eq!(version, Kind::Ref.version());
    both_ways(Kind::Ref, &r, flags, &raw);
    1
}

/// The key's repository and commit, `repos/<org>/<name>/<part>/<commit>`.
fn commit_key(label: &str, part: &str) -> (RepoId, CommitId) {
    let (repo, commit) = (key(label).strip_prefix("repos/").unwrap())
        .split_once(&format!("/{part}/"))
        .unwrap();
    (
        RepoId::parse(repo).unwrap(),
        CommitId::parse(commit).unwrap(),
    )
}

fn check_pin(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let (repo, commit) = commit_key(&label, "pins");
    assert_eq!(layout::pin_key(&repo, &commit), key(&label));
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Pin.magic());
    let pin = PinObject {
        commit: CommitId(c.arr("commit")),
        pinned_at: c.uint("pinned_at"),
    };
    c.checksum(0, &raw);
    c.done();
    assert_eq!(pin.commit, commit, "the payload repeats the key's commit");
    assert_eq!(version, Kind::Pin.version());
    both_ways(Kind::Pin, &pin, flags, &raw);
    1
}

fn check_used(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let (repo, commit) = commit_key(&label, "used");
    assert_eq!(layout::used_key(&repo, &commit), key(&label));
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Used.magic());
    let used = UsedObject {
        commit: CommitId(c.arr("commit")),
        used_at: c.uint("used_at"),
        by: c.string("by"),
    };
    c.checksum(0, &raw);
    c.done();
    assert_eq!(used.commit, commit, "the payload repeats the key's commit");
    assert_eq!(version, Kind::Used.version());
    both_ways(Kind::Used, &used, flags, &raw);
    1
}

fn check_label(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let k = key(&label);
    let (prefix, name) = k.rsplit_once('/').unwrap();
    let (repo, commit) = commit_key(&format!("`{prefix}`"), "labels");
    assert_eq!(layout::label_key(&repo, &commit, name), k);
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Label.magic());
    let l = LabelObject {
        commit: CommitId(c.arr("commit")),
        key: c.string("key"),
        value: c.string("value"),
        set_at: c.uint("set_at"),
        by: c.string("by"),
    };
    c.checksum(0, &raw);
    c.done();
    assert_eq!(
        (l.commit, l.key.as_str()),
        (commit, name),
        "the payload repeats the key"
    );
    assert!(l.check(&commit, name).is_ok());
    assert_eq!(version, Kind::Label.version());
    both_ways(Kind::Label, &l, flags, &raw);
    1
}

/// The frames of the pack dump: (offset, frame bytes), each header's fields checked.
fn pack_frames(c: &mut Cursor<'_>, raw: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut frames = Vec::new();
    while c.peek().map(|f| f.name()) == Some("frame") {
        let at = c.peek().unwrap().at;
        let _codec = c.uint("frame");
        let _flags = c.uint("flags");
        assert_eq!(c.uint("reserved"), 0);
        let _raw_len = c.uint("raw_len");
        let body_len = c.uint("body_len") as usize;
        let _aux = c.uint("aux");
        while c
            .peek()
            .is_some_and(|f| !matches!(f.name(), "frame" | "magic"))
        {
            c.i += 1;
        }
        let end = c.peek().expect("the footer").at;
        assert_eq!(
            end - at,
            frame::HEADER_LEN + body_len,
            "frame at {at}: body_len"
        );
        frames.push((u32::try_from(at).unwrap(), raw[at..end].to_vec()));
    }
    frames
}

fn check_pack(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let id = layout::parse_pack_key(key(&label)).expect("a pack key");
    let mut c = Cursor::new(&dump);
    assert_eq!(c.next("pack").bytes, pack::PACK_MAGIC);
    assert_eq!(c.uint("version"), u64::from(pack::PACK_VERSION));
    assert!(c.next("reserved").bytes.iter().all(|&b| b == 0));
    let frames = pack_frames(&mut c, &raw);
    let footer_at = c.peek().unwrap().at;
    let (_, flags) = c.header("magic", Kind::PackFooter.magic());
    assert_eq!(flags, 0);
    let entries: Vec<FooterEntry> = (0..c.uint("entries"))
        .map(|_| FooterEntry {
            id: ChunkId(c.arr("id")),
            offset: c.u32("offset"),
            frame_len: c.u32("frame_len"),
            raw_len: c.u32("raw_len"),
        })
        .collect();
    c.checksum(footer_at, &raw);
    let footer_len = c.uint("footer_len");
    assert_eq!(c.next("end").bytes, pack::PACK_END);
    c.done();

    // Encode: the chunks, framed and packed, are these bytes, this footer and this id.
    let chunks = inputs();
    assert_eq!(chunks.len(), frames.len(), "one frame per input");
    let mut b = PackBuilder::new();
    for (chunk, (at, bytes)) in chunks.iter().zip(&frames) {
        let mut f = Vec::new();
        frame::encode(chunk, &mut f);
        assert_eq!(hex::encode(&f), hex::encode(bytes), "frame at {at}");
        assert_eq!(b.add_frame(ChunkId::of(chunk), &f, chunk.len()), *at);
    }
    let (built, bytes, built_entries) = b.finish();
    assert_eq!(hex::encode(&bytes), hex::encode(&raw), "pack bytes");
    assert_eq!(built_entries, entries, "footer entries");
    assert_eq!(
        (built, layout::pack_key(&built)),
        (id, key(&label).to_string())
    );
    // Decode: the trailer, the footer and every frame give back the chunks.
    let size = raw.len() as u64;
    let trailer = &raw[raw.len() - pack::PACK_TRAILER_LEN..];
    assert_eq!(
        pack::decode_trailer("p", size, trailer).unwrap(),
        footer_len
    );
    let footer_bytes = &raw[footer_at..raw.len() - pack::PACK_TRAILER_LEN];
    let footer = pack::decode_footer("p", footer_at as u64, footer_bytes).unwrap();
    assert_eq!(footer.entries, entries);
    assert_eq!(PackId(*blake3::hash(&raw).as_bytes()), id);
    for ((chunk, (at, bytes)), e) in chunks.iter().zip(&frames).zip(&entries) {
        let decoded = frame::decode(bytes).unwrap();
        assert_eq!(&decoded, chunk, "frame at {at} decodes to its input");
        assert_eq!(ChunkId::of(&decoded), e.id, "frame at {at}: chunk id");
        assert_eq!((e.offset, e.frame_len as usize), (*at, bytes.len()));
        assert_eq!(e.raw_len as usize, decoded.len());
    }
    1
}

/// The version 1 manifest payload's fields, as a manifest (`published` is `None`).
fn manifest_fields(dump: &[Field]) -> Manifest {
    let mut c = Cursor::new(dump);
    let repo = format!("{}/{}", c.string("repo.org"), c.string("repo.name"));
    let mut m = Manifest {
        repo: RepoId::parse(&repo).unwrap(),
        commit: CommitId(c.arr("commit")),
        ingested_at: c.uint("ingested_at"),
        source: c.string("source"),
        packs: (0..c.uint("packs"))
            .map(|i| PackId(c.arr(&format!("packs[{i}]"))))
            .collect(),
        files: Vec::new(),
        published: None,
        xet_hashes: Vec::new(),
    };
    for i in 0..c.uint("files") {
        let path = c.string(&format!("files[{i}].path"));
        let (size, sha256) = (c.uint("size"), Sha256(c.arr("sha256")));
        let executable = match c.uint("executable") {
            0 => false,
            1 => true,
            x => panic!("bool {x}"),
        };
        let chunks = (0..c.uint("chunks"))
            .map(|j| ChunkRef {
                id: ChunkId(c.arr(&format!("chunks[{j}].id"))),
                pack: c.u32("pack"),
                offset: c.u32("offset"),
                frame_len: c.u32("frame_len"),
                raw_len: c.u32("raw_len"),
            })
            .collect();
        m.files.push(FileEntry {
            path,
            size,
            sha256,
            executable,
            chunks,
        });
    }
    c.done();
    m
}

fn check_manifest(items: &mut VecDeque<Item>) -> usize {
    let Some(Item::Dump(tail)) = items.pop_front() else {
        panic!("expected the dump of version 2's `published`");
    };
    let (label, raw, dump) = take_vector(items);
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Manifest.magic());
    assert_eq!(
        (version, flags),
        (1, 1),
        "the vector is a compressed version 1"
    );
    let (payload, payload_dump) = compressed_payload(&mut c, items);
    c.checksum(0, &raw);
    c.done();
    let m = manifest_fields(&payload_dump);
    assert_eq!(layout::manifest_key(&m.repo, &m.commit), key(&label));
    // Decode: the version 1 object reads as the described manifest.
    assert_eq!(manifest::decode(key(&label), &raw).unwrap(), m);
    // Encode: this build writes version 3, whose payload is version 1's, an Option tag
    // (version 2's `published`) and a Vec length (version 3's `xet_hashes`, docs/format/xet.md).
    let v3 = payload_of(Kind::Manifest, &m);
    assert_eq!(
        hex::encode(&v3[..v3.len() - 2]),
        hex::encode(&payload),
        "payload"
    );
    assert_eq!(v3[v3.len() - 2..], [0, 0], "published: None, no Xet hashes");

    // Version 2's `published`, at the payload offset the dump gives.
    let mut c = Cursor::new(&tail);
    assert_eq!(tail[0].at, payload.len(), "`published` follows `files`");
    assert_eq!(c.uint("published"), 1, "Some");
    let published = Published {
        store_ms: c.uint("store_ms"),
        seq: c.uint("seq"),
    };
    c.done();
    let m2 = Manifest {
        published: Some(published),
        ..m
    };
    let shown: Vec<u8> = payload
        .iter()
        .chain(tail.iter().flat_map(|f| &f.bytes))
        .copied()
        .collect();
    // Version 3 appends `xet_hashes` (empty: one 0 byte) to version 2's payload.
    let shown: Vec<u8> = shown.into_iter().chain([0]).collect();
    assert_eq!(
        hex::encode(payload_of(Kind::Manifest, &m2)),
        hex::encode(&shown)
    );
    assert_eq!(codec::decode_payload::<Manifest>(&shown).unwrap(), m2);
    let written = codec::encode(Kind::Manifest, &m2, true);
    assert_eq!(manifest::decode(key(&label), &written).unwrap(), m2);
    2
}

fn check_moved(items: &mut VecDeque<Item>) -> usize {
    let (label, raw, dump) = take_vector(items);
    let mut c = Cursor::new(&dump);
    let (version, flags) = c.header("magic", Kind::Moved.magic());
    assert_eq!(version, Kind::Moved.version());
    let (payload, payload_dump) = compressed_payload(&mut c, items);
    c.checksum(0, &raw);
    c.done();
    let mut c = Cursor::new(&payload_dump);
    let rec = MovedRecord {
        pack: PackId(c.arr("pack")),
        written_ms: c.uint("written_ms"),
        targets: (0..c.uint("targets"))
            .map(|i| PackId(c.arr(&format!("targets[{i}]"))))
            .collect(),
        frames: (0..c.uint("frames"))
            .map(|i| MovedFrame {
                offset: c.u32(&format!("frames[{i}].offset")),
                id: ChunkId(c.arr("id")),
                target: c.u32("target"),
                new_offset: c.u32("new_offset"),
                frame_len: c.u32("frame_len"),
            })
            .collect(),
    };
    c.done();
    assert_eq!(layout::moved_key(&rec.pack), key(&label));
    assert_eq!(
        hex::encode(payload_of(Kind::Moved, &rec)),
        hex::encode(&payload)
    );
    assert_eq!(flags, 1, "forwarding records are compressed");
    assert_eq!(
        hex::encode(forward::encode(&rec)),
        hex::encode(&raw),
        "encoded"
    );
    assert_eq!(forward::decode(key(&label), &raw).unwrap(), rec, "decoded");
    1
}

/// How many vectors the sections held when this test was written (config, ref, pack,
/// manifest, version 2's `published`, forwarding record, pin, last-use record): fewer
/// means one was lost.
const VECTORS: usize = 9;

/// How many vectors the sections hold, counted without the parser above: an object's
/// label line (`` `KEY`, N bytes ``) each, and each dump that starts past offset 0 (a
/// field added to an object shown whole).
fn vectors_present(sections: &[(String, usize, Vec<String>)]) -> usize {
    let mut n = 0;
    for (_, _, lines) in sections {
        n += lines
            .iter()
            .filter(|l| l.starts_with('`') && !l.starts_with("```") && l.contains(" bytes"))
            .count();
        let mut open = false;
        for w in lines.windows(2) {
            if w[0].starts_with("```") {
                open = !open;
                let off = w[1]
                    .get(..4)
                    .filter(|o| o.bytes().all(|b| b.is_ascii_hexdigit()));
                if open && off.is_some_and(|o| o != "0000") && w[1].get(4..6) == Some("  ") {
                    n += 1;
                }
            }
        }
    }
    n
}

#[test]
fn every_vector_of_the_format_document_matches_the_code() {
    let sections = vector_sections();
    let (mut checked, mut blocks, mut fences) = (0, 0, 0);
    for (section, level, lines) in &sections {
        let (subs, n) = read_section(*level, lines);
        fences += n;
        let page = section.split(':').next().unwrap();
        for (title, mut items) in subs {
            blocks += items
                .iter()
                .map(|i| match i {
                    Item::Vector { .. } => 2,
                    _ => 1,
                })
                .sum::<usize>();
            items.retain(|i| match i {
                Item::Tagged(tag) => {
                    let ok = claimed(page, tag);
                    assert!(ok, "{section}: no test reads the `{tag}` block of {page}");
                    false
                }
                _ => true,
            });
            checked += match title.split([' ', ':']).next().unwrap() {
                "" => match items.pop_front() {
                    None => 0,
                    Some(Item::Other(b)) if b.lines[0].starts_with("modelcas ingest") => 0,
                    _ => panic!("{section}: the introduction holds the ingest command line only"),
                },
                "Store" => check_config(&mut items),
                "Ref" => check_ref(&mut items),
                "Pack" => check_pack(&mut items),
                "Manifest" => check_manifest(&mut items),
                "Forwarding" => check_moved(&mut items),
                "Pin" => check_pin(&mut items),
                "Last-use" => check_used(&mut items),
                "Release" => check_label(&mut items),
                other => panic!("{section}: no check for the vectors of {other:?}: add one"),
            };
            assert!(
                items.is_empty(),
                "{section}, {title}: blocks left unchecked"
            );
        }
    }
    assert_eq!(blocks, fences, "every fenced block was read");
    let present = vectors_present(&sections);
    assert!(
        present >= VECTORS,
        "the document lost vectors: {present} < {VECTORS}"
    );
    assert!(
        checked >= present,
        "checked {checked} vectors, the document has {present}"
    );
    eprintln!("{checked} vectors checked, {fences} blocks");
}
