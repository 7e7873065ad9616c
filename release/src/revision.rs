//! What a revision is (§3.1: model, adapter, other) and the JSON loaders read first:
//! `config.json` (named model, its `auto_map`) and the other loader files, which must
//! at least be JSON.

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::automap::{AutoMap, Ref};
use crate::files::{FileInfo, Files};
use crate::json::{self, Json};
use crate::lookup::{find, invalid_text, is_weights};
use crate::problems::{json_error, Sink};
use crate::report::{CheckError, MAX_LOADER_JSON, MAX_TOKENIZER_CONFIG};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Model,
    Adapter,
    Other,
}

impl Class {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Class::Model => "model",
            Class::Adapter => "adapter",
            Class::Other => "other",
        }
    }
}

/// A model by `config.json`; a diffusers pipeline by a top-level `model_index.json` (other,
/// even with a top-level single-file checkpoint beside it); an adapter; a model by its
/// top-level weights; else other.
pub(crate) fn classify(list: &[FileInfo]) -> Class {
    let has = |p: &str| list.iter().any(|f| f.path == p);
    if has("config.json") {
        Class::Model
    } else if has("model_index.json") {
        Class::Other
    } else if has("adapter_config.json") {
        Class::Adapter
    } else if list.iter().any(|f| is_weights(&f.path)) {
        Class::Model
    } else {
        Class::Other
    }
}

/// Whether the revision's weights are only GGUF files (top-level `.gguf`, no pickle
/// weights, no `.safetensors` at any depth): vLLM reads the config and the tokenizer from
/// the GGUF file, so neither is missing.
pub(crate) fn gguf_only(files: &dyn Files) -> bool {
    let list = files.list();
    let mut weights = list.iter().filter(|f| is_weights(&f.path)).peekable();
    weights.peek().is_some()
        && weights.all(|f| f.path.ends_with(".gguf"))
        && !list.iter().any(|f| f.path.ends_with(".safetensors"))
}

/// What `config.json` gave the other rules.
#[derive(Default)]
pub(crate) struct ConfigFacts {
    pub(crate) auto_map: Vec<Ref>,
}

/// `config.json` of a model: present (unless `needed` is false: a GGUF-only revision), an
/// object, naming its model.
pub(crate) fn check_config(
    files: &dyn Files,
    sink: &mut Sink,
    needed: bool,
) -> Result<ConfigFacts, CheckError> {
    let Some(info) = find(files, "config.json") else {
        if !needed {
        } else if find(files, "params.json").is_some() {
            let message = "missing; params.json is there (a Mistral-format config): vLLM needs --config-format mistral";
            sink.warning("config.missing", "config.json", message.into());
        } else {
            sink.missing(
                "config.missing",
                "config.json",
                "missing (vLLM and transformers read it first)".into(),
            );
        }
        return Ok(ConfigFacts::default());
    };
    let config: Config = match json::read(files, sink, info, MAX_LOADER_JSON)? {
        Json::Read(c) => c,
        Json::Reported => return Ok(ConfigFacts::default()),
        Json::Invalid(e) => {
            sink.error("config.invalid", &info.path, invalid_text(&e));
            return Ok(ConfigFacts::default());
        }
    };
    if !config.named {
        let message =
            "neither \"model_type\" nor \"architectures\": loaders cannot tell which model this is";
        sink.warning("config.unnamed", &info.path, message.into());
    }
    Ok(ConfigFacts {
        auto_map: config.auto_map.refs("config.json"),
    })
}

/// `config.json` as the rules need it.
struct Config {
    named: bool,
    auto_map: AutoMap,
}

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
        d.deserialize_map(ConfigVisitor)
    }
}

struct ConfigVisitor;

impl<'de> Visitor<'de> for ConfigVisitor {
    type Value = Config;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
        let mut out = Config {
            named: false,
            auto_map: AutoMap::default(),
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "model_type" | "architectures" => {
                    let kind: json::Kind = map.next_value()?;
                    out.named |= kind != json::Kind::Null;
                }
                "auto_map" => out.auto_map = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Loader JSON files that must be JSON when present (§3.2 `json.invalid`).
const LOADER_JSON: &[&str] = &[
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "preprocessor_config.json",
    "processor_config.json",
    "chat_template.json",
    "modules.json",
    "hf_quant_config.json",
    "adapter_config.json",
];

/// Whether `path` is a JSON file this class checks for well-formedness here. A model's
/// `tokenizer_config.json` and `chat_template.json` are read by the tokenizer rules; a
/// revision of class other has its configs checked at any depth (diffusers keep one per
/// component).
fn loader_json(path: &str, class: Class) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match class {
        Class::Model => {
            !path.contains('/')
                && LOADER_JSON.contains(&name)
                && name != "tokenizer_config.json"
                && name != "chat_template.json"
        }
        Class::Adapter => !path.contains('/') && LOADER_JSON.contains(&name),
        Class::Other => {
            LOADER_JSON.contains(&name)
                || name == "config.json"
                || name == "model_index.json"
                || name.ends_with("_config.json")
        }
    }
}

pub(crate) fn check_loader_json(
    files: &dyn Files,
    sink: &mut Sink,
    class: Class,
) -> Result<(), CheckError> {
    for info in files.list().iter().filter(|f| loader_json(&f.path, class)) {
        let cap = if info.path.ends_with("tokenizer_config.json") {
            MAX_TOKENIZER_CONFIG
        } else {
            MAX_LOADER_JSON
        };
        if let Json::Invalid(e) = json::read::<json::Any>(files, sink, info, cap)? {
            sink.error(
                "json.invalid",
                &info.path,
                format!("not valid JSON: {}", json_error(&e)),
            );
        }
    }
    Ok(())
}

/// Documentation, not part of any model: `README*`, `LICENSE*`, `*.md`, images, git's
/// dotfiles, and other `*.txt` at the top level (`merges.txt` and `vocab.txt` are
/// tokenizer files).
pub(crate) fn documentation(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let lower = name.to_ascii_lowercase();
    let ext = |e: &[&str]| e.iter().any(|e| lower.ends_with(e));
    lower.starts_with("readme")
        || lower.starts_with("license")
        || matches!(name, ".gitattributes" | ".gitignore")
        || ext(&[".md", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"])
        || (!path.contains('/')
            && lower.ends_with(".txt")
            && !matches!(name, "merges.txt" | "vocab.txt"))
}

/// `release.empty`: no files, or only documentation. Returns whether it was reported.
pub(crate) fn empty(files: &dyn Files, sink: &mut Sink) -> bool {
    if !files.list().iter().all(|f| documentation(&f.path)) {
        return false;
    }
    let message = "no model files (no config.json, weights, tokenizer or pipeline)";
    sink.error("release.empty", ".", message.into());
    true
}

/// The one warning of class other, on `model_index.json` for a pipeline, else on the first
/// file that is not documentation.
pub(crate) fn not_a_model(files: &dyn Files, sink: &mut Sink) {
    let tail = "only .safetensors headers and JSON were checked";
    if find(files, "model_index.json").is_some() {
        let message = format!("not a model vLLM loads (a diffusers pipeline): {tail}");
        sink.warning("release.not-a-model", "model_index.json", message);
    } else {
        let path = files
            .list()
            .iter()
            .find(|f| !documentation(&f.path))
            .map(|f| f.path.as_str())
            .unwrap_or(".");
        let message =
            format!("not a model vLLM loads (no config.json and no top-level weights): {tail}");
        sink.warning("release.not-a-model", path, message);
    }
}
