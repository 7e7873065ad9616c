//! Remote code (§3.2 `auto_map.*`): the modules `auto_map` names in `config.json` and
//! `tokenizer_config.json` must be in the revision, and so must the siblings they import
//! relatively, found as transformers' `get_relative_imports` finds them (`import .x`,
//! `from .x import …`, line by line, no regex) and followed as `get_relative_import_files`
//! does.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{BufRead, BufReader, Read};

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::files::Files;
use crate::json::{skip_map, skip_scalars, skip_seq, skip_str, MaybeStr};
use crate::lookup::find;
use crate::problems::{num, Sink};
use crate::report::{CheckError, MAX_AUTO_MAP_REFS, MAX_PY, MAX_PY_FILES};

/// The references of one `auto_map`, in file order: values are strings or lists of
/// strings and nulls (a tokenizer's slow and fast classes); other shapes are skipped.
/// Those of its `AutoTokenizer` key are kept apart too (a custom tokenizer).
#[derive(Default)]
pub(crate) struct AutoMap {
    all: Vec<String>,
    pub(crate) tokenizer: Vec<String>,
}

/// The module file of a reference `module.Class` in this revision: `module.py`; `None` for
/// code from another repository (`org/x--module.Class`) or a bare name.
pub(crate) fn module_file(name: &str) -> Option<String> {
    if name.contains("--") {
        return None;
    }
    let (module, _class) = name.rsplit_once('.')?;
    Some(format!("{}.py", module.replace('.', "/")))
}

impl AutoMap {
    pub(crate) fn refs(self, source: &str) -> Vec<Ref> {
        self.all
            .into_iter()
            .map(|r| Ref {
                source: source.to_string(),
                name: r,
            })
            .collect()
    }
}

/// One reference and the file that makes it.
pub(crate) struct Ref {
    pub(crate) source: String,
    pub(crate) name: String,
}

impl<'de> Deserialize<'de> for AutoMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AutoMap, D::Error> {
        d.deserialize_any(AutoMapVisitor)
    }
}

struct AutoMapVisitor;

impl<'de> Visitor<'de> for AutoMapVisitor {
    type Value = AutoMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an auto_map object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AutoMap, A::Error> {
        let mut out = AutoMap::default();
        while let Some(key) = map.next_key::<String>()? {
            let refs = map.next_value::<Refs>()?.0;
            if key == "AutoTokenizer" {
                out.tokenizer
                    .extend(refs.iter().take(MAX_AUTO_MAP_REFS).cloned());
            }
            for r in refs {
                // One past the cap is kept, so `check` can say the cap was hit.
                if out.all.len() <= MAX_AUTO_MAP_REFS {
                    out.all.push(r);
                }
            }
        }
        Ok(out)
    }

    skip_seq!(AutoMap::default());
    skip_str!(AutoMap::default());
    skip_scalars!(AutoMap::default());
}

/// One `auto_map` value: a string, or a list whose strings count.
struct Refs(Vec<String>);

impl<'de> Deserialize<'de> for Refs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Refs, D::Error> {
        d.deserialize_any(RefsVisitor)
    }
}

struct RefsVisitor;

