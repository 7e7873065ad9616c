//! Golden messages: one per code (§3.2). Codes and messages are part of the format from
//! the first release on (they are stored in check records); a change here is a change of
//! the rules and bumps `release::RULES`.

mod fixture;

use release::{check, FileInfo, Files, Options, Severity};

/// (code, severity, message) of each code's variant in `fixture::variant`.
const GOLDEN: &[(&str, Severity, &str)] = &[
    (
        "config.missing",
        Severity::Error,
        r#"config.json: missing (vLLM and transformers read it first)"#,
    ),
    (
        "config.invalid",
        Severity::Error,
        r#"config.json: not valid JSON: EOF while parsing a value at line 2 column 0"#,
    ),
    (
        "config.unnamed",
        Severity::Warning,
        r#"config.json: neither "model_type" nor "architectures": loaders cannot tell which model this is"#,
    ),
    (
        "json.invalid",
        Severity::Error,
        r#"generation_config.json: not valid JSON: trailing characters at line 2 column 1"#,
    ),
    (
        "weights.missing",
        Severity::Error,
        r#"model.safetensors: missing, and no other weights (*.safetensors, *.bin, *.pt) in the revision"#,
    ),
    (
        "weights.unchecked",
        Severity::Warning,
        r#"pytorch_model.bin: pickle weights are not checked (only .safetensors headers are)"#,
    ),
    (
        "safetensors.header-length",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: header of 1,000,104 bytes in a 176-byte file (truncated inside the header?)"#,
    ),
    (
        "safetensors.header",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: header is not an object of tensor entries: invalid type: sequence, expected an object of tensor entries at line 1 column 0"#,
    ),
    (
        "safetensors.dtype",
        Severity::Warning,
        r#"model-00002-of-00002.safetensors: tensor "lm_head.weight" has dtype "F8_E3M4", unknown to safetensors 0.7: its size is not checked"#,
    ),
    (
        "safetensors.size",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: tensor "lm_head.weight" is BF16 [8, 2] = 32 bytes, but data_offsets [0, 64] hold 64"#,
    ),
    (
        "safetensors.offsets",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: tensor "lm_head.weight": data_offsets [64, 0] begin after they end"#,
    ),
    (
        "safetensors.overlap",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: tensors "lm_head.weight" and "x" overlap (data bytes 32..64)"#,
    ),
    (
        "safetensors.gap",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: data bytes 0..64 belong to no tensor (safe_open refuses a file with holes)"#,
    ),
    (
        "safetensors.truncated",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: the header's tensors need 64 data bytes, the file has 48 after its header: 16 bytes missing (truncated copy?)"#,
    ),
    (
        "safetensors.trailing",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: 512 bytes after the last tensor (safe_open refuses: "file not fully covered")"#,
    ),
    (
        "shards.missing",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: missing (the revision has shards 1 of 2)"#,
    ),
    (
        "index.invalid",
        Severity::Error,
        r#"model.safetensors.index.json: no "weight_map" object"#,
    ),
    (
        "index.missing-file",
        Severity::Error,
        r#"model.safetensors.index.json: names model-00002-of-00002.safetensors (for 1 tensor, e.g. "lm_head.weight"), which is not in the revision"#,
    ),
    (
        "index.missing-tensor",
        Severity::Error,
        r#"model.safetensors.index.json: maps "lm_head.bias" to model-00002-of-00002.safetensors, which has no such tensor"#,
    ),
    (
        "index.unlisted",
        Severity::Warning,
        r#"model-extra.safetensors: not in model.safetensors.index.json: loaders that follow the index skip it"#,
    ),
    (
        "tokenizer.missing",
        Severity::Error,
        r#"tokenizer.json: missing, and no other tokenizer (tokenizer.model, tekken.json, vocab.json with merges.txt, vocab.txt): vLLM cannot start without --skip-tokenizer-init"#,
    ),
    (
        "tokenizer.invalid",
        Severity::Error,
        r#"tokenizer.json: no "model" object"#,
    ),
    (
        "tokenizer.structure",
        Severity::Warning,
        r#"tokenizer.json: model "BPE" has no "merges": the tokenizers library refuses it ("Missing vocab/merges")"#,
    ),
    (
        "auto_map.missing",
        Severity::Error,
        r#"configuration_mpt.py: missing; config.json's auto_map names configuration_mpt.MPTConfig (needed with --trust-remote-code)"#,
    ),
    (
        "auto_map.import",
        Severity::Error,
        r#"attention.py: missing; modeling_mpt.py imports .attention (line 4)"#,
    ),
    (
        "auto_map.remote",
        Severity::Warning,
        r#"config.json: auto_map takes code from another repository (org/x--modeling.M): not checked"#,
    ),
    (
        "chat_template.missing",
        Severity::Warning,
        r#"tokenizer_config.json: the tokenizer has chat tokens ("<|im_start|>") but no chat template (no "chat_template" in it, no chat_template.jinja): vLLM's chat API refuses requests without --chat-template"#,
    ),
    (
        "check.too-large",
        Severity::Warning,
        r#"tokenizer.json: 700,000,000 bytes, more than the check reads (134,217,728): not checked"#,
    ),
    (
        "release.not-a-model",
        Severity::Warning,
        r#"model_index.json: not a model vLLM loads (a diffusers pipeline): only .safetensors headers and JSON were checked"#,
    ),
    (
        "release.empty",
        Severity::Error,
        r#".: no model files (no config.json, weights, tokenizer or pipeline)"#,
    ),
    (
        "file.lfs-pointer",
        Severity::Error,
        r#"model-00002-of-00002.safetensors: a Git LFS pointer file, not the file's content (downloaded or cloned without git-lfs?)"#,
    ),
];

fn message_of(code: &str) -> (Severity, String) {
    let report = check(&fixture::variant(code), &Options::default()).expect("in memory");
    let p = report.problems.iter().find(|p| p.code == code);
    let p = p.unwrap_or_else(|| panic!("{code}: not found in {:#?}", report.problems));
    (p.severity, p.message.clone())
}

#[test]
fn one_golden_message_per_code() {
    let codes: Vec<&str> = GOLDEN.iter().map(|g| g.0).collect();
    assert_eq!(
        codes,
        fixture::CODES,
        "one golden per code the fixture knows"
    );
    for (code, severity, message) in GOLDEN {
        assert_eq!(message_of(code), (*severity, message.to_string()), "{code}");
    }
}

#[test]
fn the_fixture_sees_the_public_api() {
    // `fixture` implements `Files` through these names (`crate::FileInfo`, `crate::Files`).
    let files = fixture::good();
    let list: &[FileInfo] = Files::list(&files);
    assert!(!list.is_empty());
}
