//! Running it in production: the deploy manifests and units checked against the Kubernetes
//! schemas and against the binary's own commands, flags and variables; the config file
//! (round trip, precedence, errors); JSON logs without secrets; metrics files of batch jobs.

use crate::common;

use std::path::Path;

use common::{bin, ingest_series, repo_root, series, Env};

fn deploy_check(dir: &Path) -> std::process::Output {
    common::python()
        .arg(repo_root().join("tests/deploy_check.py"))
        .arg(bin())
        .arg(dir)
        .output()
        .unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn deploy_manifests_are_valid_and_use_real_commands() {
    let out = deploy_check(&repo_root().join("deploy"));
    assert!(
        out.status.success(),
        "deploy/ check failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The checker catches each kind of mistake.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("deploy");
    copy_dir(&repo_root().join("deploy"), &bad);
    let edit = |rel: &str, from: &str, to: &str| {
        let p = bad.join(rel);
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.contains(from), "{rel} has no {from:?}");
        std::fs::write(&p, s.replacen(from, to, 1)).unwrap();
    };
    edit(
        "kubernetes/60-gc-cronjob.yaml",
        "\"--json\"",
        "\"--json\", \"--keep-forever\"",
    );
    edit(
        "kubernetes/30-mount-daemonset.yaml",
        "terminationGracePeriodSeconds: 30",
        "terminationGracePeriodSecs: 30",
    );
    edit(
        "kubernetes/30-mount-daemonset.yaml",
        "MODELCAS_METRICS_LISTEN",
        "MODELCAS_METRIC_LISTEN",
    );
    edit(
        "systemd/modelcas-mount.service",
        "modelcas mount /models",
        "modelcas mnt /models",
    );
    edit(
        "kubernetes/80-sync-cronjob.yaml",
        "revision = \"main\"",
        "revison = \"main\"",
    );
    edit("systemd/modelcas-sync.service", "--check", "--chek");
    // The CSI volumes (docs/OPERATIONS.md, "Kubernetes volumes (CSI)").
    let mountd = "kubernetes/91-mountd-daemonset.yaml";
    let plugin = "kubernetes/92-csi-node-daemonset.yaml";
    edit(mountd, "\"--take-over\"", "\"--takeover\"");
    edit(
        mountd,
        "          securityContext:\n",
        "          lifecycle:\n            preStop:\n              exec:\n                command: [\"modelcas\", \"umount\", \"/models\"]\n          securityContext:\n",
    );
    edit(
        mountd,
        "          ports:\n",
        "          livenessProbe:\n            exec:\n              command: [\"true\"]\n          ports:\n",
    );
    edit(plugin, "--node-id=$(NODE_NAME)", "--node-id=$(NODE)");
    edit(
        plugin,
        "--csi-address=/csi/csi.sock\n            - --kubelet",
        "--csi-address=/csi/registrar.sock\n            - --kubelet",
    );
    edit(
        plugin,
        "plugins/csi.modelcas.io/csi.sock",
        "plugins/modelcas/csi.sock",
    );
    edit(
        plugin,
        "              mountPropagation: Bidirectional\n",
        "",
    );
    edit(plugin, "path: /run/modelcas\n", "path: /run/modelcas-csi\n");
    edit(
        "kubernetes/90-csi-driver.yaml",
        "\n  podInfoOnMount: true",
        "\n  podInfoOnMount: false",
    );
    let inline = "kubernetes/93-vllm-csi-inline.yaml";
    edit(
        inline,
        "readOnly: true   # required",
        "readOnly: false   # required",
    );
    edit(inline, "revision: main", "rev: main");
    let pv = "kubernetes/94-csi-static-pv.yaml";
    edit(
        pv,
        "- ReadOnlyMany\n  persistentVolumeReclaimPolicy",
        "- ReadWriteOnce\n  persistentVolumeReclaimPolicy",
    );
    edit(pv, "      repo: meta-llama", "      repository: meta-llama");
    edit(
        pv,
        "readOnly: true   # required",
        "readOnly: false   # required",
    );
    edit(
        "systemd/modelcas-mount.service",
        "ExecReload=",
        "ExecStop=/usr/local/bin/modelcas umount /models\nExecReload=",
    );
    // Replicas of serve with a key each refuse each other's Xet tokens (helper-49).
    edit(
        "kubernetes/70-serve.yaml",
        "            - --xet-secret-file\n            - /etc/modelcas-tokens/xet-secret\n",
        "",
    );
    let out = deploy_check(&bad);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    for want in [
        "--keep-forever",
        "terminationGracePeriodSecs",
        "MODELCAS_METRIC_LISTEN",
        "modelcas mnt",
        "models.toml is not a valid sync list",
        "revison",
        "has no flag --chek",
        "has no flag --takeover",
        "preStop unmounts",
        "must have no livenessProbe",
        "$(NODE) names no variable",
        "--csi-address /csi/registrar.sock",
        "--kubelet-registration-path",
        "mountPropagation: Bidirectional: the volumes",
        "the plugin's mountd socket is /run/modelcas-csi/mountd.sock",
        "podInfoOnMount must be true",
        "must set csi.readOnly: true",
        "unknown volume attribute 'rev'",
        "must be ReadOnlyMany only",
        "no `repo` attribute",
        "persistentVolumeClaim.readOnly must be true",
        "ExecStop: unmounts",
        "2 replicas of `modelcas serve` without --xet-secret-file",
    ] {
        assert!(text.contains(want), "the checker missed {want}:\n{text}");
    }
}

/// `modelcas config show` with the given args and extra environment.
fn show(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = env.cmd();
    c.env_remove("MODELCAS_STORE")
        .env_remove("MODELCAS_CACHE_SIZE");
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.args(args).args(["config", "show"]).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_file_precedence_round_trip_and_errors() {
    let env = Env::empty();
    let store = env.path("from-file");
    let cfg = env.path("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "store = \"{}\"\ncache_size = \"1G\"\nlog_format = \"text\"\n\n[mount]\ncache_mib = 128\n\n[gc]\nkeep_last = 4\n",
            store.display()
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let (ok, out, err) = show(&env, &["--config", c], &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("cache_size = \"1G\"") && out.contains("cache_mib = 128"),
        "{out}"
    );
    // Environment over file, flag over environment.
    let (_, out, _) = show(&env, &["--config", c], &[("MODELCAS_CACHE_SIZE", "2G")]);
    assert!(out.contains("cache_size = \"2G\""), "{out}");
    let (_, out, _) = show(
        &env,
        &["--config", c, "--cache-size", "3G"],
        &[("MODELCAS_CACHE_SIZE", "2G")],
    );
    assert!(out.contains("cache_size = \"3G\""), "{out}");
    // MODELCAS_CONFIG finds the file too, and the store it names is the one used.
    let (_, out, _) = show(&env, &[], &[("MODELCAS_CONFIG", c)]);
    assert!(out.contains("from-file"), "{out}");
    let mut init = env.cmd();
    init.env_remove("MODELCAS_STORE")
        .env("MODELCAS_CONFIG", c)
        .args(["init"]);
    assert!(init.output().unwrap().status.success());
    assert!(
        store.join("config").exists(),
        "init did not use the store of the config file"
    );

    // Round trip: what `config show` prints is a config file that shows the same.
    let (_, first, _) = show(&env, &["--config", c], &[]);
    let again = env.path("again.toml");
    std::fs::write(&again, &first).unwrap();
    let (ok, second, err) = show(&env, &["--config", again.to_str().unwrap()], &[]);
    assert!(ok, "{err}");
    let body = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&first), body(&second));

    // Secrets never shown.
    let (_, out, _) = show(
        &env,
        &["--config", c],
        &[
            ("AWS_SECRET_ACCESS_KEY", "hunter2-secret"),
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY"),
        ],
    );
    assert!(
        !out.contains("hunter2-secret") && !out.contains("AKIAEXAMPLEKEY"),
        "{out}"
    );
    assert!(out.contains("AWS_SECRET_ACCESS_KEY: set (masked)"), "{out}");

    // Unknown keys and malformed values name themselves and the file.
    for (text, want) in [
        ("stroe = \"x\"\n", "stroe"),
        ("[mount]\ncache_mb = 3\n", "cache_mb"),
        ("[mount]\ncache_mib = \"lots\"\n", "cache_mib"),
        ("cache_size = 20\n", "cache_size"),
        ("[gc\n", "config.toml"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let (ok, _, err) = show(&env, &["--config", c], &[]);
        assert!(
            !ok && err.contains(want) && err.contains("config.toml"),
            "{text:?}: {err}"
        );
    }
    let (ok, _, err) = show(
        &env,
        &["--config", env.path("missing.toml").to_str().unwrap()],
        &[],
    );
    assert!(!ok && err.contains("missing.toml"), "{err}");
    let (ok, _, err) = show(&env, &["--log-format", "xml"], &[]);
    assert!(!ok && err.contains("--log-format"), "{err}");
}

#[test]
fn json_logs_carry_no_secrets_and_batch_jobs_write_metrics() {
    let s = series();
    let env = Env::new();
    let metrics = env.path("ingest.prom");
    // On S3 the real secret is in the environment; locally a made-up one.
    let secret = match &env.s3 {
        Some(s3) => s3.secret.clone(),
        None => "wJalrXUtnFEMI-K7MDENG-bPxRfiCY-very-secret".to_string(),
    };
    let mut cmd = env.cmd();
    if env.s3.is_none() {
        cmd.env("AWS_SECRET_ACCESS_KEY", &secret);
    }
    let out = cmd
        .args([
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "--metrics-file",
            metrics.to_str().unwrap(),
        ])
        .arg("ingest")
        .arg(s.hub())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(&secret));
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let done = events
        .iter()
        .find(|v| v["message"] == "ingest finished")
        .unwrap_or_else(|| panic!("no ingest event in {stderr}"));
    assert_eq!(done["level"], "INFO");
    assert!(done["bytes_read"].as_u64().unwrap() > 0, "{done}");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    let value = |name: &str| -> f64 {
        prom.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap()
            .parse()
            .unwrap()
    };
    let total: u64 = s.expected["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["files"].as_array().unwrap().iter().map(|f| {
                (
                    f["sha256"].as_str().unwrap().to_string(),
                    f["size"].as_u64().unwrap(),
                )
            })
        })
        .collect::<std::collections::HashMap<_, _>>()
        .values()
        .sum();
    assert_eq!(value("modelcas_ingest_bytes_total") as u64, total, "{prom}");
    assert!(value("modelcas_ingest_dedup_bytes_total") > 0.0);
    assert!(value("modelcas_backend_requests_total") > 0.0);

    // gc's metrics file.
    ingest_series(&env);
    let gcm = env.path("gc.prom");
    env.ok(&[
        "--metrics-file",
        gcm.to_str().unwrap(),
        "gc",
        "--keep-last",
        "0",
        "--grace",
        "0s",
    ]);
    let prom = std::fs::read_to_string(&gcm).unwrap();
    let stored: u64 = env.packs().iter().map(|p| p.1).sum();
    assert!(
        prom.contains(&format!("modelcas_gc_stored_bytes {stored}\n")),
        "{stored}: {prom}"
    );
    assert!(
        prom.contains("modelcas_gc_expired_revisions_total 0\n"),
        "{prom}"
    );
}

