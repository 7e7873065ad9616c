//! `.safetensors` headers (§4.2): `N` and its caps, the header JSON through a map visitor
//! of our own (the tensor count capped while it reads), dtypes through the safetensors
//! crate's `Dtype`, our pass naming the first tensor at fault for each defect, then the
//! crate's `Metadata::new` and `8 + N + data_len == size` as the verdict. Costs the first
//! `min(size, 64 KiB)` bytes and, for a longer header, one read of exactly the rest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::Hasher;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;
use serde::de::{self, DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::files::{FileInfo, Files};
use crate::problems::{json_error, num, quote, Sink};
use crate::report::{CheckError, FIRST_READ, MAX_HEADER, MAX_TENSORS};

/// What the headers of a revision gave.
#[derive(Default)]
pub(crate) struct Headers {
    pub(crate) files: u32,
    pub(crate) tensors: u64,
    /// Tensor names of the files an index names, when their header was read whole, as
    /// sorted [`name_hash`]es: 8 bytes a name, however many shards and however long the
    /// names.
    pub(crate) names: BTreeMap<String, Vec<u64>>,
}

/// A tensor name's 64-bit hash (SipHash with fixed keys: the same in every run).
pub(crate) fn name_hash(name: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write(name.as_bytes());
    h.finish()
}

/// Checks every `.safetensors` file at any depth.
pub(crate) fn check_all(
    files: &dyn Files,
    sink: &mut Sink,
    named: &BTreeSet<String>,
) -> Result<Headers, CheckError> {
    let mut out = Headers::default();
    for info in files
        .list()
        .iter()
        .filter(|f| f.path.ends_with(".safetensors"))
    {
        out.files += 1;
        let header = check_file(files, sink, info, MAX_TENSORS)?;
        out.tensors += header.count;
        if let (true, Some(names)) = (named.contains(&info.path), header.names) {
            out.names.insert(info.path.clone(), names);
        }
    }
    Ok(out)
}

/// One file's header.
pub(crate) struct Header {
    pub(crate) count: u64,
    /// Sorted [`name_hash`]es of its tensors; `None` when the header was not read whole
    /// (refused, or over the tensor cap).
    pub(crate) names: Option<Vec<u64>>,
}

const NONE: Header = Header {
    count: 0,
    names: None,
};

/// Checks one file's header; `max_tensors` is [`MAX_TENSORS`] but in tests.
pub(crate) fn check_file(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
    max_tensors: usize,
) -> Result<Header, CheckError> {
    if crate::json::lfs_pointer(files, sink, info)? {
        return Ok(NONE);
    }
    let Some((n, bytes)) = read_header(files, sink, info)? else {
        return Ok(NONE);
    };
    let path = info.path.as_str();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        sink.error("safetensors.header", path, "header is not UTF-8".into());
        return Ok(NONE);
    };
    let parsed = match parse(text, max_tensors) {
        Ok(p) => p,
        Err(e) => {
            let what = if e.is_data() {
                "is not an object of tensor entries"
            } else {
                "is not valid JSON"
            };
            sink.error(
                "safetensors.header",
                path,
                format!("header {what}: {}", json_error(&e)),
            );
            return Ok(NONE);
        }
    };
    if parsed.count > max_tensors as u64 {
        let message = format!(
            "{} tensors, more than the check reads ({}): ranges not checked",
            num(parsed.count),
            num(max_tensors as u64)
        );
        sink.warning("safetensors.too-many", path, message);
        return Ok(Header {
            count: parsed.count,
            names: None,
        });
    }
    let count = parsed.count;
    let mut names: Vec<u64> = parsed.tensors.keys().map(|n| name_hash(n)).collect();
    names.sort_unstable();
    names.dedup();
    let data = info.size - 8 - n;
    judge(sink, path, parsed, data);
    Ok(Header {
        count,
        names: Some(names),
    })
}

/// `N` and the header bytes, or `None` with the problem in the sink.
fn read_header(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
) -> Result<Option<(u64, Vec<u8>)>, CheckError> {
    let path = info.path.as_str();
    if info.size < 8 {
        let message = format!(
            "{} bytes, too short for the 8-byte header length",
            num(info.size)
        );
        sink.error("safetensors.header-length", path, message);
        return Ok(None);
    }
    let first_len = usize::try_from(info.size)
        .unwrap_or(FIRST_READ)
        .min(FIRST_READ);
    let mut bytes = read_exact(files, path, 0, first_len)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[..8]);
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER {
        let message = format!(
            "header of {} bytes, more than safetensors reads ({})",
            num(n),
            num(MAX_HEADER)
        );
        sink.error("safetensors.header-length", path, message);
        return Ok(None);
    }
    if 8 + n > info.size {
        let message = format!(
            "header of {} bytes in a {}-byte file (truncated inside the header?)",
            num(n),
            num(info.size)
        );
        sink.error("safetensors.header-length", path, message);
        return Ok(None);
    }
    // n <= MAX_HEADER, so it fits a usize.
    let end = 8 + n as usize;
    if end > bytes.len() {
        let rest = read_exact(files, path, bytes.len() as u64, end - bytes.len())?;
        bytes.extend_from_slice(&rest);
    }
    bytes.truncate(end);
    bytes.drain(..8);
    Ok(Some((n, bytes)))
}

