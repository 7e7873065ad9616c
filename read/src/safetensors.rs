//! The header of a `.safetensors` file, read for loader-aware read-ahead (issue 15).
//!
//! Layout (as written by the `safetensors` library):
//!
//! ```text
//! N (u64, little-endian) || header (N bytes of JSON) || data
//! ```
//!
//! The header maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`,
//! offsets relative to the start of `data` (byte `8 + N` of the file); the optional
//! `__metadata__` entry holds strings and is ignored here. Only the byte ranges matter to
//! the mount: a loader (vLLM's `safe_open` + `get_tensor`) touches exactly those ranges, in
//! the order of the tensor names, so the mount can fetch them before the page faults come.
//!
//! The header is input from the store, so nothing here trusts it: `N` is capped at
//! [`MAX_HEADER`] (the cap the `safetensors` library applies) and must fit in the file,
//! every range must lie inside the file, and ranges may not overlap. Any violation is a
//! [`HeaderError`]; the mount then reads the file with its ordinary read-ahead.

use std::fmt;

/// Largest header accepted: 100,000,000 bytes, the `safetensors` library's own limit
/// (`MAX_HEADER_SIZE`: `safe_open` refuses a longer header), as the release check's
/// `release::MAX_HEADER` (real headers are kilobytes to a few MiB).
pub const MAX_HEADER: u64 = 100_000_000;

/// Bytes before the JSON: its length as a little-endian u64.
pub const PREFIX: u64 = 8;

/// Why a header was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than 8 bytes, or a header longer than the file or than [`MAX_HEADER`].
    Length(String),
    /// Not a JSON object of tensor entries.
    Json(String),
    /// A tensor's `data_offsets` missing, reversed, past the end, or overlapping another.
    Range(String),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Length(s) => write!(f, "safetensors header length: {s}"),
            HeaderError::Json(s) => write!(f, "safetensors header: {s}"),
            HeaderError::Range(s) => write!(f, "safetensors tensor range: {s}"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// One tensor's bytes in the file (absolute offsets, `start <= end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// Tensor name.
    pub name: String,
    /// First byte in the file.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// The tensors of a file, sorted by offset; ranges are inside the file and do not overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Where the data section starts (`8 + N`).
    pub data_start: u64,
    /// Tensors in file order.
    pub tensors: Vec<Tensor>,
}

impl Layout {
    /// Indices into [`Layout::tensors`] in the order of the tensor names: the order in
    /// which `safe_open(...).keys()` lists them and vLLM loads them.
    pub fn name_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by(|&a, &b| self.tensors[a].name.cmp(&self.tensors[b].name));
        order
    }
}

/// The header length `N` from the first 8 bytes of a file of `file_size` bytes, checked
/// against [`MAX_HEADER`] and the file's size.
pub fn header_len(prefix: &[u8], file_size: u64) -> Result<u64, HeaderError> {
    let Some(bytes) = prefix.get(..PREFIX as usize) else {
        return Err(HeaderError::Length(format!(
            "{} bytes, the length needs 8",
            prefix.len()
        )));
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(bytes);
    let n = u64::from_le_bytes(le);
    if n > MAX_HEADER {
        return Err(HeaderError::Length(format!(
            "{n} bytes, more than the {MAX_HEADER}-byte limit"
        )));
    }
    if PREFIX + n > file_size {
        return Err(HeaderError::Length(format!(
            "{n} bytes in a {file_size}-byte file"
        )));
    }
    Ok(n)
}

/// Parses the JSON header (`json`, the `N` bytes after the length) of a file of
/// `file_size` bytes.
pub fn parse(json: &[u8], file_size: u64) -> Result<Layout, HeaderError> {
    let data_start = PREFIX + json.len() as u64;
    if data_start > file_size {
        return Err(HeaderError::Length(format!(
            "{}-byte header in a {file_size}-byte file",
            json.len()
        )));
    }
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| HeaderError::Json(e.to_string()))?;
    let mut tensors = Vec::with_capacity(map.len());
    for (name, entry) in map {
        if name == "__metadata__" {
            continue;
        }
        let (begin, end) = data_offsets(&name, &entry)?;
        let (start, end) = absolute(&name, begin, end, data_start, file_size)?;
        tensors.push(Tensor { name, start, end });
    }
    tensors.sort_by_key(|t| (t.start, t.end));
    check_disjoint(&tensors)?;
    Ok(Layout {
        data_start,
        tensors,
    })
}

/// `[begin, end]` of one entry.
fn data_offsets(name: &str, entry: &serde_json::Value) -> Result<(u64, u64), HeaderError> {
    let offsets = entry
        .get("data_offsets")
        .and_then(|v| v.as_array())
        .ok_or_else(|| HeaderError::Json(format!("{name:?}: no data_offsets array")))?;
    match offsets.as_slice() {
        [a, b] => match (a.as_u64(), b.as_u64()) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(HeaderError::Json(format!(
                "{name:?}: data_offsets are not unsigned integers"
            ))),
        },
        _ => Err(HeaderError::Json(format!(
            "{name:?}: data_offsets has {} values, not 2",
            offsets.len()
        ))),
    }
}

/// Relative `[begin, end)` to absolute offsets, checked to be ordered and inside the file.
fn absolute(
    name: &str,
    begin: u64,
    end: u64,
    data_start: u64,
    file_size: u64,
) -> Result<(u64, u64), HeaderError> {
    if begin > end {
        return Err(HeaderError::Range(format!(
            "{name:?}: begins at {begin}, after its end {end}"
        )));
    }
    match data_start.checked_add(end) {
        Some(e) if e <= file_size => Ok((data_start + begin, e)),
        _ => Err(HeaderError::Range(format!(
            "{name:?}: ends at data byte {end}, past the end of a {file_size}-byte file"
        ))),
    }
}

