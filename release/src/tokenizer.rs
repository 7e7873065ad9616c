//! Tokenizer files (§3.2 `tokenizer.*`, `chat_template.missing`; §4.3), streamed: one must
//! be there; each that is there must parse (`tokenizer.invalid`); the tokenizers library's
//! own structural demands are warnings (`tokenizer.structure`); a tokenizer with chat
//! tokens asks for a chat template.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::automap::{module_file, AutoMap, Ref};
use crate::files::{FileInfo, Files};
use crate::json::{self, skip_map, skip_scalars, skip_seq, skip_str, Json, Kind, MaybeStr};
use crate::lookup::find;
use crate::problems::{json_error, num, quote, Sink};
use crate::report::{
    CheckError, CHAT_MARKERS, MAX_ADDED_TOKENS, MAX_LINE, MAX_TOKENIZER_CONFIG, MAX_TOKENIZER_JSON,
    MAX_VOCAB,
};

/// How a top-level tokenizer file is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokFile {
    /// `tokenizer.json`.
    Json,
    /// `tekken.json` (mistral_common).
    Tekken,
    /// `vocab.json` (with `merges.txt`, a slow BPE tokenizer).
    VocabJson,
    /// `merges.txt`, `vocab.txt`: lines.
    Lines,
    /// `tokenizer.model`, `tokenizer.model.v*` (mistral_common), `spiece.model` (T5,
    /// XLNet), `sentencepiece.bpe.model` (XLM-R): SentencePiece, or tiktoken lines.
    Model,
    /// `tiktoken.model` (Kimi), `*.tiktoken` (Qwen): tiktoken lines.
    Tiktoken,
}

/// The kind of a tokenizer file a loader looks for, at the top level.
fn tok_file(path: &str) -> Option<TokFile> {
    if path.contains('/') {
        return None;
    }
    Some(match path {
        "tokenizer.json" => TokFile::Json,
        "tekken.json" => TokFile::Tekken,
        "vocab.json" => TokFile::VocabJson,
        "merges.txt" | "vocab.txt" => TokFile::Lines,
        "tokenizer.model" | "spiece.model" | "sentencepiece.bpe.model" => TokFile::Model,
        "tiktoken.model" => TokFile::Tiktoken,
        _ if path
            .strip_prefix("tokenizer.model.v")
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric())) =>
        {
            TokFile::Model
        }
        _ if path.len() > ".tiktoken".len() && path.ends_with(".tiktoken") => TokFile::Tiktoken,
        _ => return None,
    })
}

/// What the tokenizer rules give the report and the `auto_map` rule.
#[derive(Default)]
pub(crate) struct TokFacts {
    pub(crate) checked: Option<String>,
    pub(crate) auto_map: Vec<Ref>,
}

