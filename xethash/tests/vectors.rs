//! The vectors of docs/format/xet.md, read from the document itself: file hashes (hf_xet's
//! `hash_files` on the same bytes), xet-core's chunk boundaries and its Merkle reference list.

use format::XetHash;
use xethash::{chunk_lengths, file_hash, file_hash_of_root, Hasher, Tree};

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/format/xet.md");
    std::fs::read_to_string(path).expect("docs/format/xet.md")
}

/// The lines of the fenced block tagged `tag`.
fn block(doc: &str, tag: &str) -> Vec<String> {
    let open = format!("```{tag}\n");
    let start = doc.find(&open).unwrap_or_else(|| panic!("no {tag} block")) + open.len();
    let len = doc[start..].find("```").expect("unclosed block");
    doc[start..start + len].lines().map(str::to_owned).collect()
}

fn splitmix64(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

fn generate(spec: &str, size: usize) -> Vec<u8> {
    let data = match spec.split_once(':') {
        None if spec == "empty" => Vec::new(),
        Some(("text", s)) => s.as_bytes().to_vec(),
        Some(("byte", b)) => vec![b.parse().unwrap(); size],
        Some(("splitmix64", seed)) => splitmix64(seed.parse().unwrap(), size),
        _ => panic!("unknown generator {spec}"),
    };
    assert_eq!(data.len(), size, "{spec}");
    data
}

#[test]
fn file_hashes_match_the_document() {
    let doc = doc();
    let lines = block(&doc, "xet-file-hashes");
    assert!(lines.len() >= 9);
    for line in lines {
        let mut words: Vec<&str> = line.rsplitn(3, ' ').collect();
        words.reverse();
        let [spec, size, want] = words[..] else {
            panic!("bad line {line}")
        };
        let data = generate(spec, size.parse().unwrap());
        assert_eq!(file_hash(&data).hex(), want, "{spec}");
        // Streamed in awkward pieces, the same hash.
        for piece in [1usize, 37, 8127, 65536] {
            if data.len() > 300_000 && piece < 8127 {
                continue;
            }
            let mut h = Hasher::new();
            data.chunks(piece).for_each(|p| h.update(p));
            assert_eq!(h.finalize().hex(), want, "{spec} in pieces of {piece}");
        }
        assert_eq!(XetHash::parse(want).unwrap().hex(), want);
    }
}

#[test]
fn chunk_boundaries_match_the_document() {
    let doc = doc();
    for line in block(&doc, "xet-chunk-boundaries") {
        let words: Vec<&str> = line.split(' ').collect();
        let data = generate(words[0], words[1].parse().unwrap());
        let want: Vec<usize> = words[2..].iter().map(|w| w.parse().unwrap()).collect();
        let mut ends = Vec::new();
        let mut at = 0;
        for len in chunk_lengths(&data) {
            at += len;
            ends.push(at);
        }
        assert_eq!(ends, want, "{}", words[0]);
    }
}

#[test]
fn merkle_vectors_match_the_document() {
    let doc = doc();
    let mut count = 0;
    let mut tree = Tree::default();
    let mut root = None;
    for line in block(&doc, "xet-merkle") {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["vector", _] => tree = Tree::default(),
            ["node", h, size] => tree.push(XetHash::parse(h).unwrap(), size.parse().unwrap()),
            ["root", want] => {
                root = std::mem::take(&mut tree).root();
                assert_eq!(root.unwrap_or_default().hex(), want, "vector {count}");
            }
            ["file", want] => {
                let file = root.map(|r| file_hash_of_root(&r)).unwrap_or_default();
                assert_eq!(file.hex(), want, "vector {count}");
                count += 1;
            }
            _ => panic!("bad line {line}"),
        }
    }
    assert_eq!(count, 18);
}

#[test]
fn hex_spelling_is_little_endian_words_and_parse_refuses_junk() {
    let mut b = [0u8; 32];
    b[0] = 1;
    b[15] = 0xab;
    let h = XetHash(b);
    let want = format!("{:016x}{:016x}{}", 1, 0xabu64 << 56, "0".repeat(32));
    assert_eq!(h.hex(), want);
    for bad in ["", "zz", &"0".repeat(63), &"g".repeat(64), &"0".repeat(65)] {
        assert!(XetHash::parse(bad).is_err(), "{bad}");
    }
}
