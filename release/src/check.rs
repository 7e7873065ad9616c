//! The check of one revision: classify it, then run each rule module over its files.

use std::collections::BTreeSet;

use crate::files::Files;
use crate::report::{CheckError, Options, Report, Summary};
use crate::{automap, header, problems, revision, tokenizer, weights};

/// Checks one revision. Deterministic: the same files give an equal report.
pub fn check(files: &dyn Files, opts: &Options) -> Result<Report, CheckError> {
    let mut sink = problems::Sink::new(opts.partial);
    let class = revision::classify(files.list());
    let mut summary = Summary {
        class: class.as_str().to_string(),
        ..Summary::default()
    };
    let indexes = if class == revision::Class::Other {
        Vec::new()
    } else {
        weights::read_indexes(files, &mut sink)?
    };
    let named: BTreeSet<String> = indexes
        .iter()
        .flat_map(|i| i.files.keys().cloned())
        .collect();
    let headers = header::check_all(files, &mut sink, &named)?;
    summary.safetensors_files = headers.files;
    summary.tensors = headers.tensors;
    match class {
        revision::Class::Model => {
            let needed = !revision::gguf_only(files);
            let config = revision::check_config(files, &mut sink, needed)?;
            revision::check_loader_json(files, &mut sink, class)?;
            weights::check_weights(files, &mut sink);
            weights::check_shards(files, &mut sink, &named);
            weights::check_indexes(files, &mut sink, &indexes, &headers.names)?;
            let tok = tokenizer::check(files, &mut sink, needed)?;
            summary.tokenizer = tok.checked;
            let mut refs = config.auto_map;
            refs.extend(tok.auto_map);
            automap::check(files, &mut sink, &refs)?;
        }
        revision::Class::Adapter => {
            revision::check_loader_json(files, &mut sink, class)?;
            weights::check_shards(files, &mut sink, &named);
            weights::check_indexes(files, &mut sink, &indexes, &headers.names)?;
        }
        revision::Class::Other => {
            if !revision::empty(files, &mut sink) {
                revision::check_loader_json(files, &mut sink, class)?;
                revision::not_a_model(files, &mut sink);
            }
        }
    }
    Ok(sink.finish(summary))
}