/// The tokenizer files that are there, each read; `tokenizer.missing` when none makes a
/// tokenizer and `needed` (not a GGUF-only revision) — a custom tokenizer whose module
/// `tokenizer_config.json`'s `auto_map` names (`AutoTokenizer`) is there counts as one.
pub(crate) fn check(
    files: &dyn Files,
    sink: &mut Sink,
    needed: bool,
) -> Result<TokFacts, CheckError> {
    let present: Vec<(&FileInfo, TokFile)> = files
        .list()
        .iter()
        .filter_map(|f| tok_file(&f.path).map(|k| (f, k)))
        .collect();
    let has = |p: &str| present.iter().any(|(f, _)| f.path == p);
    let complete = present.iter().any(|(_, k)| {
        matches!(
            k,
            TokFile::Json | TokFile::Tekken | TokFile::Model | TokFile::Tiktoken
        )
    }) || (has("vocab.json") && has("merges.txt"))
        || has("vocab.txt");
    let mut marker = None;
    for (info, kind) in &present {
        match kind {
            TokFile::Json => marker = tokenizer_json(files, sink, info)?,
            TokFile::Tekken => tekken(files, sink, info)?,
            TokFile::VocabJson => vocab_json(files, sink, info)?,
            TokFile::Model => tokenizer_model(files, sink, info, false)?,
            TokFile::Tiktoken => tokenizer_model(files, sink, info, true)?,
            TokFile::Lines => text_lines(files, sink, info)?,
        }
    }
    let checked = (!present.is_empty()).then(|| {
        present
            .iter()
            .map(|(f, _)| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    });
    let (auto_map, custom) = chat_template(files, sink, marker)?;
    if needed && !complete && !custom {
        let message = "missing, and no other tokenizer (tokenizer.model, tekken.json, vocab.json with merges.txt, vocab.txt): vLLM cannot start without --skip-tokenizer-init";
        sink.missing("tokenizer.missing", "tokenizer.json", message.into());
    }
    Ok(TokFacts { checked, auto_map })
}

fn invalid(sink: &mut Sink, path: &str, message: String) {
    sink.error("tokenizer.invalid", path, message);
}

fn structure(sink: &mut Sink, path: &str, what: &str, library_says: &str) {
    let message = format!("{what}: the tokenizers library refuses it{library_says}");
    sink.warning("tokenizer.structure", path, message);
}

/// `tokenizer.json`: an object whose `model` is an object; the library's structure.
/// Returns a chat marker of its `added_tokens`.
fn tokenizer_json(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
) -> Result<Option<String>, CheckError> {
    let path = info.path.as_str();
    let t: TokenizerJson = match json::read(files, sink, info, MAX_TOKENIZER_JSON)? {
        Json::Read(t) => t,
        Json::Reported => return Ok(None),
        Json::Invalid(e) => {
            invalid(sink, path, crate::lookup::invalid_text(&e));
            return Ok(None);
        }
    };
    let Some(Model::Object {
        kind,
        vocab,
        merges,
    }) = t.model
    else {
        invalid(sink, path, "no \"model\" object".into());
        return Ok(None);
    };
    if !t.version_ok {
        structure(sink, path, "\"version\" is not \"1.0\"", "");
    }
    let want_vocab = match kind.as_deref() {
        Some("BPE") => {
            if merges != Kind::Array || vocab != Kind::Object {
                let what = match (vocab, merges) {
                    (_, Kind::Absent) => "model \"BPE\" has no \"merges\"",
                    (Kind::Absent, _) => "model \"BPE\" has no \"vocab\"",
                    (Kind::Object, _) => "model \"BPE\" has \"merges\" that are not a list",
                    _ => "model \"BPE\" has a \"vocab\" that is not an object",
                };
                structure(sink, path, what, " (\"Missing vocab/merges\")");
            }
            None
        }
        Some("WordPiece") | Some("WordLevel") => Some(Kind::Object),
        Some("Unigram") => Some(Kind::Array),
        Some(other) => {
            structure(
                sink,
                path,
                &format!("model type {} is unknown", quote(other)),
                "",
            );
            None
        }
        None => None,
    };
    if let (Some(want), Some(k)) = (want_vocab, kind.as_deref()) {
        if vocab != want {
            let shape = if want == Kind::Object {
                "an object"
            } else {
                "a list"
            };
            structure(
                sink,
                path,
                &format!("model {} needs \"vocab\" as {shape}", quote(k)),
                "",
            );
        }
    }
    if t.added.malformed {
        structure(
            sink,
            path,
            "\"added_tokens\" is not a list of objects with \"id\" and \"content\"",
            "",
        );
    }
    Ok(t.added.marker)
}

/// `tokenizer.json` as the rules need it.
struct TokenizerJson {
    version_ok: bool,
    model: Option<Model>,
    added: Added,
}

impl<'de> Deserialize<'de> for TokenizerJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TokenizerJson, D::Error> {
        d.deserialize_map(TokenizerJsonVisitor)
    }
}

struct TokenizerJsonVisitor;

