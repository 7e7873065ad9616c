//! JSON files, streamed: read through [`Files::reader`] under a counting cap into small
//! serde visitors (what a rule needs is kept, the rest skipped with `IgnoredAny`), then
//! `end()` (trailing characters are an error, as `json.loads` says). No file is buffered
//! whole: a 40 MB `tokenizer.json` costs a read buffer.

use std::io::{self, BufReader, Read};

use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, Visitor};
use serde::Deserializer;

use crate::files::{FileInfo, Files};
use crate::problems::Sink;
use crate::report::{CheckError, MAX_LOADER_JSON};

/// Visitor methods that take scalars (null, booleans, numbers) as `$value`.
macro_rules! skip_scalars {
    ($value:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// A visitor method that skips a string as `$value`.
macro_rules! skip_str {
    ($value:expr) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// A visitor method that skips an object as `$value`.
macro_rules! skip_map {
    ($value:expr) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok($value)
        }
    };
}

/// A visitor method that skips an array as `$value`.
macro_rules! skip_seq {
    ($value:expr) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

pub(crate) use {skip_map, skip_scalars, skip_seq, skip_str};

/// What reading one JSON file gave.
pub(crate) enum Json<T> {
    Read(T),
    /// Not read: over its cap, or a Git LFS pointer; the problem is already in the sink.
    Reported,
    /// Not JSON, or not of the shape the visitor wants.
    Invalid(serde_json::Error),
}

/// Reads `info` as a `T`, at most `cap` bytes. A syntax error in a file of at most
/// [`MAX_LOADER_JSON`] bytes is tried once more with Python's bare `NaN`, `Infinity` and
/// `-Infinity` read as `null` (`json.dump` writes them, `json.loads` and transformers read
/// them), except in `tokenizer.json`, which the tokenizers library reads with serde_json.
pub(crate) fn read<T: DeserializeOwned>(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
    cap: u64,
) -> Result<Json<T>, CheckError> {
    read_seed(files, sink, info, cap, PhantomData::<T>)
}

/// [`read`] through a seed (a visitor holding what it compares against); it is cloned
/// for a second try.
pub(crate) fn read_seed<S, V>(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
    cap: u64,
    seed: S,
) -> Result<Json<V>, CheckError>
where
    S: for<'de> DeserializeSeed<'de, Value = V> + Clone,
{
    if info.size > cap {
        sink.too_large(&info.path, info.size, cap);
        return Ok(Json::Reported);
    }
    if lfs_pointer(files, sink, info)? {
        return Ok(Json::Reported);
    }
    let reader = files
        .reader(&info.path)
        .map_err(CheckError::read(&info.path))?;
    let mut counted = Counted {
        inner: reader.take(cap + 1),
        n: 0,
    };
    let result = parse_seed(BufReader::new(&mut counted), seed.clone());
    if counted.n > cap {
        sink.too_large(&info.path, counted.n, cap);
        return Ok(Json::Reported);
    }
    match result {
        Ok(v) => Ok(Json::Read(v)),
        Err(e) if e.is_io() => Err(CheckError::Read {
            path: info.path.clone(),
            source: io::Error::from(e),
        }),
        Err(e) if e.is_syntax() && python_json(info) => match reparse(files, info, seed)? {
            Some(v) => Ok(Json::Read(v)),
            None => Ok(Json::Invalid(e)),
        },
        Err(e) => Ok(Json::Invalid(e)),
    }
}

/// The first bytes of a Git LFS pointer file.
const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1";

/// `file.lfs-pointer` when `info` is a Git LFS pointer (under 1,024 bytes, starting with
/// its version line) instead of the file: a clone or download without git-lfs. Returns
/// whether it was; the caller then reads no further.
pub(crate) fn lfs_pointer(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
) -> Result<bool, CheckError> {
    if info.size >= 1024 || info.size < LFS_POINTER.len() as u64 {
        return Ok(false);
    }
    let head = files
        .read_at(&info.path, 0, LFS_POINTER.len())
        .map_err(CheckError::read(&info.path))?;
    if head != LFS_POINTER {
        return Ok(false);
    }
    let message =
        "a Git LFS pointer file, not the file's content (downloaded or cloned without git-lfs?)";
    sink.error("file.lfs-pointer", &info.path, message.into());
    Ok(true)
}

/// Whether the file's loader is Python's `json` (all but `tokenizer.json`), and it is small
/// enough to be read again whole.
fn python_json(info: &FileInfo) -> bool {
    let name = info.path.rsplit('/').next().unwrap_or(&info.path);
    name != "tokenizer.json" && info.size <= MAX_LOADER_JSON
}

/// The file read again whole (at most [`MAX_LOADER_JSON`] bytes) and parsed with bare
/// `NaN`/`Infinity`/`-Infinity` as `null`; `None` when that fails too.
fn reparse<S, V>(files: &dyn Files, info: &FileInfo, seed: S) -> Result<Option<V>, CheckError>
where
    S: for<'de> DeserializeSeed<'de, Value = V>,
{
    let mut bytes = Vec::new();
    files
        .reader(&info.path)
        .and_then(|r| r.take(MAX_LOADER_JSON + 1).read_to_end(&mut bytes))
        .map_err(CheckError::read(&info.path))?;
    if bytes.len() as u64 > MAX_LOADER_JSON {
        return Ok(None);
    }
    Ok(parse_seed(&lenient(&bytes)[..], seed).ok())
}

/// `bytes` with each bare `NaN`, `Infinity` and `-Infinity` outside strings replaced by
/// `null`; strings (and their escapes) are copied as they are.
pub(crate) fn lenient(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let (mut i, mut in_string) = (0, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            out.push(b);
            if b == b'\\' {
                if let Some(&next) = bytes.get(i + 1) {
                    out.push(next);
                    i += 1;
                }
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        let token = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        if let Some(t) = token {
            out.extend_from_slice(b"null");
            i += t.len();
            continue;
        }
        in_string = b == b'"';
        out.push(b);
        i += 1;
    }
    out
}

/// One JSON value of type `T` and nothing after it but whitespace.
#[cfg(test)]
pub(crate) fn parse<T: DeserializeOwned, R: Read>(reader: R) -> Result<T, serde_json::Error> {
    parse_seed(reader, PhantomData::<T>)
}

/// [`parse`] through a seed.
fn parse_seed<S, V, R: Read>(reader: R, seed: S) -> Result<V, serde_json::Error>
where
    S: for<'de> DeserializeSeed<'de, Value = V>,
{
    let mut de = serde_json::Deserializer::from_reader(reader);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Counts the bytes read through it.
struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let got = self.inner.read(buf)?;
        self.n += got as u64;
        Ok(got)
    }
}

/// The type of a JSON value, the value itself skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    #[default]
    Absent,
    Null,
    Object,
    Array,
    String,
    Other,
}

impl<'de> de::Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    skip_map!(Kind::Object);
    skip_seq!(Kind::Array);
    skip_str!(Kind::String);

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }
}

/// A string if the value is one, else `None` (the value skipped).
pub(crate) struct MaybeStr(pub(crate) Option<String>);

impl<'de> de::Deserialize<'de> for MaybeStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MaybeStr, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeStr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MaybeStr, E> {
                Ok(MaybeStr(Some(s.to_string())))
            }
            skip_map!(MaybeStr(None));
            skip_seq!(MaybeStr(None));
            skip_scalars!(MaybeStr(None));
        }
        d.deserialize_any(V)
    }
}

/// Any JSON value, skipped: the well-formedness of a file nobody reads further.
pub(crate) type Any = IgnoredAny;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let k: Kind = parse(&b"{\"a\": [1, {\"b\": null}]}"[..]).unwrap();
        assert_eq!(k, Kind::Object);
        let k: Kind = parse(&b" [ ] "[..]).unwrap();
        assert_eq!(k, Kind::Array);
        assert!(parse::<Kind, _>(&b"{} x"[..]).is_err());
    }
}
