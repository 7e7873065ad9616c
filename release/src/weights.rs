//! Weights (§3.2 `weights.*`, `shards.*`, `index.*`): some weights at the top level,
//! complete `P-0000i-of-0000N.safetensors` sets, and `*.safetensors.index.json` files
//! whose `weight_map` names files that are there and tensors their headers have.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::files::Files;
use crate::header::name_hash;
use crate::json::{self, Json};
use crate::lookup::{find, invalid_text, is_weights};
use crate::problems::{num, quote, Sink};
use crate::report::{CheckError, MAX_INDEX, MAX_INDEX_ENTRIES, MAX_PER_FILE_CODE};

/// One index as read: what it names, not its entries (the tensor names are compared
/// in a second pass, [`check_indexes`], streaming the `weight_map` again).
pub(crate) struct Index {
    pub(crate) path: String,
    /// The file named, resolved against the index's directory → (the name as written,
    /// tensors mapped to it, the first of them).
    pub(crate) files: BTreeMap<String, (String, u64, String)>,
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
    for (name, (count, first)) in map.files {
        let e = files
            .entry(join(dir, &name))
            .or_insert_with(|| (name, 0, first));
        e.1 += count;
    }
    Index {
        path: path.to_string(),
        files,
        cut: map.count > MAX_INDEX_ENTRIES as u64,
    }
}

/// An index as the rules need it.
#[derive(Deserialize)]
struct RawIndex {
    weight_map: Option<WeightMap>,
}

/// `weight_map`, the first [`MAX_INDEX_ENTRIES`] entries read: each file as written →
/// (tensors mapped to it, the first of them).
struct WeightMap {
    files: BTreeMap<String, (u64, String)>,
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
            files: BTreeMap::new(),
            count: 0,
        };
        while let Some(tensor) = map.next_key::<String>()? {
            out.count += 1;
            if out.count <= MAX_INDEX_ENTRIES as u64 {
                let file: String = map.next_value()?;
                match out.files.get_mut(&file) {
                    Some(e) => e.0 += 1,
                    None => {
                        out.files.insert(file, (1, tensor));
                    }
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// The second pass over an index: its entries streamed, each tensor looked up among the
/// name hashes of the file it maps to (when that file's header was read whole).
#[derive(Clone, Copy)]
struct Compare<'a> {
    dir: &'a str,
    names: &'a BTreeMap<String, Vec<u64>>,
}

/// (tensor, resolved file) of the first [`MAX_PER_FILE_CODE`] entries naming a tensor
/// their file lacks, and how many more there were.
#[derive(Default)]
struct Absent {
    kept: Vec<(String, String)>,
    more: usize,
}

impl<'de> DeserializeSeed<'de> for Compare<'_> {
    type Value = Absent;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Absent, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Compare<'_> {
    type Value = Absent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an index object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Absent, A::Error> {
        let mut out = Absent::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "weight_map" {
                out = map.next_value_seed(CompareEntries(self))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// The `weight_map` of [`Compare`].
struct CompareEntries<'a>(Compare<'a>);

impl<'de> DeserializeSeed<'de> for CompareEntries<'_> {
    type Value = Absent;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Absent, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for CompareEntries<'_> {
    type Value = Absent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a \"weight_map\" object of tensor names to file names")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Absent, A::Error> {
        let mut out = Absent::default();
        let mut count = 0usize;
        while let Some(tensor) = map.next_key::<String>()? {
            count += 1;
            if count > MAX_INDEX_ENTRIES {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let file = join(self.0.dir, &map.next_value::<String>()?);
            let hashes = self.0.names.get(&file);
            if hashes.is_some_and(|h| h.binary_search(&name_hash(&tensor)).is_err()) {
                if out.kept.len() < MAX_PER_FILE_CODE {
                    out.kept.push((tensor, file));
                } else {
                    out.more += 1;
                }
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

/// `index.missing-file`, `index.missing-tensor` and `index.unlisted`. An index that names a
/// file whose header was read whole is read again, its entries compared as they stream.
pub(crate) fn check_indexes(
    files: &dyn Files,
    sink: &mut Sink,
    indexes: &[Index],
    names: &BTreeMap<String, Vec<u64>>,
) -> Result<(), CheckError> {
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
        if !index.files.keys().any(|f| names.contains_key(f)) {
            continue;
        }
        let Some(info) = find(files, &index.path) else {
            continue;
        };
        let seed = Compare {
            dir: dir_of(&index.path),
            names,
        };
        let Json::Read(absent) = json::read_seed(files, sink, info, MAX_INDEX, seed)? else {
            continue;
        };
        for (tensor, file) in &absent.kept {
            let written = index.files.get(file).map(|f| f.0.as_str()).unwrap_or(file);
            let message = format!(
                "maps {} to {written}, which has no such tensor",
                quote(tensor)
            );
            sink.error("index.missing-tensor", &index.path, message);
        }
        sink.more("index.missing-tensor", &index.path, absent.more);
    }
    check_unlisted(files, sink, indexes);
    Ok(())
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