impl<'de> Visitor<'de> for TokenizerJsonVisitor {
    type Value = TokenizerJson;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TokenizerJson, A::Error> {
        let mut out = TokenizerJson {
            version_ok: true,
            model: None,
            added: Added::default(),
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "version" => {
                    out.version_ok = map.next_value::<MaybeStr>()?.0.as_deref() == Some("1.0")
                }
                "model" => out.model = Some(map.next_value()?),
                "added_tokens" => out.added = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// `model`: its `type` and the types of `vocab` and `merges` (their contents skipped).
enum Model {
    NotObject,
    Object {
        kind: Option<String>,
        vocab: Kind,
        merges: Kind,
    },
}

impl<'de> Deserialize<'de> for Model {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Model, D::Error> {
        d.deserialize_any(ModelVisitor)
    }
}

struct ModelVisitor;

impl<'de> Visitor<'de> for ModelVisitor {
    type Value = Model;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Model, A::Error> {
        let (mut kind, mut vocab, mut merges) = (None, Kind::Absent, Kind::Absent);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => kind = map.next_value::<MaybeStr>()?.0,
                "vocab" => vocab = map.next_value()?,
                "merges" => merges = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Model::Object {
            kind,
            vocab,
            merges,
        })
    }

    skip_seq!(Model::NotObject);
    skip_str!(Model::NotObject);
    skip_scalars!(Model::NotObject);
}

/// `added_tokens`: whether it is malformed, and a chat marker among its contents.
#[derive(Default)]
struct Added {
    malformed: bool,
    marker: Option<String>,
}

impl<'de> Deserialize<'de> for Added {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Added, D::Error> {
        d.deserialize_any(AddedVisitor)
    }
}

struct AddedVisitor;

const MALFORMED: Added = Added {
    malformed: true,
    marker: None,
};

impl<'de> Visitor<'de> for AddedVisitor {
    type Value = Added;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of added tokens")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Added, A::Error> {
        let mut out = Added::default();
        let mut seen = 0usize;
        loop {
            if seen >= MAX_ADDED_TOKENS {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                break;
            }
            let Some(token) = seq.next_element::<AddedToken>()? else {
                break;
            };
            seen += 1;
            match token.0 {
                None => out.malformed = true,
                Some(content)
                    if out.marker.is_none() && CHAT_MARKERS.contains(&content.as_str()) =>
                {
                    out.marker = Some(content)
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }

    skip_map!(MALFORMED);
    skip_str!(MALFORMED);
    skip_scalars!(MALFORMED);
}

/// One added token: its content when it has an `id` and a string `content`.
struct AddedToken(Option<String>);

impl<'de> Deserialize<'de> for AddedToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AddedToken, D::Error> {
        d.deserialize_any(AddedTokenVisitor)
    }
}

struct AddedTokenVisitor;

impl<'de> Visitor<'de> for AddedTokenVisitor {
    type Value = AddedToken;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an added token")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AddedToken, A::Error> {
        let (mut id, mut content) = (false, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => id = map.next_value::<Kind>()? == Kind::Other,
                "content" => content = map.next_value::<MaybeStr>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(AddedToken(content.filter(|_| id)))
    }

    skip_seq!(AddedToken(None));
    skip_str!(AddedToken(None));
    skip_scalars!(AddedToken(None));
}

/// `tekken.json` (vLLM's `--tokenizer-mode mistral`): an object with a `vocab` list.
fn tekken(files: &dyn Files, sink: &mut Sink, info: &FileInfo) -> Result<(), CheckError> {
    match json::read::<Tekken>(files, sink, info, MAX_TOKENIZER_JSON)? {
        Json::Read(t) if t.0 != Kind::Array => {
            let message = "\"vocab\" is not a list: mistral_common refuses it".to_string();
            sink.warning("tokenizer.structure", &info.path, message);
        }
        Json::Invalid(e) => invalid(sink, &info.path, crate::lookup::invalid_text(&e)),
        _ => {}
    }
    Ok(())
}

struct Tekken(Kind);

impl<'de> Deserialize<'de> for Tekken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tekken, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tekken;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tekken, A::Error> {
                let mut vocab = Kind::Absent;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "vocab" {
                        vocab = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Tekken(vocab))
            }
        }
        d.deserialize_map(V)
    }
}

/// `vocab.json`: an object of token → id.
fn vocab_json(files: &dyn Files, sink: &mut Sink, info: &FileInfo) -> Result<(), CheckError> {
    match json::read::<VocabJson>(files, sink, info, MAX_VOCAB)? {
        Json::Read(VocabJson(false)) => {
            structure(sink, &info.path, "a token's id is not an integer", "")
        }
        Json::Invalid(e) => invalid(sink, &info.path, crate::lookup::invalid_text(&e)),
        _ => {}
    }
    Ok(())
}

/// Whether every value is an integer.
struct VocabJson(bool);