#[test]
fn ref_moves_forward_and_back() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let repo = "demo-org/demo-llm";
    let out = env.ok(&["ref", repo, "main", "r2"]);
    assert!(out.contains("(new)"), "{out}");
    let ls = env.json(&["ls", repo, "--json"]);
    assert_eq!(ls["refs"]["main"], s.commit("r2"));
    let out = env.ok(&["ref", repo, "main", &s.commit("r4")[..10]]);
    assert!(
        out.contains(&format!("{} -> {}", s.commit("r2"), s.commit("r4"))),
        "{out}"
    );
    let ls = env.json(&["ls", repo, "--json"]);
    assert_eq!(ls["refs"]["main"], s.commit("r4"));
    let err = env.fails(&["ref", repo, "main", "nope"]);
    assert!(err.contains("unknown revision nope"), "{err}");
    let err = env.fails(&["ref", repo, "a..b", "r4"]);
    assert!(err.contains("a..b"), "{err}");
    let err = env.fails(&["ref", "nobody/nothing", "main", "r4"]);
    assert!(err.contains("unknown repository"), "{err}");
    let ls = env.json(&["ls", repo, "--json"]);
    assert_eq!(
        ls["refs"]["main"],
        s.commit("r4"),
        "a refused ref command moved the ref"
    );
}

