//! Weights (§3.2 `weights.*`, `shards.*`, `index.*`): some weights at the top level,
//! complete `P-0000i-of-0000N.safetensors` sets, and `*.safetensors.index.json` files
//! whose `weight_map` names files that are there and tensors their headers have.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::json::{self, Json};
use crate::problems::{num, quote, Sink};
use crate::revision::{find, invalid_text, is_weights};
use crate::{CheckError, Files, MAX_INDEX, MAX_INDEX_ENTRIES};

/// One index as read.
pub(crate) struct Index {
    pub(crate) path: String,
    /// The file named, resolved against the index's directory → (the name as written,
    /// tensors mapped to it, the first of them).
    pub(crate) files: BTreeMap<String, (String, u64, String)>,
    /// (tensor, resolved file), in the index's order.
    entries: Vec<(String, String)>,
    /// More entries than the check reads.
    cut: bool,
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

fn join(dir: &str, name: &str) -> String {
    let name = name.strip_prefix("./").unwrap_or(name);
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Reads every `*.safetensors.index.json`; `index.invalid` for those that are not.
pub(crate) fn read_indexes(files: &dyn Files, sink: &mut Sink) -> Result<Vec<Index>, CheckError> {
    let mut out = Vec::new();
    for info in files
        .list()
        .iter()
        .filter(|f| f.path.ends_with(".safetensors.index.json"))
    {
        let raw: RawIndex = match json::read(files, sink, info, MAX_INDEX)? {
            Json::Read(r) => r,
            Json::Reported => continue,
            Json::Invalid(e) => {
                sink.error("index.invalid", &info.path, invalid_text(&e));
                continue;
            }
        };
        let Some(map) = raw.weight_map else {
            sink.error(
                "index.invalid",
                &info.path,
                "no \"weight_map\" object".into(),
            );
            continue;
        };
        if map.count > MAX_INDEX_ENTRIES as u64 {
            let message = format!(
                "{} weight_map entries, more than the check reads ({}): the rest are not checked",
                num(map.count),
                num(MAX_INDEX_ENTRIES as u64)
            );
            sink.warning("check.too-large", &info.path, message);
        }
        out.push(index_of(&info.path, map));
    }
    Ok(out)
}

fn index_of(path: &str, map: WeightMap) -> Index {
    let dir = dir_of(path);
    let mut files: BTreeMap<String, (String, u64, String)> = BTreeMap::new();
    let mut entries = Vec::with_capacity(map.entries.len());
    for (tensor, name) in map.entries {
        let file = join(dir, &name);
        let e = files
            .entry(file.clone())
            .or_insert_with(|| (name, 0, tensor.clone()));
        e.1 += 1;
        entries.push((tensor, file));
    }
    Index {
        path: path.to_string(),
        files,
        entries,
        cut: map.count > MAX_INDEX_ENTRIES as u64,
    }
}

/// An index as the rules need it.
#[derive(Deserialize)]
struct RawIndex {
    weight_map: Option<WeightMap>,
}

/// `weight_map`: tensor → file, the first [`MAX_INDEX_ENTRIES`] kept.
struct WeightMap {
    entries: Vec<(String, String)>,
    count: u64,
}

impl<'de> Deserialize<'de> for WeightMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WeightMap, D::Error> {
        d.deserialize_map(WeightMapVisitor)
    }
}

struct WeightMapVisitor;

impl<'de> Visitor<'de> for WeightMapVisitor {
    type Value = WeightMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a \"weight_map\" object of tensor names to file names")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WeightMap, A::Error> {
        let mut out = WeightMap {
            entries: Vec::new(),
            count: 0,
        };
        while let Some(tensor) = map.next_key::<String>()? {
            out.count += 1;
            if out.entries.len() < MAX_INDEX_ENTRIES {
                let file: String = map.next_value()?;
                out.entries.push((tensor, file));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// `weights.missing` and `weights.unchecked` for a model.
pub(crate) fn check_weights(files: &dyn Files, sink: &mut Sink) {
    let weights: Vec<&str> = files
        .list()
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| is_weights(p))
        .collect();
    if weights.is_empty() {
        let message = "missing, and no other weights (*.safetensors, *.bin, *.pt) in the revision";
        sink.missing("weights.missing", "model.safetensors", message.into());
        return;
    }
    if weights.iter().any(|p| p.ends_with(".safetensors")) {
        return;
    }
    for p in weights
        .iter()
        .filter(|p| [".bin", ".pt", ".pth"].iter().any(|e| p.ends_with(e)))
    {
        let message = "pickle weights are not checked (only .safetensors headers are)";
        sink.warning("weights.unchecked", p, message.into());
    }
}

/// A shard's name: (directory, prefix, number, total), numbers as written.
fn shard_name(path: &str) -> Option<(&str, &str, &str, &str)> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let stem = name.strip_suffix(".safetensors")?;
    let (left, total) = stem.rsplit_once("-of-")?;
    let (prefix, i) = left.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(total) || !digits(i) {
        return None;
    }
    Some((dir, prefix, i, total))
}

/// Shard sets larger than this are not listed shard by shard (no real model has one).
const MAX_SHARDS: u64 = 100_000;

/// `shards.missing`: a set with a number absent that no index names (the index rule
/// reports those).
pub(crate) fn check_shards(files: &dyn Files, sink: &mut Sink, named: &BTreeSet<String>) {
    let mut sets: BTreeMap<(&str, &str, &str), (usize, BTreeSet<u64>)> = BTreeMap::new();
    for f in files.list() {
        if let Some((dir, prefix, i, total)) = shard_name(&f.path) {
            let Ok(n) = i.parse::<u64>() else { continue };
            sets.entry((dir, prefix, total))
                .or_insert((i.len(), BTreeSet::new()))
                .1
                .insert(n);
        }
    }
    for ((dir, prefix, total_s), (width, have)) in sets {
        let Ok(total) = total_s.parse::<u64>() else {
            continue;
        };
        if total > MAX_SHARDS {
            continue;
        }
        let listed = runs(&have);
        for i in (1..=total).filter(|i| !have.contains(i)) {
            let name = format!("{prefix}-{i:0width$}-of-{total_s}.safetensors");
            let path = join(dir, &name);
            if named.contains(&path) {
                continue;
            }
            let message = format!(
                "missing (the revision has shards {listed} of {})",
                num(total)
            );
            sink.missing("shards.missing", &path, message);
        }
    }
}

/// "1, 2, 4" or "1-50, 52-100": runs of three or more as ranges.
fn runs(have: &BTreeSet<u64>) -> String {
    let mut parts = Vec::new();
    let mut it = have.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.push(format!("{start}, {end}")),
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// `index.missing-file`, `index.missing-tensor` and `index.unlisted`.
pub(crate) fn check_indexes(
    files: &dyn Files,
    sink: &mut Sink,
    indexes: &[Index],
    names: &BTreeMap<String, HashSet<String>>,
) {
    for index in indexes {
        for (file, (written, count, first)) in &index.files {
            if find(files, file).is_none() {
                let message = format!(
                    "names {written} (for {} tensor{}, e.g. {}), which is not in the revision",
                    num(*count),
                    if *count == 1 { "" } else { "s" },
                    quote(first)
                );
                sink.missing_named("index.missing-file", &index.path, file, message);
            }
        }
        for (tensor, file) in &index.entries {
            if names.get(file).is_some_and(|n| !n.contains(tensor)) {
                let written = index.files.get(file).map(|f| f.0.as_str()).unwrap_or(file);
                let message = format!(
                    "maps {} to {written}, which has no such tensor",
                    quote(tensor)
                );
                sink.error("index.missing-tensor", &index.path, message);
            }
        }
    }
    check_unlisted(files, sink, indexes);
}

/// A `.safetensors` beside an index (or indexes) that name none of its tensors.
fn check_unlisted(files: &dyn Files, sink: &mut Sink, indexes: &[Index]) {
    let mut by_dir: BTreeMap<&str, Vec<&Index>> = BTreeMap::new();
    for index in indexes {
        by_dir.entry(dir_of(&index.path)).or_default().push(index);
    }
    for (dir, here) in by_dir {
        if here.iter().any(|i| i.cut) {
            continue;
        }
        for f in files
            .list()
            .iter()
            .filter(|f| f.path.ends_with(".safetensors") && dir_of(&f.path) == dir)
        {
            if here.iter().all(|i| !i.files.contains_key(&f.path)) {
                let index_name = here[0].path.rsplit('/').next().unwrap_or(&here[0].path);
                let message = format!("not in {index_name}: loaders that follow the index skip it");
                sink.warning("index.unlisted", &f.path, message);
            }
        }
    }
}