impl<'de> Deserialize<'de> for VocabJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VocabJson, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VocabJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of tokens to ids")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VocabJson, A::Error> {
                let mut ok = true;
                while map.next_key::<IgnoredAny>()?.is_some() {
                    ok &= map.next_value::<IsInt>()?.0;
                }
                Ok(VocabJson(ok))
            }
        }
        d.deserialize_map(V)
    }
}

struct IsInt(bool);

impl<'de> Deserialize<'de> for IsInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IsInt, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IsInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<IsInt, E> {
                Ok(IsInt(true))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<IsInt, E> {
                Ok(IsInt(true))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<IsInt, E> {
                Ok(IsInt(false))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<IsInt, E> {
                Ok(IsInt(false))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<IsInt, E> {
                Ok(IsInt(false))
            }
            skip_map!(IsInt(false));
            skip_seq!(IsInt(false));
            skip_str!(IsInt(false));
        }
        d.deserialize_any(V)
    }
}

/// `merges.txt` and `vocab.txt`: UTF-8 lines of at most [`MAX_LINE`] bytes.
fn text_lines(files: &dyn Files, sink: &mut Sink, info: &FileInfo) -> Result<(), CheckError> {
    if info.size > MAX_VOCAB {
        sink.too_large(&info.path, info.size, MAX_VOCAB);
        return Ok(());
    }
    if json::lfs_pointer(files, sink, info)? {
        return Ok(());
    }
    let reader = files
        .reader(&info.path)
        .map_err(CheckError::read(&info.path))?;
    match lines(BufReader::new(reader.take(MAX_VOCAB))).map_err(CheckError::read(&info.path))? {
        Err(message) => invalid(sink, &info.path, message),
        Ok(0) if info.path == "vocab.txt" => {
            invalid(sink, &info.path, "no tokens (an empty file)".into())
        }
        Ok(_) => {}
    }
    Ok(())
}

/// Walks lines; `Ok(Err(why))` for a line that is too long or not UTF-8, else the
/// number of non-empty lines.
pub(crate) fn lines<R: BufRead>(mut reader: R) -> io::Result<Result<u64, String>> {
    let mut buf = Vec::new();
    let (mut line, mut non_empty) = (0u64, 0u64);
    loop {
        buf.clear();
        let got = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if got == 0 {
            return Ok(Ok(non_empty));
        }
        line += 1;
        if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
            return Ok(Err(format!(
                "line {} is longer than {} bytes",
                num(line),
                num(MAX_LINE as u64)
            )));
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            return Ok(Err(format!("line {} is not UTF-8", num(line))));
        };
        if !text.trim().is_empty() {
            non_empty += 1;
        }
    }
}

/// `tokenizer.model`: SentencePiece's `ModelProto` (a walk of its top-level protobuf
/// fields) or, when its first line reads as one (or `tiktoken`: always), tiktoken's
/// `<base64> <rank>` lines.
fn tokenizer_model(
    files: &dyn Files,
    sink: &mut Sink,
    info: &FileInfo,
    tiktoken_only: bool,
) -> Result<(), CheckError> {
    let path = info.path.as_str();
    if info.size > MAX_VOCAB {
        sink.too_large(path, info.size, MAX_VOCAB);
        return Ok(());
    }
    if info.size == 0 {
        invalid(sink, path, "empty".into());
        return Ok(());
    }
    if json::lfs_pointer(files, sink, info)? {
        return Ok(());
    }
    let reader = files.reader(path).map_err(CheckError::read(path))?;
    let mut reader = BufReader::new(reader.take(MAX_VOCAB));
    let first = reader.fill_buf().map_err(CheckError::read(path))?;
    let text = tiktoken_only
        || (first
            .split(|&b| b == b'\n')
            .next()
            .is_some_and(tiktoken_line)
            && first.first() != Some(&0x0a));
    let verdict = if text {
        tiktoken(reader)
    } else {
        protobuf_walk(reader)
    };
    if let Err(message) = verdict.map_err(CheckError::read(path))? {
        invalid(sink, path, message);
    }
    Ok(())
}