/// Exactly `len` bytes at `offset`: a shorter answer means the file is shorter than its
/// listed size, a read failure rather than a problem of the revision.
fn read_exact(
    files: &dyn Files,
    path: &str,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, CheckError> {
    let bytes = files
        .read_at(path, offset, len)
        .map_err(CheckError::read(path))?;
    if bytes.len() < len {
        let e = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "{} bytes at offset {} gave {}: shorter than listed",
                len,
                offset,
                bytes.len()
            ),
        );
        return Err(CheckError::read(path)(e));
    }
    Ok(bytes)
}

/// A tensor entry as written; the dtype kept when the crate does not know it.
#[derive(Deserialize)]
struct RawTensor {
    dtype: RawDtype,
    shape: Vec<usize>,
    #[serde(deserialize_with = "offsets")]
    data_offsets: (usize, usize),
}

/// `[begin, end]`, and nothing else: a list of another length says so.
fn offsets<'de, D: Deserializer<'de>>(d: D) -> Result<(usize, usize), D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = (usize, usize);

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("data_offsets [begin, end]")
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(usize, usize), A::Error> {
            let wrong = || de::Error::custom("data_offsets must be [begin, end]");
            let begin = seq.next_element::<usize>()?.ok_or_else(wrong)?;
            let end = seq.next_element::<usize>()?.ok_or_else(wrong)?;
            if seq.next_element::<IgnoredAny>()?.is_some() {
                return Err(wrong());
            }
            Ok((begin, end))
        }
    }
    d.deserialize_seq(V)
}

/// Whether an unknown dtype has the shape of one (`^[A-Z][A-Z0-9_]*$`): a newer dtype
/// (a warning), not a misspelt one (an error).
fn dtype_shaped(dtype: &str) -> bool {
    let mut bytes = dtype.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

enum RawDtype {
    Known(Dtype),
    Unknown(String),
}

impl<'de> Deserialize<'de> for RawDtype {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawDtype, D::Error> {
        // The value is tiny; a non-string form goes to the crate's own Deserialize as is.
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => {
                let de: de::value::StrDeserializer<'_, de::value::Error> =
                    s.as_str().into_deserializer();
                Ok(match Dtype::deserialize(de) {
                    Ok(dtype) => RawDtype::Known(dtype),
                    Err(_) => RawDtype::Unknown(s),
                })
            }
            other => Dtype::deserialize(other)
                .map(RawDtype::Known)
                .map_err(de::Error::custom),
        }
    }
}

/// A header as read: the crate's `__metadata__` and the tensors (a repeated name: the last
/// one, as the crate's `HashMap` keeps it).
struct Parsed {
    metadata: Option<HashMap<String, String>>,
    tensors: HashMap<String, RawTensor>,
    /// (tensor, dtype) of each entry with a dtype the crate does not know, in file order,
    /// a repeated name's earlier entries included (the crate refuses those too).
    unknown: Vec<(String, String)>,
    count: u64,
}

fn parse(text: &str, max_tensors: usize) -> Result<Parsed, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = HeaderSeed { max_tensors }.deserialize(&mut de)?;
    de.end()?;
    Ok(parsed)
}