/// The value of `key = "..."` in a TOML-ish file's text.
fn quoted_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(key)?.trim_start().strip_prefix('=')?;
        Some(rest.trim().trim_matches('"').to_string())
    })
}

#[test]
fn toolchain_is_stated_once_and_the_image_builds_with_it() {
    let root = repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let channel = quoted_value(&read("rust-toolchain.toml"), "channel").expect("channel");
    let minimum = quoted_value(&read("Cargo.toml"), "rust-version").expect("rust-version");
    let dockerfile = read("deploy/Dockerfile");
    let from = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("FROM rust:"))
        .expect("deploy/Dockerfile builds FROM rust:<version>");
    let image_version = from.split(['-', ' ']).next().unwrap();
    assert_eq!(
        image_version, channel,
        "deploy/Dockerfile vs rust-toolchain.toml"
    );
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    assert!(
        parse(&minimum) <= parse(&channel),
        "rust-version {minimum} is newer than the pinned toolchain {channel}"
    );
    // rust-version is the largest of the locked dependencies' own (read from the sources
    // cargo downloaded to build them).
    let registry = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"))
        .join("registry/src");
    let lock = read("Cargo.lock");
    let mut needed = (vec![0u32], String::new());
    let mut seen = 0;
    for pkg in lock.split("[[package]]").skip(1) {
        let (Some(name), Some(version)) = (quoted_value(pkg, "name"), quoted_value(pkg, "version"))
        else {
            continue;
        };
        for index in std::fs::read_dir(&registry).unwrap() {
            let manifest = index
                .unwrap()
                .path()
                .join(format!("{name}-{version}/Cargo.toml"));
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            seen += 1;
            if let Some(v) = quoted_value(&text, "rust-version") {
                if parse(&v) > needed.0 {
                    needed = (parse(&v), format!("{name} {version}"));
                }
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} locked packages found under {}",
        registry.display()
    );
    assert!(
        parse(&minimum) >= needed.0,
        "rust-version {minimum} is older than {} needs ({:?})",
        needed.1,
        needed.0
    );
}