/// `<base64> <rank>`.
fn tiktoken_line(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(space) = line.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (token, rank) = (&line[..space], &line[space + 1..]);
    let b64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    !token.is_empty()
        && token.iter().all(b64)
        && !rank.is_empty()
        && rank.iter().all(u8::is_ascii_digit)
}

fn tiktoken<R: BufRead>(mut reader: R) -> io::Result<Result<(), String>> {
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        if (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?
            == 0
        {
            return Ok(Ok(()));
        }
        line += 1;
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if !text.is_empty() && !tiktoken_line(text) {
            return Ok(Err(format!(
                "line {} is not \"<base64> <rank>\" (a tiktoken file)",
                num(line)
            )));
        }
    }
}

/// Walks top-level protobuf fields: known wire types, lengths inside the file, field 1
/// (`pieces`) present. Nothing is allocated by a length read from the file.
pub(crate) fn protobuf_walk<R: BufRead>(mut reader: R) -> io::Result<Result<(), String>> {
    let mut at = 0u64;
    let mut pieces = false;
    loop {
        let field_at = at;
        let tag = match varint(&mut reader, &mut at)? {
            Varint::Value(v) => v,
            Varint::Eof if at == field_at => break,
            Varint::Eof => {
                return Ok(Err(format!(
                    "truncated inside a field tag at byte {}",
                    num(field_at)
                )))
            }
            Varint::TooLong => {
                return Ok(Err(format!(
                    "a varint longer than 10 bytes at byte {}",
                    num(field_at)
                )))
            }
        };
        let (field, wire) = (tag >> 3, tag & 7);
        if field == 0 {
            return Ok(Err(format!(
                "field number 0 at byte {} (not a SentencePiece model?)",
                num(field_at)
            )));
        }
        let skip = match wire {
            0 => match varint(&mut reader, &mut at)? {
                Varint::Value(_) => 0,
                _ => {
                    return Ok(Err(format!(
                        "field {} truncated at byte {}",
                        num(field),
                        num(at)
                    )))
                }
            },
            1 => 8,
            5 => 4,
            2 => match varint(&mut reader, &mut at)? {
                Varint::Value(len) => len,
                _ => {
                    return Ok(Err(format!(
                        "field {} truncated at byte {}",
                        num(field),
                        num(at)
                    )))
                }
            },
            _ => {
                return Ok(Err(format!(
                    "wire type {wire} at byte {} (not a SentencePiece model?)",
                    num(field_at)
                )))
            }
        };
        let got = io::copy(&mut (&mut reader).take(skip), &mut io::sink())?;
        at += got;
        if got < skip {
            let message = format!(
                "field {} needs {} bytes at byte {}, the file ends first (truncated?)",
                num(field),
                num(skip),
                num(at - got)
            );
            return Ok(Err(message));
        }
        pieces |= field == 1 && wire == 2;
    }
    if !pieces {
        return Ok(Err(
            "no pieces (protobuf field 1): not a SentencePiece model".into(),
        ));
    }
    Ok(Ok(()))
}

enum Varint {
    Value(u64),
    Eof,
    TooLong,
}

fn varint<R: BufRead>(reader: &mut R, at: &mut u64) -> io::Result<Varint> {
    let mut value = 0u64;
    for i in 0..10 {
        let mut byte = [0u8];
        if reader.read(&mut byte)? == 0 {
            return Ok(Varint::Eof);
        }
        *at += 1;
        value |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Varint::Value(value));
        }
    }
    Ok(Varint::TooLong)
}