struct HeaderSeed {
    max_tensors: usize,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed {
    type Value = Parsed;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut out = Parsed {
            metadata: None,
            tensors: HashMap::new(),
            unknown: Vec::new(),
            count: 0,
        };
        let mut seen_metadata = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "__metadata__" {
                if seen_metadata {
                    return Err(de::Error::duplicate_field("__metadata__"));
                }
                seen_metadata = true;
                out.metadata = map.next_value()?;
            } else if out.count < self.max_tensors as u64 {
                out.count += 1;
                let tensor: RawTensor = map.next_value()?;
                if let RawDtype::Unknown(d) = &tensor.dtype {
                    out.unknown.push((key.clone(), d.clone()));
                }
                if out.tensors.insert(key, tensor).is_some() {
                    out.count -= 1;
                }
            } else {
                out.count += 1;
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// Our pass over a parsed header, then the crate's verdict when the pass named nothing.
/// A tensor of an unknown dtype has its size unchecked, but its range counts; the crate's
/// verdict is skipped for such a file (it refuses every unknown dtype).
fn judge(sink: &mut Sink, path: &str, parsed: Parsed, data: u64) {
    let before = sink.count_for(path);
    for (name, d) in &parsed.unknown {
        if dtype_shaped(d) {
            let message = format!(
                "tensor {} has dtype {}, unknown to safetensors 0.7: its size is not checked",
                quote(name),
                quote(d)
            );
            sink.warning("safetensors.dtype", path, message);
        } else {
            let message = format!(
                "tensor {} has dtype {}, not a safetensors dtype (upper-case letters, digits and _): safe_open refuses the header",
                quote(name),
                quote(d)
            );
            sink.error("safetensors.dtype", path, message);
        }
    }
    let mut tensors: Vec<(String, RawTensor)> = parsed.tensors.into_iter().collect();
    tensors.sort_by(|a, b| (a.1.data_offsets, &a.0).cmp(&(b.1.data_offsets, &b.0)));
    let known: Vec<_> = tensors
        .iter()
        .filter_map(|(name, t)| match &t.dtype {
            RawDtype::Known(d) => Some((name.as_str(), *d, t)),
            RawDtype::Unknown(_) => None,
        })
        .collect();
    check_sizes(sink, path, &known);
    check_ranges(sink, path, &tensors, data);
    if !parsed.unknown.is_empty() || sink.count_for(path) > before {
        return;
    }
    let infos = known
        .into_iter()
        .map(|(name, dtype, t)| {
            let info = TensorInfo {
                dtype,
                shape: t.shape.clone(),
                data_offsets: t.data_offsets,
            };
            (name.to_string(), info)
        })
        .collect();
    let verdict = match Metadata::new(parsed.metadata, infos) {
        Ok(m) if m.data_len() as u64 == data => return,
        Ok(m) => format!(
            "{} data bytes described, {} in the file",
            num(m.data_len() as u64),
            num(data)
        ),
        Err(e) => e.to_string(),
    };
    sink.error(
        "safetensors.library",
        path,
        format!("safetensors refuses the header: {verdict}"),
    );
}

/// dtype × shape against each tensor's byte range: the first offender.
fn check_sizes(sink: &mut Sink, path: &str, known: &[(&str, Dtype, &RawTensor)]) {
    for (name, dtype, t) in known {
        let (begin, end) = t.data_offsets;
        if end < begin {
            continue;
        }
        let bits = t
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.bitsize()));
        let shape = t
            .shape
            .iter()
            .map(|&d| num(d as u64))
            .collect::<Vec<_>>()
            .join(", ");
        let message = match bits {
            None => format!("tensor {}: shape [{shape}] overflows", quote(name)),
            Some(bits) if !bits.is_multiple_of(8) => {
                format!(
                    "tensor {} is {dtype} [{shape}] = {} bits, not whole bytes",
                    quote(name),
                    num(bits as u64)
                )
            }
            Some(bits) if bits / 8 != end - begin => format!(
                "tensor {} is {dtype} [{shape}] = {} bytes, but data_offsets [{}, {}] hold {}",
                quote(name),
                num((bits / 8) as u64),
                num(begin as u64),
                num(end as u64),
                num((end - begin) as u64)
            ),
            Some(_) => continue,
        };
        sink.error("safetensors.size", path, message);
        return;
    }
}

/// Offsets (sorted by begin): reversed, overlapping, holes, and the data's length.
fn check_ranges(sink: &mut Sink, path: &str, tensors: &[(String, RawTensor)], data: u64) {
    let mut reversed = false;
    let (mut overlap, mut gap) = (false, false);
    let mut covered: (u64, Option<&str>) = (0, None);
    for (name, t) in tensors {
        let (begin, end) = (t.data_offsets.0 as u64, t.data_offsets.1 as u64);
        if end < begin {
            if !reversed {
                let message = format!(
                    "tensor {}: data_offsets [{}, {}] begin after they end",
                    quote(name),
                    num(begin),
                    num(end)
                );
                sink.error("safetensors.offsets", path, message);
                reversed = true;
            }
            continue;
        }
        if begin < covered.0 && !overlap {
            let other = covered.1.map(quote).unwrap_or_default();
            let message = format!(
                "tensors {other} and {} overlap (data bytes {}..{})",
                quote(name),
                num(begin),
                num(end.min(covered.0))
            );
            sink.error("safetensors.overlap", path, message);
            overlap = true;
        } else if begin > covered.0 && !gap {
            let message = format!(
                "data bytes {}..{} belong to no tensor (safe_open refuses a file with holes)",
                num(covered.0),
                num(begin)
            );
            sink.error("safetensors.gap", path, message);
            gap = true;
        }
        if end >= covered.0 {
            covered = (end, Some(name));
        }
    }
    check_length(sink, path, covered.0, data);
}

fn check_length(sink: &mut Sink, path: &str, need: u64, data: u64) {
    if need > data {
        let message = format!(
            "the header's tensors need {} data bytes, the file has {} after its header: {} bytes missing (truncated copy?)",
            num(need),
            num(data),
            num(need - data)
        );
        sink.error("safetensors.truncated", path, message);
    } else if need < data {
        let message = format!(
            "{} bytes after the last tensor (safe_open refuses: \"file not fully covered\")",
            num(data - need)
        );
        sink.error("safetensors.trailing", path, message);
    }
}
