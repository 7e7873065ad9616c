//! The format specification is one index (docs/FORMAT.md) and pages under docs/format/
//! that name each other's sections by link. This test follows every relative link of the
//! README and of every page under docs/ (outside fenced blocks) and fails on one whose
//! file does not exist or whose `#anchor` is no heading of that file, with the anchors
//! GitHub makes (lower case; letters, digits, spaces, `-` and `_` kept, spaces become `-`;
//! a repeated heading gets `-1`, `-2`, ...). Moving a section breaks it until every link
//! to the section is moved too.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The lines of a Markdown file outside fenced blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file's headings give.
fn anchors(path: &Path) -> HashSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut out = HashSet::new();
    for line in prose(&text) {
        let level = line.bytes().take_while(|&b| b == b'#').count();
        let Some(text) = line.get(level..).and_then(|t| t.strip_prefix(' ')) else {
            continue;
        };
        if !(1..=6).contains(&level) {
            continue;
        }
        let s = slug(text);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a line.
fn links(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &line[i + 2..];
            let end = rest.find(')')?;
            Some(&rest[..end])
        })
        .filter(|t| !t.contains(' ') && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "docs/format"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

#[test]
fn every_link_of_the_docs_reaches_a_file_and_a_heading() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in prose(&text) {
            for target in links(line) {
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                checked += 1;
                if !dest.exists() {
                    bad.push(format!("{}: {target}: no such file", file.display()));
                } else if !anchor.is_empty()
                    && dest.extension().is_some_and(|x| x == "md")
                    && !anchors(&dest).contains(anchor)
                {
                    bad.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    assert!(
        checked > 20,
        "only {checked} links found: the parser lost them"
    );
}

#[test]
fn the_slug_is_githubs() {
    assert_eq!(
        slug("Packs (`packs/<2 hex>/<64 hex>`)"),
        "packs-packs2-hex64-hex"
    );
    assert_eq!(
        slug("Versions, flags and reserved fields: what a reader must do"),
        "versions-flags-and-reserved-fields-what-a-reader-must-do"
    );
    assert_eq!(
        slug("Bundles (`modelcas export` / `modelcas import`)"),
        "bundles-modelcas-export--modelcas-import"
    );
}

/// The index (docs/FORMAT.md) says on which page each section that other files name as
/// "docs/FORMAT.md, *section*" now is: every name of its table must be a heading of that
/// page (or, for a part of a section, in its text), so that the table moves with them.
#[test]
fn the_index_names_sections_that_are_on_the_pages_it_gives() {
    let index_path = root().join("docs/FORMAT.md");
    let index = std::fs::read_to_string(&index_path).unwrap();
    let table: Vec<&str> = index
        .lines()
        .skip_while(|l| !l.starts_with("| section | page |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(table.len() >= 6, "the index lost its section table");
    let mut checked = 0;
    for row in table {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let pages: Vec<PathBuf> = links(cells[1])
            .iter()
            .map(|t| root().join("docs").join(t.split('#').next().unwrap()))
            .collect();
        let pages = if pages.is_empty() {
            vec![index_path.clone()]
        } else {
            pages
        };
        let texts: Vec<String> = pages
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        for name in cells[0].split("; ") {
            let (name, parts) = match name.split_once(" (") {
                Some((n, rest)) => (n, rest.trim_end_matches(')').split(", ").collect()),
                None => (name, Vec::new()),
            };
            let heading = |t: &String| {
                prose(t).iter().any(|l| {
                    l.starts_with('#') && l.trim_start_matches('#').trim_start().starts_with(name)
                })
            };
            assert!(
                texts.iter().any(heading),
                "{name:?}: no such heading on {pages:?}"
            );
            for part in parts {
                assert!(
                    texts.iter().any(|t| t.contains(part)),
                    "{part:?}: not on {pages:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 30,
        "only {checked} sections in the index's table"
    );
}
