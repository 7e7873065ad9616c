//! The rules against in-memory revisions: one test per code, the safetensors oracle, the
//! caps, parsers fed random input, determinism.

use proptest::prelude::*;

use crate::fixture::{self, good, Mem};
use crate::problems::Sink;
use crate::*;

/// Heap bytes live on this thread, and their peak: the allocator of this test binary
/// counts per thread, so tests running beside one do not disturb its numbers.
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    pub struct Counting;

    fn add(n: isize) {
        let _ = LIVE.try_with(|live| {
            let now = live.get() + n;
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
    }

    // SAFETY: every call is passed to `System` as is; only counters change beside it.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
            add(new as isize - layout.size() as isize);
            // SAFETY: as for `GlobalAlloc::realloc`.
            unsafe { System.realloc(ptr, layout, new) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// The peak of live heap bytes while `f` runs, above what was live before it.
    pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let start = LIVE.with(Cell::get);
        PEAK.with(|p| p.set(start));
        let out = f();
        (out, (PEAK.with(Cell::get) - start).max(0) as usize)
    }
}

fn run(files: &Mem) -> Report {
    check(files, &Options::default()).expect("in-memory reads do not fail")
}

/// The problem of `code` in the variant of `code`.
fn problem_of(code: &str) -> Problem {
    let report = run(&fixture::variant(code));
    let found = report.problems.iter().find(|p| p.code == code).cloned();
    found.unwrap_or_else(|| panic!("{code}: not found in {:#?}", report.problems))
}

macro_rules! per_code {
    ($($test:ident: $code:literal, $severity:ident, $path:literal, $start:literal;)*) => {$(
        #[test]
        fn $test() {
            let p = problem_of($code);
            assert_eq!(p.severity, Severity::$severity, "{p:?}");
            assert_eq!(p.path, $path, "{p:?}");
            assert!(p.message.starts_with(&format!("{}: ", p.path)), "{p:?}");
            assert!(p.message.starts_with($start), "{p:?}");
        }
    )*};
}

per_code! {
    config_missing: "config.missing", Error, "config.json", "config.json: missing (vLLM and transformers read it first)";
    config_invalid: "config.invalid", Error, "config.json", "config.json: not valid JSON: EOF while parsing";
    config_unnamed: "config.unnamed", Warning, "config.json", "config.json: neither \"model_type\" nor \"architectures\"";
    json_invalid: "json.invalid", Error, "generation_config.json", "generation_config.json: not valid JSON: trailing characters";
    weights_missing: "weights.missing", Error, "model.safetensors", "model.safetensors: missing, and no other weights";
    weights_unchecked: "weights.unchecked", Warning, "pytorch_model.bin", "pytorch_model.bin: pickle weights are not checked";
    safetensors_header_length: "safetensors.header-length", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: header of 1,000,104 bytes in a 176-byte file (truncated inside the header?)";
    safetensors_header: "safetensors.header", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: header is not";
    safetensors_dtype: "safetensors.dtype", Warning, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: tensor \"lm_head.weight\" has dtype \"F8_E3M4\", unknown to safetensors 0.7";
    safetensors_size: "safetensors.size", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: tensor \"lm_head.weight\" is BF16 [8, 2] = 32 bytes, but data_offsets [0, 64] hold 64";
    safetensors_offsets: "safetensors.offsets", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: tensor \"lm_head.weight\": data_offsets [64, 0] begin after they end";
    safetensors_overlap: "safetensors.overlap", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: tensors \"lm_head.weight\" and \"x\" overlap (data bytes 32..64)";
    safetensors_gap: "safetensors.gap", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: data bytes 0..64 belong to no tensor";
    safetensors_truncated: "safetensors.truncated", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: the header's tensors need 64 data bytes, the file has 48";
    safetensors_trailing: "safetensors.trailing", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: 512 bytes after the last tensor";
    shards_missing: "shards.missing", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: missing (the revision has shards 1 of 2)";
    index_invalid: "index.invalid", Error, "model.safetensors.index.json", "model.safetensors.index.json: no \"weight_map\" object";
    index_missing_file: "index.missing-file", Error, "model.safetensors.index.json", "model.safetensors.index.json: names model-00002-of-00002.safetensors (for 1 tensor, e.g. \"lm_head.weight\")";
    index_missing_tensor: "index.missing-tensor", Error, "model.safetensors.index.json", "model.safetensors.index.json: maps \"lm_head.bias\" to model-00002-of-00002.safetensors, which has no such tensor";
    index_unlisted: "index.unlisted", Warning, "model-extra.safetensors", "model-extra.safetensors: not in model.safetensors.index.json";
    tokenizer_missing: "tokenizer.missing", Error, "tokenizer.json", "tokenizer.json: missing, and no other tokenizer";
    tokenizer_invalid: "tokenizer.invalid", Error, "tokenizer.json", "tokenizer.json: no \"model\" object";
    tokenizer_structure: "tokenizer.structure", Warning, "tokenizer.json", "tokenizer.json: model \"BPE\" has no \"merges\": the tokenizers library refuses it (\"Missing vocab/merges\")";
    auto_map_missing: "auto_map.missing", Error, "configuration_mpt.py", "configuration_mpt.py: missing; config.json's auto_map names configuration_mpt.MPTConfig";
    auto_map_import: "auto_map.import", Error, "attention.py", "attention.py: missing; modeling_mpt.py imports .attention (line 4)";
    auto_map_remote: "auto_map.remote", Warning, "config.json", "config.json: auto_map takes code from another repository (org/x--modeling.M)";
    chat_template_missing: "chat_template.missing", Warning, "tokenizer_config.json", "tokenizer_config.json: the tokenizer has chat tokens (\"<|im_start|>\") but no chat template";
    check_too_large: "check.too-large", Warning, "tokenizer.json", "tokenizer.json: 700,000,000 bytes, more than the check reads (134,217,728): not checked";
    release_not_a_model: "release.not-a-model", Warning, "model_index.json", "model_index.json: not a model vLLM loads (a diffusers pipeline)";
    release_empty: "release.empty", Error, ".", ".: no model files (no config.json, weights, tokenizer or pipeline)";
    file_lfs_pointer: "file.lfs-pointer", Error, "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors: a Git LFS pointer file, not the file's content";
}

#[test]
fn every_code_has_a_variant_with_only_its_own_problem_or_its_consequences() {
    for code in fixture::CODES {
        let report = run(&fixture::variant(code));
        assert!(
            report.problems.iter().any(|p| p.code == *code),
            "{code}: {:#?}",
            report.problems
        );
    }
}

#[test]
fn a_good_model_passes_with_zero_problems() {
    let report = run(&good());
    assert_eq!(report.problems, vec![]);
    assert_eq!(report.omitted, 0);
    assert_eq!(report.verdict(), Verdict::Passed);
    assert_eq!(
        report.summary,
        Summary {
            class: "model".into(),
            safetensors_files: 2,
            tensors: 3,
            tokenizer: Some("tokenizer.json".into())
        }
    );
}

#[test]
fn a_bpe_without_merges_gives_exactly_one_structure_warning() {
    let report = run(&good().with("tokenizer.json", fixture::TOKENIZER_NO_MERGES));
    assert_eq!(report.problems.len(), 1, "{:#?}", report.problems);
    assert_eq!(report.problems[0].code, "tokenizer.structure");
    assert_eq!(report.problems[0].severity, Severity::Warning);
    assert_eq!(report.verdict(), Verdict::Warnings);
    assert_eq!(report.verdict().as_str(), "warnings");
}

#[test]
fn checking_twice_gives_equal_reports() {
    for code in fixture::CODES {
        let files = fixture::variant(code);
        assert_eq!(run(&files), run(&files), "{code}");
    }
}

#[test]
fn params_json_alone_is_a_warning() {
    let report = run(&good().without("config.json").with("params.json", "{}"));
    let p = &report.problems[0];
    assert_eq!(
        (p.code.as_str(), p.severity),
        ("config.missing", Severity::Warning)
    );
    assert!(p.message.contains("--config-format mistral"), "{p:?}");
}

#[test]
fn a_partial_commit_makes_missing_files_warnings_that_say_so() {
    let opts = Options {
        partial: Some(Partial {
            stored: 7,
            upstream: 1234,
        }),
    };
    let report = check(
        &good().without("tokenizer.json").without(fixture::SHARD2),
        &opts,
    )
    .unwrap();
    assert_eq!(report.errors(), 0, "{:#?}", report.problems);
    for code in ["tokenizer.missing", "index.missing-file"] {
        let p = report.problems.iter().find(|p| p.code == code).unwrap();
        assert_eq!(p.severity, Severity::Warning);
        assert!(
            p.message
                .ends_with(" (a partial commit: 7 of 1,234 upstream files stored)"),
            "{p:?}"
        );
    }
    // A broken file that is there stays an error.
    let report = check(&fixture::variant("safetensors.truncated"), &opts).unwrap();
    assert_eq!(report.verdict(), Verdict::Failed);
}

fn partial(stored: u64, upstream: u64) -> Options {
    Options {
        partial: Some(Partial { stored, upstream }),
    }
}

#[test]
fn a_partial_commit_excuses_no_more_missing_files_than_it_left_out() {
    // Two paths missing (the shard the index names, the tokenizer): excused when at
    // least two upstream files were left out, errors when only one was.
    let files = good().without("tokenizer.json").without(fixture::SHARD2);
    let report = check(&files, &partial(3, 5)).unwrap();
    assert_eq!(report.errors(), 0, "{:#?}", report.problems);
    assert_eq!(report.warnings(), 2, "{:#?}", report.problems);
    let report = check(&files, &partial(3, 4)).unwrap();
    let missing: Vec<_> = report
        .problems
        .iter()
        .filter(|p| ["tokenizer.missing", "index.missing-file"].contains(&p.code.as_str()))
        .collect();
    assert_eq!(missing.len(), 2, "{:#?}", report.problems);
    for p in missing {
        assert_eq!(p.severity, Severity::Error, "{p:?}");
        assert!(
            p.message.ends_with(
                " (a partial commit: 3 of 4 upstream files stored, but more files are missing than were left out)"
            ),
            "{p:?}"
        );
    }
    // A shard named by the index and by the shard set counts once; the auto_map module too.
    let files = good()
        .without(fixture::SHARD2)
        .with("config.json", r#"{"model_type": "mpt", "auto_map": {"AutoConfig": "configuration_mpt.MPTConfig", "AutoModel": "configuration_mpt.MPTModel"}}"#);
    let report = check(&files, &partial(3, 5)).unwrap();
    assert_eq!(report.errors(), 0, "{:#?}", report.problems);
    // More stored than upstream (a listing that changed): nothing was left out.
    let report = check(&good().without("tokenizer.json"), &partial(9, 8)).unwrap();
    assert_eq!(report.errors(), 1, "{:#?}", report.problems);
}

#[test]
fn an_empty_or_documentation_only_revision_fails() {
    let docs = Mem::default()
        .with("README.md", "# gone")
        .with(".gitattributes", "*.safetensors filter=lfs")
        .with("LICENSE", "MIT")
        .with("USE_POLICY.md", "x")
        .with("notice.txt", "x")
        .with("assets/logo.png", vec![0x89, b'P'])
        .with("docs/intro.md", "x");
    for files in [Mem::default(), docs.clone()] {
        let report = run(&files);
        let found: Vec<_> = report
            .problems
            .iter()
            .map(|p| (p.code.as_str(), p.severity, p.path.as_str()))
            .collect();
        assert_eq!(found, [("release.empty", Severity::Error, ".")]);
        assert_eq!(report.summary.class, "other");
    }
    // Anything else is no longer empty: a dataset is "other", its warning not on
    // .gitattributes.
    let data = docs.clone().with("data/train.parquet", vec![1]);
    let p = &run(&data).problems;
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        (p[0].code.as_str(), p[0].path.as_str()),
        ("release.not-a-model", "data/train.parquet")
    );
    // A tokenizer-only repository is no empty one.
    let tok = docs.with("tokenizer.json", fixture::TOKENIZER_BPE);
    assert_eq!(run(&tok).problems[0].code, "release.not-a-model");
}

#[test]
fn a_git_lfs_pointer_is_named_instead_of_the_parse_error() {
    let pointer = fixture::lfs_pointer(499_723);
    for path in [
        fixture::SHARD1,
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        fixture::INDEX,
        "tokenizer.model",
        "vocab.txt",
        "merges.txt",
        "vocab.json",
        "tekken.json",
        "qwen.tiktoken",
        "chat_template.json",
    ] {
        let report = run(&good().with(path, pointer.clone()));
        let found: Vec<_> = report
            .problems
            .iter()
            .map(|p| (p.code.as_str(), p.path.as_str()))
            .collect();
        assert!(
            found.contains(&("file.lfs-pointer", path)),
            "{path}: {found:?}"
        );
        assert!(
            report
                .problems
                .iter()
                .filter(|p| p.path == path)
                .all(|p| p.code == "file.lfs-pointer"),
            "{path}: {found:?}"
        );
    }
    // 1,024 bytes or more is no pointer: the parse error as before.
    let long = format!("{pointer}{}", " ".repeat(1024));
    let report = run(&good().with("config.json", long));
    assert_eq!(report.problems[0].code, "config.invalid");
}

#[test]
fn a_read_failure_is_an_error_of_the_check_not_a_problem() {
    let err = check(&good().failing(fixture::SHARD1), &Options::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("reading model-00001-of-00002.safetensors: "),
        "{err}"
    );
    let err = check(&good().failing("tokenizer.json"), &Options::default()).unwrap_err();
    assert!(matches!(err, CheckError::Read { ref path, .. } if path == "tokenizer.json"));
    // A file shorter than listed is a read failure too.
    let short = good().with_size(fixture::SHARD1, fixture::shard1()[..40].to_vec(), 200);
    assert!(check(&short, &Options::default()).is_err());
}

#[test]
fn problems_are_sorted_errors_first_then_path_then_code() {
    let files = good()
        .without("config.json")
        .with("tokenizer.json", fixture::TOKENIZER_NO_MERGES)
        .with("a.safetensors", vec![1, 2]);
    let report = run(&files);
    let keys: Vec<_> = report
        .problems
        .iter()
        .map(|p| (p.severity, p.path.clone(), p.code.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(report.problems[0].severity, Severity::Error);
    assert_eq!(
        report.problems.last().map(|p| p.severity),
        Some(Severity::Warning)
    );
}

#[test]
fn at_most_eight_per_file_and_code_the_eighth_saying_how_many_more() {
    let extra: String = (0..10)
        .map(|i| format!(r#", "ghost.{i}": "{}""#, fixture::SHARD2))
        .collect();
    let report = run(&good().with(fixture::INDEX, fixture::index(&extra)));
    let kept: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.code == "index.missing-tensor")
        .collect();
    assert_eq!(kept.len(), MAX_PER_FILE_CODE);
    assert!(kept[7].message.ends_with(" … and 2 more"), "{:?}", kept[7]);
    assert!(!kept[6].message.contains("more"));
}

#[test]
fn past_max_problems_the_rest_are_counted() {
    let mut files = Mem::default();
    for i in 0..1001 {
        files = files.with(&format!("d/{i:04}.safetensors"), vec![0u8; 3]);
    }
    let report = run(&files);
    assert_eq!(report.summary.class, "other");
    assert_eq!(report.problems.len(), MAX_PROBLEMS);
    assert_eq!(
        report.omitted, 2,
        "1,001 headers and the not-a-model warning"
    );
    assert!(report
        .problems
        .iter()
        .all(|p| p.severity == Severity::Error));
}

#[test]
fn a_nine_byte_file_claiming_two_to_the_63_is_refused_before_any_read_by_it() {
    let mut bytes = (1u64 << 63).to_le_bytes().to_vec();
    bytes.push(b'{');
    let report = run(&good().with(fixture::SHARD2, bytes));
    let p = report
        .problems
        .iter()
        .find(|p| p.code == "safetensors.header-length")
        .unwrap();
    assert!(
        p.message
            .contains("9,223,372,036,854,775,808 bytes, more than safetensors reads (100,000,000)"),
        "{p:?}"
    );
}

fn header_of(entries: usize) -> Vec<u8> {
    let body: Vec<String> = (0..entries)
        .map(|i| format!("\"t{i}\":[\"U8\",[],[0,0]]"))
        .collect();
    fixture::st_raw(&format!("{{{}}}", body.join(",")), 0)
}

#[test]
fn more_tensors_than_the_cap_is_a_warning_and_ranges_are_not_checked() {
    let files = Mem::default().with("x.safetensors", header_of(4));
    let mut sink = Sink::new(None);
    let header = header::check_file(&files, &mut sink, &files.list()[0], 3).unwrap();
    assert_eq!(header.count, 4);
    assert!(header.names.is_none());
    let report = sink.finish(Summary::default());
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0]
        .message
        .starts_with("x.safetensors: 4 tensors, more than the check reads (3)"));
}

#[test]
fn check_uses_max_tensors() {
    let files = Mem::default()
        .with("config.json", fixture::CONFIG)
        .with("x.safetensors", header_of(MAX_TENSORS + 1));
    let report = run(&files);
    let p = report
        .problems
        .iter()
        .find(|p| p.code == "safetensors.too-many")
        .unwrap();
    assert_eq!(p.message, "x.safetensors: 1,048,577 tensors, more than the check reads (1,048,576): ranges not checked");
    assert_eq!(report.summary.tensors, MAX_TENSORS as u64 + 1);
}

/// (code, severity) of each header problem of a file with this header and `data` bytes.
fn header_codes(header: &str, data: usize) -> Vec<(String, Severity)> {
    header_problems(&fixture::st_raw(header, data))
        .into_iter()
        .map(|p| (p.code, p.severity))
        .collect()
}

#[test]
fn an_unknown_dtype_still_has_the_other_sizes_and_all_ranges_checked() {
    let w = |c: &str| (c.to_string(), Severity::Warning);
    let e = |c: &str| (c.to_string(), Severity::Error);
    let xyz = r#""a":{"dtype":"XYZ","shape":[1],"data_offsets":[0,4]}"#;
    // Alone and well placed: the warning only (the crate's verdict is skipped).
    assert_eq!(
        header_codes(&format!("{{{xyz}}}"), 4),
        [w("safetensors.dtype")]
    );
    // Another tensor's size.
    let bad_size = format!(r#"{{{xyz},"b":{{"dtype":"F32","shape":[100],"data_offsets":[4,8]}}}}"#);
    assert_eq!(
        header_codes(&bad_size, 8),
        [e("safetensors.size"), w("safetensors.dtype")]
    );
    // Ranges, the unknown tensor's included: truncated, trailing, a gap, an overlap.
    let b = r#""b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}"#;
    assert_eq!(
        header_codes(&format!("{{{xyz},{b}}}"), 6),
        [e("safetensors.truncated"), w("safetensors.dtype")]
    );
    assert_eq!(
        header_codes(&format!("{{{xyz},{b}}}"), 12),
        [e("safetensors.trailing"), w("safetensors.dtype")]
    );
    let far = r#""a":{"dtype":"XYZ","shape":[1],"data_offsets":[8,12]}"#;
    assert_eq!(
        header_codes(&format!("{{{far},{b}}}"), 12),
        [e("safetensors.gap"), w("safetensors.dtype")]
    );
    let wide = r#""a":{"dtype":"XYZ","shape":[1],"data_offsets":[0,6]}"#;
    assert_eq!(
        header_codes(&format!("{{{wide},{b}}}"), 8),
        [e("safetensors.overlap"), w("safetensors.dtype")]
    );
    // A dtype that is no dtype's shape is an error.
    for dtype in ["float32", "", "F32 ", "1F"] {
        let header = format!(r#"{{"a":{{"dtype":"{dtype}","shape":[1],"data_offsets":[0,4]}}}}"#);
        let problems = header_problems(&fixture::st_raw(&header, 4));
        assert_eq!(problems.len(), 1, "{dtype:?}: {problems:?}");
        assert_eq!(
            (problems[0].code.as_str(), problems[0].severity),
            ("safetensors.dtype", Severity::Error),
            "{dtype:?}"
        );
        assert!(
            problems[0].message.contains("not a safetensors dtype"),
            "{problems:?}"
        );
    }
    // A repeated name whose first entry has an unknown dtype (the crate refuses it).
    let twice = r#"{"t":{"dtype":"BF26","shape":[0],"data_offsets":[0,0]},"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    assert_eq!(header_codes(twice, 0), [w("safetensors.dtype")]);
}

#[test]
fn data_offsets_of_the_wrong_length_say_so() {
    for offsets in ["[0,4,4]", "[0]", "[]"] {
        let header = format!(r#"{{"a":{{"dtype":"F32","shape":[1],"data_offsets":{offsets}}}}}"#);
        let problems = header_problems(&fixture::st_raw(&header, 4));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .message
                .starts_with("f.safetensors: header is not an object of tensor entries: data_offsets must be [begin, end]"),
            "{problems:?}"
        );
    }
}

/// A model of `shards` shards, each holding the same `n` one-byte tensors, and an index
/// naming each tensor in one of them.
fn many_names(shards: usize, n: usize) -> Mem {
    let name = |i: usize| format!("model.layers.{i}.self_attn.q_proj.weight");
    let body: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#""{}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
                name(i),
                i + 1
            )
        })
        .collect();
    let shard = fixture::st_raw(&format!("{{{}}}", body.join(",")), n);
    let file = |s: usize| format!("model-{s:05}-of-{shards:05}.safetensors");
    let map: Vec<String> = (0..n)
        .map(|i| format!(r#""{}": "{}""#, name(i), file(i % shards + 1)))
        .collect();
    let mut files = good()
        .without(fixture::SHARD1)
        .without(fixture::SHARD2)
        .with(
            fixture::INDEX,
            format!(r#"{{"weight_map": {{{}}}}}"#, map.join(",")),
        );
    for s in 1..=shards {
        files = files.with(&file(s), shard.clone());
    }
    files
}

#[test]
fn tensor_names_kept_for_the_index_do_not_pile_up_across_shards() {
    let n = 50_000;
    let (one, eight) = (many_names(1, n), many_names(8, n));
    let (report, peak1) = heap::peak_during(|| run(&one));
    assert_eq!(report.problems, vec![]);
    let (report, peak8) = heap::peak_during(|| run(&eight));
    assert_eq!(report.problems, vec![]);
    assert_eq!(report.summary.tensors, 8 * n as u64);
    // Seven more shards of 50,000 names: 8 bytes a name kept, not the names.
    let growth = peak8.saturating_sub(peak1);
    assert!(
        growth < 7 * n * 16,
        "peak {peak1} bytes for 1 shard, {peak8} for 8: {growth} more"
    );
    // The index still finds a tensor that is not there, and quotes its name.
    let ghost = eight.with(
        fixture::INDEX,
        r#"{"weight_map": {"model.layers.0.self_attn.q_proj.weight": "model-00001-of-00008.safetensors", "ghost.weight": "model-00002-of-00008.safetensors"}}"#,
    );
    let p: Vec<_> = run(&ghost)
        .problems
        .into_iter()
        .filter(|p| p.code == "index.missing-tensor")
        .collect();
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        p[0].message,
        "model.safetensors.index.json: maps \"ghost.weight\" to model-00002-of-00008.safetensors, which has no such tensor"
    );
}

#[test]
fn a_python_padded_header_and_an_empty_file_pass() {
    for bytes in [
        fixture::st(&[("a", "F32", &[2, 2])]),
        fixture::st_raw("{}", 0),
        fixture::st(&[]),
    ] {
        assert!(safetensors::SafeTensors::deserialize(&bytes).is_ok());
        assert_eq!(header_problems(&bytes), vec![]);
    }
}

#[test]
fn a_truncated_or_junk_tokenizer_model_is_invalid_and_a_good_one_passes() {
    // field 1 (pieces), 3 bytes; field 2 (trainer_spec) varint.
    let good_spm = vec![0x0a, 0x03, 0x0a, 0x01, b'a', 0x10, 0x05];
    assert_eq!(tokenizer::protobuf_walk(&good_spm[..]).unwrap(), Ok(()));
    let cut = &good_spm[..4];
    assert!(tokenizer::protobuf_walk(cut)
        .unwrap()
        .unwrap_err()
        .contains("truncated"));
    let report = run(&good()
        .without("tokenizer.json")
        .with("tokenizer.model", cut.to_vec()));
    assert_eq!(
        report
            .problems
            .iter()
            .map(|p| p.code.as_str())
            .collect::<Vec<_>>(),
        ["tokenizer.invalid"]
    );
    let report = run(&good()
        .without("tokenizer.json")
        .with("tokenizer.model", good_spm));
    assert_eq!(report.problems, vec![]);
    let tiktoken = "IQ== 0\nIg== 1\n";
    let report = run(&good()
        .without("tokenizer.json")
        .with("tokenizer.model", tiktoken));
    assert_eq!(report.problems, vec![]);
    assert_eq!(report.summary.tokenizer.as_deref(), Some("tokenizer.model"));
}

#[test]
fn other_tokenizers_count() {
    let bpe = good()
        .without("tokenizer.json")
        .with("vocab.json", r#"{"a": 0}"#)
        .with("merges.txt", "#version: 0.2\na b\n");
    assert_eq!(run(&bpe).problems, vec![]);
    assert_eq!(
        run(&bpe).summary.tokenizer.as_deref(),
        Some("merges.txt, vocab.json")
    );
    let vocab_only = good()
        .without("tokenizer.json")
        .with("vocab.json", r#"{"a": 0}"#);
    assert_eq!(run(&vocab_only).problems[0].code, "tokenizer.missing");
    let not_utf8 = good().with("vocab.txt", vec![b'a', b'\n', 0xff, b'\n']);
    let p = &run(&not_utf8).problems[0];
    assert_eq!(
        (p.code.as_str(), p.message.as_str()),
        ("tokenizer.invalid", "vocab.txt: line 2 is not UTF-8")
    );
    let tekken = good()
        .without("tokenizer.json")
        .with("tekken.json", r#"{"vocab": []}"#);
    assert_eq!(run(&tekken).problems, vec![]);
}

#[test]
fn tiktoken_sentencepiece_and_versioned_tokenizer_files_count() {
    // One piece: field 1 of 8 bytes (piece "a", score 0.0).
    let spm = vec![0x0a, 0x08, 0x0a, 0x01, b'a', 0x15, 0, 0, 0, 0];
    let tiktoken = "IQ== 0\nIg== 1\n";
    let cases: [(&str, Vec<u8>); 6] = [
        ("tiktoken.model", tiktoken.into()),
        ("qwen.tiktoken", tiktoken.into()),
        ("tokenizer.model.v3", spm.clone()),
        ("tokenizer.model.v7", spm.clone()),
        ("spiece.model", spm.clone()),
        ("sentencepiece.bpe.model", spm.clone()),
    ];
    for (path, bytes) in cases {
        let files = good().without("tokenizer.json").with(path, bytes);
        let report = run(&files);
        assert_eq!(report.problems, vec![], "{path}");
        assert_eq!(report.summary.tokenizer.as_deref(), Some(path));
        // Each is read: junk in it is tokenizer.invalid.
        let junk = good().without("tokenizer.json").with(path, vec![0xff; 9]);
        let codes: Vec<_> = run(&junk).problems.into_iter().map(|p| p.code).collect();
        assert_eq!(codes, ["tokenizer.invalid"], "{path}");
    }
    // Not at the top level, or not of those names: no tokenizer.
    for path in ["sub/qwen.tiktoken", "tokenizer.model.", "x.model"] {
        let files = good().without("tokenizer.json").with(path, spm.clone());
        assert_eq!(run(&files).problems[0].code, "tokenizer.missing", "{path}");
    }
}

#[test]
fn a_custom_tokenizer_named_by_auto_map_counts_when_its_module_is_there() {
    let config = r#"{"auto_map": {"AutoTokenizer": ["tokenization_glm.GLMTokenizer", null]}, "chat_template": "x"}"#;
    let files = good()
        .without("tokenizer.json")
        .with("tokenizer_config.json", config)
        .with("ice_text.model", vec![0x0a, 0x01, b'a'])
        .with("tokenization_glm.py", "import sentencepiece\n");
    assert_eq!(run(&files).problems, vec![]);
    // Without the module: auto_map.missing and tokenizer.missing.
    let codes: Vec<_> = run(&files.clone().without("tokenization_glm.py"))
        .problems
        .into_iter()
        .map(|p| p.code)
        .collect();
    assert_eq!(codes, ["auto_map.missing", "tokenizer.missing"]);
    // Another auto_map key (a model class) is no tokenizer.
    let other = files.with(
        "tokenizer_config.json",
        r#"{"auto_map": {"AutoModel": "tokenization_glm.GLMTokenizer"}}"#,
    );
    assert_eq!(run(&other).problems[0].code, "tokenizer.missing");
}

#[test]
fn a_gguf_only_revision_needs_no_config_or_tokenizer() {
    let gguf = Mem::default()
        .with("model.Q4_K_M.gguf", b"GGUF\x03\x00\x00\x00".to_vec())
        .with("README.md", "x");
    let report = run(&gguf);
    assert_eq!(report.summary.class, "model");
    assert_eq!(report.problems, vec![]);
    // Beside safetensors or pickle weights, the GGUF file does not excuse them.
    for (path, bytes) in [
        ("model.safetensors", fixture::st(&[("a", "F32", &[1])])),
        ("pytorch_model.bin", b"PK".to_vec()),
    ] {
        let codes: Vec<_> = run(&gguf.clone().with(path, bytes))
            .problems
            .into_iter()
            .map(|p| p.code)
            .collect();
        assert!(codes.contains(&"config.missing".to_string()), "{codes:?}");
        assert!(
            codes.contains(&"tokenizer.missing".to_string()),
            "{codes:?}"
        );
    }
}

#[test]
fn a_diffusers_pipeline_with_a_top_level_checkpoint_is_other() {
    let files = Mem::default()
        .with(
            "model_index.json",
            r#"{"_class_name": "StableDiffusionXLPipeline"}"#,
        )
        .with(
            "sd_xl_base_1.0.safetensors",
            fixture::st(&[("w", "F32", &[2])]),
        )
        .with("unet/config.json", r#"{"a": 1}"#);
    let report = run(&files);
    assert_eq!(report.summary.class, "other");
    let codes: Vec<_> = report.problems.into_iter().map(|p| p.code).collect();
    assert_eq!(codes, ["release.not-a-model"]);
}

#[test]
fn bare_nan_and_infinity_as_python_writes_them_are_json() {
    let config = r#"{"model_type": "llama", "softcap": Infinity, "x": NaN, "y": [-Infinity, 1], "s": "NaN \" Infinity"}"#;
    let files = good()
        .with("config.json", config)
        .with("generation_config.json", r#"{"max_length": Infinity}"#);
    assert_eq!(run(&files).problems, vec![]);
    // Broken beyond those tokens: the original error.
    let broken = good().with("config.json", r#"{"x": NaN, "y": }"#);
    let p = &run(&broken).problems[0];
    assert_eq!(
        p.message,
        "config.json: not valid JSON: expected value at line 1 column 7"
    );
    assert_eq!(
        json::lenient(br#"{"a":NaN,"b":"NaN\\\"Infinity","c":[-Infinity,Infinity],"NaN":1}"#),
        br#"{"a":null,"b":"NaN\\\"Infinity","c":[null,null],"NaN":1}"#.to_vec()
    );
}

#[test]
fn an_adapter_skips_config_and_tokenizer_rules() {
    let files = Mem::default()
        .with("adapter_config.json", r#"{"peft_type": "LORA"}"#)
        .with(
            "adapter_model.safetensors",
            fixture::st(&[("a", "F32", &[1])]),
        );
    let report = run(&files);
    assert_eq!(report.summary.class, "adapter");
    assert_eq!(report.problems, vec![]);
    let broken = files.with("adapter_config.json", "{");
    assert_eq!(run(&broken).problems[0].code, "json.invalid");
}

#[test]
fn a_chat_template_elsewhere_counts() {
    let no_template = fixture::variant("chat_template.missing");
    assert_eq!(
        run(&no_template.clone().with("chat_template.jinja", "{{ x }}")).problems,
        vec![]
    );
    assert_eq!(
        run(&no_template
            .clone()
            .with("additional_chat_templates/tool.jinja", "x"))
        .problems,
        vec![]
    );
    let json = no_template
        .clone()
        .with("chat_template.json", r#"{"chat_template": "{{ x }}"}"#);
    assert_eq!(run(&json).problems, vec![]);
    let empty = good()
        .with("tokenizer_config.json", r#"{"chat_template": null}"#)
        .with(
            "tokenizer.json",
            fixture::TOKENIZER_BPE.replace("<|im_start|>", "<s>"),
        );
    assert_eq!(run(&empty).problems[0].code, "chat_template.missing");
}

#[test]
fn dir_files_follows_links_to_files_and_skips_git_and_cache() {
    let dir = std::env::temp_dir().join(format!("modelcas-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["sub", ".git", ".cache/huggingface", "blobs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("blobs/abc"), fixture::CONFIG).unwrap();
    std::os::unix::fs::symlink(dir.join("blobs/abc"), dir.join("config.json")).unwrap();
    std::os::unix::fs::symlink(dir.join("sub"), dir.join("dirlink")).unwrap();
    std::fs::write(
        dir.join("sub/x.safetensors"),
        fixture::st(&[("a", "U8", &[3])]),
    )
    .unwrap();
    std::fs::write(dir.join(".git/HEAD"), "x").unwrap();
    std::fs::write(dir.join(".cache/huggingface/x.lock"), "").unwrap();
    let files = DirFiles::open(&dir).unwrap();
    let paths: Vec<_> = files.list().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["blobs/abc", "config.json", "sub/x.safetensors"]);
    assert_eq!(files.read_at("sub/x.safetensors", 0, 8).unwrap().len(), 8);
    assert_eq!(
        files.read_at("config.json", 10, 1 << 20).unwrap().len(),
        fixture::CONFIG.len() - 10
    );
    let report = check(&files, &Options::default()).unwrap();
    assert_eq!(report.summary.safetensors_files, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The header problems of one file in isolation.
fn header_problems(bytes: &[u8]) -> Vec<Problem> {
    let files = Mem::default().with("f.safetensors", bytes.to_vec());
    let mut sink = Sink::new(None);
    header::check_file(&files, &mut sink, &files.list()[0], MAX_TENSORS).unwrap();
    sink.finish(Summary::default()).problems
}

/// A valid small file from (dtype, shape) pairs.
fn valid_file() -> impl Strategy<Value = Vec<u8>> {
    let dtype = prop::sample::select(vec!["BF16", "F32", "U8", "I64", "F4", "BOOL"]);
    let tensor = (dtype, prop::collection::vec(0usize..5, 0..3));
    prop::collection::vec(tensor, 0..4).prop_map(|ts| {
        let names: Vec<String> = (0..ts.len()).map(|i| format!("t{i}")).collect();
        let owned: Vec<(&str, &str, &[usize])> = ts
            .iter()
            .zip(&names)
            .map(|((d, s), n)| (n.as_str(), *d, s.as_slice()))
            .collect();
        fixture::st(&owned)
    })
}

#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Truncate(usize),
    Append(usize),
    Digit(usize, u8),
    Length(i64),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        any::<usize>().prop_map(Edit::Truncate),
        (1usize..20).prop_map(Edit::Append),
        (any::<usize>(), 0u8..10).prop_map(|(i, d)| Edit::Digit(i, d)),
        (-16i64..16).prop_map(Edit::Length),
    ]
}

fn apply(bytes: &mut Vec<u8>, e: &Edit) {
    match *e {
        Edit::Flip(i, b) if !bytes.is_empty() => {
            let i = i % bytes.len();
            bytes[i] ^= b;
        }
        Edit::Truncate(n) if !bytes.is_empty() => bytes.truncate(n % bytes.len()),
        Edit::Append(n) => bytes.extend(std::iter::repeat_n(0u8, n)),
        Edit::Digit(i, d) => {
            let digits: Vec<usize> = (0..bytes.len())
                .filter(|&j| j >= 8 && bytes[j].is_ascii_digit())
                .collect();
            if !digits.is_empty() {
                bytes[digits[i % digits.len()]] = b'0' + d;
            }
        }
        Edit::Length(delta) if bytes.len() >= 8 => {
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            bytes[..8].copy_from_slice(&n.wrapping_add_signed(delta).to_le_bytes());
        }
        _ => {}
    }
}

/// A JSON value of any shape, for the visitors.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "BPE",
            "<|im_start|>",
            "1.0",
            "a.B",
            "o/x--m.C",
            "",
            "F32"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        let keys = prop::sample::select(vec![
            "model",
            "type",
            "vocab",
            "merges",
            "added_tokens",
            "id",
            "content",
            "version",
            "weight_map",
            "auto_map",
            "chat_template",
            "model_type",
            "dtype",
            "shape",
            "data_offsets",
            "__metadata__",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys, inner), 0..5).prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

const PARSED: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.json",
    "tekken.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "model.safetensors.index.json",
    "model-00001-of-00002.safetensors",
    "generation_config.json",
    "modeling_x.py",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn our_header_verdict_is_the_crates(file in valid_file(), edits in prop::collection::vec(edit(), 0..3)) {
        let mut bytes = file;
        for e in &edits {
            apply(&mut bytes, e);
        }
        let ours = header_problems(&bytes);
        let crate_ok = safetensors::SafeTensors::deserialize(&bytes).is_ok();
        prop_assert_eq!(ours.is_empty(), crate_ok, "{:?}", ours);
        prop_assert!(ours.iter().all(|p| p.code != "safetensors.library"), "{:?}", ours);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn no_parser_panics_on_random_bytes(contents in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), PARSED.len())) {
        let mut files = Mem::default();
        for (path, bytes) in PARSED.iter().zip(contents) {
            files = files.with(path, bytes);
        }
        prop_assert!(check(&files, &Options::default()).is_ok());
        prop_assert!(tokenizer::protobuf_walk(&files.read_at("tokenizer.model", 0, 1000).unwrap()[..]).is_ok());
    }

    #[test]
    fn no_visitor_panics_on_random_json(values in prop::collection::vec(json_value(), PARSED.len())) {
        let mut files = Mem::default();
        for (path, v) in PARSED.iter().zip(values) {
            let text = v.to_string();
            let bytes = if path.ends_with(".safetensors") { fixture::st_raw(&text, 0) } else { text.into_bytes() };
            files = files.with(path, bytes);
        }
        let report = check(&files, &Options::default());
        prop_assert!(report.is_ok());
    }
}