/// Issue 39 point 4: `ls ORG/NAME@REV --sha256sum` prints lines that `sha256sum -c` accepts
/// in a checkout of that revision (names with a newline or a backslash included, escaped as
/// GNU sha256sum escapes them), and that fail it for a file changed since.
#[test]
fn ls_sha256sum_is_checked_by_sha256sum_in_a_checkout() {
    let env = Env::new();
    let dir = env.path("odd");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("config.json"), b"{}\n").unwrap();
    std::fs::write(dir.join("sub/line\nbreak.txt"), b"newline in the name\n").unwrap();
    std::fs::write(dir.join("back\\slash.bin"), vec![7u8; 100_000]).unwrap();
    env.ingest(&dir, &["--repo", "o/m", "--ref", "main"]);
    let sums = env.ok(&["ls", "o/m@main", "--sha256sum"]);
    assert_eq!(sums.lines().count(), 3, "{sums}");
    let list = env.path("SHA256SUMS");
    std::fs::write(&list, &sums).unwrap();
    let co = env.path("co");
    env.ok(&["checkout".as_ref(), "o/m@main".as_ref(), co.as_os_str()]);
    let check = |what: &str| {
        std::process::Command::new("sha256sum")
            .arg("-c")
            .arg(&list)
            .current_dir(&co)
            .output()
            .unwrap_or_else(|e| panic!("{what}: sha256sum: {e}"))
    };
    let ok = check("checkout");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).matches(": OK").count(),
        3
    );
    std::fs::write(co.join("config.json"), b"[]\n").unwrap();
    let bad = check("changed");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stdout).contains("config.json: FAILED"));
    // Only for one revision, and not with --json.
    assert!(env
        .fails(&["ls", "o/m", "--sha256sum"])
        .contains("ORG/NAME@REV"));
    env.fails(&["ls", "o/m@main", "--sha256sum", "--json"]);
}