/// Refuses overlapping ranges (`tensors` sorted by start).
fn check_disjoint(tensors: &[Tensor]) -> Result<(), HeaderError> {
    for w in tensors.windows(2) {
        if w[1].start < w[0].end {
            return Err(HeaderError::Range(format!(
                "{:?} and {:?} overlap",
                w[0].name, w[1].name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A safetensors file's first bytes: length, header, and `data_len` bytes of data.
    pub(crate) fn file(entries: &[(&str, u64, u64)], data_len: usize) -> Vec<u8> {
        let mut h = serde_json::Map::new();
        for (name, a, b) in entries {
            h.insert(
                name.to_string(),
                serde_json::json!({"dtype": "U8", "shape": [b - a], "data_offsets": [a, b]}),
            );
        }
        h.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let json = serde_json::to_vec(&h).unwrap();
        let mut out = (json.len() as u64).to_le_bytes().to_vec();
        out.extend(json);
        out.extend(vec![7u8; data_len]);
        out
    }

    fn parse_file(f: &[u8]) -> Result<Layout, HeaderError> {
        let n = header_len(f, f.len() as u64)?;
        parse(&f[8..8 + n as usize], f.len() as u64)
    }

    #[test]
    fn reads_ranges_in_file_order_and_names_in_name_order() {
        let f = file(&[("b", 0, 10), ("a", 10, 30), ("c", 30, 30)], 30);
        let l = parse_file(&f).unwrap();
        let base = l.data_start;
        assert_eq!(base, f.len() as u64 - 30);
        let got: Vec<(&str, u64, u64)> = l
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.start - base, t.end - base))
            .collect();
        assert_eq!(got, [("b", 0, 10), ("a", 10, 30), ("c", 30, 30)]);
        let names: Vec<&str> = l
            .name_order()
            .into_iter()
            .map(|i| l.tensors[i].name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn refuses_bad_lengths() {
        assert!(matches!(
            header_len(&[1, 2, 3], 100),
            Err(HeaderError::Length(_))
        ));
        let huge = (MAX_HEADER + 1).to_le_bytes();
        assert!(matches!(
            header_len(&huge, u64::MAX),
            Err(HeaderError::Length(_))
        ));
        let past = 100u64.to_le_bytes();
        assert!(matches!(
            header_len(&past, 107),
            Err(HeaderError::Length(_))
        ));
        assert_eq!(header_len(&past, 108), Ok(100));
        assert!(header_len(&u64::MAX.to_le_bytes(), u64::MAX).is_err());
    }

    #[test]
    fn refuses_bad_ranges_and_bad_json() {
        let past = file(&[("a", 0, 11)], 10);
        assert!(matches!(parse_file(&past), Err(HeaderError::Range(_))));
        let reversed = file(&[("a", 5, 2)], 10);
        assert!(matches!(parse_file(&reversed), Err(HeaderError::Range(_))));
        let overlap = file(&[("a", 0, 6), ("b", 5, 10)], 10);
        assert!(matches!(parse_file(&overlap), Err(HeaderError::Range(_))));
        let huge = file(&[("a", 0, u64::MAX)], 10);
        assert!(matches!(parse_file(&huge), Err(HeaderError::Range(_))));
        for bad in [
            &b"[1,2]"[..],
            b"{\"a\":{}}",
            b"{\"a\":{\"data_offsets\":[1]}}",
            b"{\"a\":{\"data_offsets\":[-1,2]}}",
            b"{\"a\":{\"data_offsets\":[\"0\",2]}}",
            b"{\"a\":",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(parse(bad, 1000), Err(HeaderError::Json(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A header longer than the file.
        assert!(parse(b"{}", 5).is_err());
        assert_eq!(parse(b"{}", 10).unwrap().tensors, []);
    }

    /// Accepted layouts: every range inside the file, sorted, disjoint.
    fn assert_sound(l: &Layout, size: u64) {
        assert!(l.data_start <= size);
        for t in &l.tensors {
            assert!(
                l.data_start <= t.start && t.start <= t.end && t.end <= size,
                "{t:?}"
            );
        }
        for w in l.tensors.windows(2) {
            assert!(w[0].end <= w[1].start, "{w:?}");
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(n) = header_len(&bytes, bytes.len() as u64) {
                if let Ok(l) = parse(&bytes[8..8 + n as usize], bytes.len() as u64) {
                    assert_sound(&l, bytes.len() as u64);
                }
            }
        }

        #[test]
        fn mutated_headers_never_panic_and_accepted_ones_are_sound(
            sizes in proptest::collection::vec(0u64..50, 1..8),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut at = 0;
            let names: Vec<String> = (0..sizes.len()).map(|i| format!("t{i}")).collect();
            let entries: Vec<(&str, u64, u64)> = sizes
                .iter()
                .zip(&names)
                .map(|(s, n)| { at += s; (n.as_str(), at - s, at) })
                .collect();
            let mut f = file(&entries, at as usize);
            // Unmutated, it parses with exactly these ranges.
            let clean = parse_file(&f).unwrap();
            assert_eq!(clean.tensors.len(), sizes.len());
            assert_sound(&clean, f.len() as u64);
            for (i, b) in &flips {
                let i = i.index(f.len());
                f[i] = *b;
            }
            if truncate {
                f.truncate(cut.index(f.len() + 1));
            }
            if let Ok(l) = parse_file(&f) {
                assert_sound(&l, f.len() as u64);
            }
        }
    }
}