impl<'de> Visitor<'de> for RefsVisitor {
    type Value = Refs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a reference or a list of references")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Refs, E> {
        Ok(Refs(vec![s.to_string()]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Refs, A::Error> {
        let mut out = Vec::new();
        while let Some(MaybeStr(s)) = seq.next_element()? {
            if out.len() <= MAX_AUTO_MAP_REFS {
                out.extend(s);
            }
        }
        Ok(Refs(out))
    }

    skip_map!(Refs(Vec::new()));
    skip_scalars!(Refs(Vec::new()));
}

/// Checks the references of `config.json` and `tokenizer_config.json` and the imports of
/// the modules they name.
pub(crate) fn check(files: &dyn Files, sink: &mut Sink, refs: &[Ref]) -> Result<(), CheckError> {
    if refs.len() > MAX_AUTO_MAP_REFS {
        let message = format!(
            "auto_map names more than {} references: the rest are not checked",
            num(MAX_AUTO_MAP_REFS as u64)
        );
        sink.warning("check.too-large", &refs[MAX_AUTO_MAP_REFS].source, message);
    }
    let mut modules: Vec<String> = Vec::new();
    let mut missing = BTreeSet::new();
    for r in refs.iter().take(MAX_AUTO_MAP_REFS) {
        if r.name.contains("--") {
            let message = format!(
                "auto_map takes code from another repository ({}): not checked",
                r.name
            );
            sink.warning("auto_map.remote", &r.source, message);
            continue;
        }
        let Some(file) = module_file(&r.name) else {
            continue;
        };
        if find(files, &file).is_some() {
            if !modules.contains(&file) {
                modules.push(file);
            }
        } else if missing.insert(file.clone()) {
            let message = format!(
                "missing; {}'s auto_map names {} (needed with --trust-remote-code)",
                r.source, r.name
            );
            sink.missing("auto_map.missing", &file, message);
        }
    }
    follow_imports(files, sink, modules)
}

/// Scans the named modules and, in turn, the siblings they import.
fn follow_imports(
    files: &dyn Files,
    sink: &mut Sink,
    mut queue: Vec<String>,
) -> Result<(), CheckError> {
    let mut scanned = BTreeSet::new();
    let mut missing = BTreeSet::new();
    let mut i = 0;
    while i < queue.len() {
        let file = queue[i].clone();
        i += 1;
        if !scanned.insert(file.clone()) {
            continue;
        }
        if scanned.len() > MAX_PY_FILES {
            let message = format!(
                "more than {} modules to scan: its imports are not checked",
                num(MAX_PY_FILES as u64)
            );
            sink.warning("check.too-large", &file, message);
            break;
        }
        let dir = file
            .rsplit_once('/')
            .map(|(d, _)| format!("{d}/"))
            .unwrap_or_default();
        for (line, name) in imports_of(files, sink, &file)? {
            let target = format!("{dir}{name}.py");
            if find(files, &target).is_some() {
                queue.push(target);
            } else if missing.insert(target.clone()) {
                let message = format!("missing; {file} imports .{name} (line {})", num(line));
                sink.missing("auto_map.import", &target, message);
            }
        }
    }
    Ok(())
}

/// The relative imports of one module: (line number, module name).
fn imports_of(
    files: &dyn Files,
    sink: &mut Sink,
    file: &str,
) -> Result<Vec<(u64, String)>, CheckError> {
    let Some(info) = find(files, file) else {
        return Ok(Vec::new());
    };
    if info.size > MAX_PY {
        sink.too_large(file, info.size, MAX_PY);
        return Ok(Vec::new());
    }
    let reader = files.reader(file).map_err(CheckError::read(file))?;
    let mut reader = BufReader::new(reader.take(MAX_PY));
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        if reader
            .read_until(b'\n', &mut buf)
            .map_err(CheckError::read(file))?
            == 0
        {
            break;
        }
        line += 1;
        if let Some(name) = relative_import(&String::from_utf8_lossy(&buf)) {
            out.push((line, name.to_string()));
        }
    }
    Ok(out)
}

/// The module of `import .x` (only that on its line) or `from .x import …`, as
/// transformers' `get_relative_imports` matches `^\s*import\s+\.(\S+)\s*$` and
/// `^\s*from\s+\.(\S+)\s+import`.
pub(crate) fn relative_import(line: &str) -> Option<&str> {
    let line = line.trim_start();
    if let Some(rest) = keyword(line, "import") {
        let name = rest.strip_prefix('.')?;
        let end = name.find(char::is_whitespace).unwrap_or(name.len());
        let (name, after) = name.split_at(end);
        (!name.is_empty() && after.trim().is_empty()).then_some(name)
    } else {
        let rest = keyword(line, "from")?.strip_prefix('.')?;
        let end = rest.find(char::is_whitespace)?;
        let (name, after) = rest.split_at(end);
        (!name.is_empty() && after.trim_start().starts_with("import")).then_some(name)
    }
}

/// What follows `word` and at least one whitespace at the start of `s`.
fn keyword<'a>(s: &'a str, word: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(word)?;
    let trimmed = rest.trim_start();
    (trimmed.len() < rest.len()).then_some(trimmed)
}

#[cfg(test)]
mod tests {
    use super::relative_import;

    #[test]
    fn relative_imports_as_transformers_finds_them() {
        assert_eq!(
            relative_import("from .attention import flash"),
            Some("attention")
        );
        assert_eq!(relative_import("  from .a.b import c\n"), Some("a.b"));
        assert_eq!(relative_import("import .blocks\n"), Some("blocks"));
        assert_eq!(relative_import("import .blocks as b"), None);
        assert_eq!(relative_import("from . import x"), None);
        assert_eq!(relative_import("from torch import nn"), None);
        assert_eq!(relative_import("import torch"), None);
        assert_eq!(
            relative_import("from .x importer"),
            Some("x"),
            "as the regex, which has no word end"
        );
        assert_eq!(relative_import("fromage .x import y"), None);
    }
}
