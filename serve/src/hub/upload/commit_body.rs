//! The body of `POST .../commit/{branch}`: NDJSON as `huggingface_hub` writes it, parsed
//! into the operations of a commit.

use base64::Engine as _;
use format::{CommitId, Sha256};
use serde_json::Value;

use crate::uploads::{Content, Operation};

/// Most bytes of one line of a commit body other than inline content.
const MAX_LINE: usize = 64 << 10;

/// A commit body: NDJSON, a `header` line (`summary`, `description`, `parentCommit`) first,
/// then `file` (base64 `content`), `lfsFile` (`algo: sha256`, `oid`, `size`),
/// `deletedFile` and `deletedFolder` lines. The error says which line is wrong and why.
pub(crate) fn parse_commit(body: &[u8]) -> Result<(Option<CommitId>, Vec<Operation>), String> {
    let text = std::str::from_utf8(body).map_err(|_| "the commit body is not UTF-8".to_string())?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let line_err = |n: usize, why: &str| format!("commit line {}: {why}", n + 1);
    let Some((n, first)) = lines.next() else {
        return Err("the commit body is empty: it needs a header line".into());
    };
    let header: Value =
        serde_json::from_str(first).map_err(|e| line_err(n, &format!("not JSON ({e})")))?;
    if header.get("key").and_then(Value::as_str) != Some("header") {
        return Err(line_err(
            n,
            "the first line must be the header (`{\"key\": \"header\", ...}`)",
        ));
    }
    let parent = match header.pointer("/value/parentCommit") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .and_then(|s| CommitId::parse(s).ok())
                .ok_or_else(|| line_err(n, "parentCommit is not a 40-hex commit id"))?,
        ),
    };
    let mut ops = Vec::new();
    for (n, line) in lines {
        let v: Value =
            serde_json::from_str(line).map_err(|e| line_err(n, &format!("not JSON ({e})")))?;
        let key = v.get("key").and_then(Value::as_str).unwrap_or("");
        let val = v.get("value").ok_or_else(|| line_err(n, "no `value`"))?;
        let path = val
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| line_err(n, "no `path`"))?
            .to_string();
        if line.len() > MAX_LINE && key != "file" {
            return Err(line_err(n, "too long"));
        }
        ops.push(match key {
            "file" => {
                if val
                    .get("encoding")
                    .and_then(Value::as_str)
                    .unwrap_or("base64")
                    != "base64"
                {
                    return Err(line_err(n, "inline content must be base64"));
                }
                let content = val
                    .get("content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| line_err(n, "no `content`"))?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .map_err(|e| line_err(n, &format!("content is not base64 ({e})")))?;
                Operation::Add {
                    path,
                    content: Content::Inline(bytes),
                }
            }
            "lfsFile" => {
                if val.get("algo").and_then(Value::as_str).unwrap_or("sha256") != "sha256" {
                    return Err(line_err(n, "lfsFile algo must be sha256"));
                }
                let sha256 = val
                    .get("oid")
                    .and_then(Value::as_str)
                    .and_then(|s| Sha256::from_hex(s).ok())
                    .ok_or_else(|| line_err(n, "lfsFile oid is not a sha256 (64 hex digits)"))?;
                let size = val
                    .get("size")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| line_err(n, "lfsFile has no `size`"))?;
                Operation::Add {
                    path,
                    content: Content::Object { sha256, size },
                }
            }
            "deletedFile" => Operation::DeleteFile { path },
            "deletedFolder" => Operation::DeleteFolder { path },
            other => return Err(line_err(n, &format!("unknown operation {other:?}"))),
        });
    }
    Ok((parent, ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_body_parses_as_the_client_writes_it() {
        let body = concat!(
            r#"{"key": "header", "value": {"summary": "s", "description": "", "parentCommit": "0123456789abcdef0123456789abcdef01234567"}}"#,
            "\n",
            r#"{"key": "file", "value": {"content": "aGk=", "path": "a.txt", "encoding": "base64"}}"#,
            "\n",
            r#"{"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "00000000000000000000000000000000000000000000000000000000000000ff", "size": 5}}"#,
            "\n",
            r#"{"key": "deletedFile", "value": {"path": "old"}}"#,
            "\n",
            r#"{"key": "deletedFolder", "value": {"path": "dir/"}}"#,
            "\n",
        );
        let (parent, ops) = parse_commit(body.as_bytes()).unwrap();
        assert_eq!(
            parent.unwrap().to_hex(),
            "0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(ops.len(), 4);
        assert_eq!(
            ops[0],
            Operation::Add {
                path: "a.txt".into(),
                content: Content::Inline(b"hi".to_vec())
            }
        );
        assert!(matches!(
            &ops[1],
            Operation::Add {
                content: Content::Object { size: 5, .. },
                ..
            }
        ));
        assert_eq!(
            ops[3],
            Operation::DeleteFolder {
                path: "dir/".into()
            }
        );
    }

    #[test]
    fn a_bad_commit_body_names_its_line() {
        let header = r#"{"key": "header", "value": {"summary": "s"}}"#;
        for (body, says) in [
            ("", "empty"),
            ("[1]", "header"),
            (r#"{"key": "file"}"#, "header"),
            (&format!("{header}\nnot json"), "line 2: not JSON"),
            (&format!("{header}\n{{\"key\": \"file\", \"value\": {{\"path\": \"a\", \"content\": \"***\"}}}}"), "base64"),
            (&format!("{header}\n{{\"key\": \"lfsFile\", \"value\": {{\"path\": \"a\", \"oid\": \"xyz\", \"size\": 1}}}}"), "sha256"),
            (&format!("{header}\n{{\"key\": \"rename\", \"value\": {{\"path\": \"a\"}}}}"), "unknown operation"),
            (&format!("{header}\n{{\"key\": \"deletedFile\", \"value\": {{}}}}"), "no `path`"),
            (r#"{"key": "header", "value": {"parentCommit": "main"}}"#, "parentCommit"),
        ] {
            let e = parse_commit(body.as_bytes()).unwrap_err();
            assert!(e.contains(says), "{body:?}: {e}");
        }
        assert!(parse_commit(&[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
    }
}
