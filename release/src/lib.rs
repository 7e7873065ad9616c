//! The release check (docs/design/release-check.md, §3 and §4): given the files of one model
//! revision, the problems that would keep vLLM or transformers from loading it. Pure: no
//! store, no clock, no network; the files come through the [`Files`] trait, so the store
//! feeds stored files through its checked read path and the CLI a plain directory
//! ([`DirFiles`]).
//!
//! * [`files`] — the input: [`Files`], [`FileInfo`], [`DirFiles`].
//! * `problems` — collecting problems: messages, numbers, the caps per (file, code) and
//!   per report, the partial-commit wording.
//! * `json` — JSON files streamed through serde visitors under a read cap.
//! * `header` — `.safetensors` headers, judged by the safetensors crate.
//! * `revision` — the class of a revision (model, adapter, other) and the loader JSON.
//! * `weights` — weights present, shard sets, `*.safetensors.index.json`.
//! * `tokenizer` — tokenizer files and the chat template.
//! * `automap` — `auto_map` references and the relative imports of remote code.

mod automap;
mod check;
pub mod files;
mod header;
mod json;
mod lookup;
mod problems;
mod report;
mod revision;
mod tokenizer;
mod weights;

pub use check::check;
pub use files::{DirFiles, FileInfo, Files};
pub use report::*;

#[cfg(test)]
#[path = "../tests/fixture/mod.rs"]
mod fixture;

#[cfg(test)]
mod tests;