/// `tokenizer_config.json` (its `auto_map` returned, and whether its `AutoTokenizer`
/// names a module that is there) and the chat template rule.
fn chat_template(
    files: &dyn Files,
    sink: &mut Sink,
    marker: Option<String>,
) -> Result<(Vec<Ref>, bool), CheckError> {
    let mut there = find(files, "chat_template.jinja").is_some()
        || files.list().iter().any(|f| {
            f.path.starts_with("additional_chat_templates/") && f.path.ends_with(".jinja")
        });
    if let Some(info) = find(files, "chat_template.json") {
        match json::read::<ChatTemplateJson>(files, sink, info, crate::report::MAX_LOADER_JSON)? {
            Json::Read(c) => there |= c.0 == Template::Present,
            Json::Reported => there = true,
            Json::Invalid(e) => sink.error(
                "json.invalid",
                &info.path,
                format!("not valid JSON: {}", json_error(&e)),
            ),
        }
    }
    let Some(info) = find(files, "tokenizer_config.json") else {
        return Ok((Vec::new(), false));
    };
    let config: TokenizerConfig = match json::read(files, sink, info, MAX_TOKENIZER_CONFIG)? {
        Json::Read(c) => c,
        Json::Reported => return Ok((Vec::new(), false)),
        Json::Invalid(e) => {
            sink.error(
                "json.invalid",
                &info.path,
                format!("not valid JSON: {}", json_error(&e)),
            );
            return Ok((Vec::new(), false));
        }
    };
    there |= config.template == Template::Present;
    let marker = config.scan.marker.or(marker);
    if !there {
        let why = match (&marker, config.template) {
            (Some(m), _) => Some(format!("the tokenizer has chat tokens ({})", quote(m))),
            (None, Template::Empty) => Some("\"chat_template\" is empty".to_string()),
            _ => None,
        };
        if let Some(why) = why {
            let message = format!("{why} but no chat template (no \"chat_template\" in it, no chat_template.jinja): vLLM's chat API refuses requests without --chat-template");
            sink.warning("chat_template.missing", &info.path, message);
        }
    }
    let custom = config
        .auto_map
        .tokenizer
        .iter()
        .filter_map(|r| module_file(r))
        .any(|file| find(files, &file).is_some());
    Ok((config.auto_map.refs("tokenizer_config.json"), custom))
}

/// A `chat_template` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Template {
    Absent,
    /// Null, "" or [].
    Empty,
    Present,
}

impl<'de> Deserialize<'de> for Template {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Template, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Template;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a chat template")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Template, E> {
                Ok(if s.is_empty() {
                    Template::Empty
                } else {
                    Template::Present
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Template, A::Error> {
                let mut n = 0u64;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(if n == 0 {
                    Template::Empty
                } else {
                    Template::Present
                })
            }
            skip_map!(Template::Present);
            skip_scalars!(Template::Empty);
        }
        d.deserialize_any(V)
    }
}

/// `chat_template.json`: its `chat_template`.
struct ChatTemplateJson(Template);

impl<'de> Deserialize<'de> for ChatTemplateJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChatTemplateJson, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChatTemplateJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ChatTemplateJson, A::Error> {
                let mut t = Template::Absent;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "chat_template" {
                        t = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ChatTemplateJson(t))
            }
        }
        d.deserialize_map(V)
    }
}

/// `tokenizer_config.json` as the rules need it: its template, its `auto_map`, and a chat
/// marker among its other string values (added and special tokens).
struct TokenizerConfig {
    template: Template,
    auto_map: AutoMap,
    scan: Scan,
}

/// Strings looked at for chat markers, and the first found.
#[derive(Default)]
struct Scan {
    seen: usize,
    marker: Option<String>,
}

impl<'de> Deserialize<'de> for TokenizerConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TokenizerConfig, D::Error> {
        d.deserialize_map(TokenizerConfigVisitor)
    }
}

struct TokenizerConfigVisitor;

impl<'de> Visitor<'de> for TokenizerConfigVisitor {
    type Value = TokenizerConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TokenizerConfig, A::Error> {
        let mut out = TokenizerConfig {
            template: Template::Absent,
            auto_map: AutoMap::default(),
            scan: Scan::default(),
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "chat_template" => out.template = map.next_value()?,
                "auto_map" => out.auto_map = map.next_value()?,
                _ => map.next_value_seed(ScanSeed(&mut out.scan))?,
            }
        }
        Ok(out)
    }
}

/// Visits any value, noting chat markers among its strings (the first
/// [`MAX_ADDED_TOKENS`] strings are looked at).
struct ScanSeed<'a>(&'a mut Scan);

impl<'de> DeserializeSeed<'de> for ScanSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScanSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        if self.0.seen < MAX_ADDED_TOKENS {
            self.0.seen += 1;
            if self.0.marker.is_none() && CHAT_MARKERS.contains(&s) {
                self.0.marker = Some(s.to_string());
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(ScanSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(ScanSeed(&mut *self.0))?;
        }
        Ok(())
    }

    skip_scalars!(());
}
