//! The store's feature list (docs/format/bytes.md, "Feature list"): a store that names a format
//! feature this build does not implement is refused, with the feature named and nothing
//! changed, by every writer (ingest, import, gc, rm, pin, ref) when the feature is needed
//! to write, and by readers too when it is needed to read.

use crate::common;

use common::{ingest_rev, series, Env};
use format::features::Features;

const REPO: &str = "demo-org/demo-llm";

fn put_features(env: &Env, to_read: &[&str], to_write: &[&str]) {
    let f = Features {
        to_read: to_read.iter().map(|s| s.to_string()).collect(),
        to_write: to_write.iter().map(|s| s.to_string()).collect(),
    };
    env.backend()
        .put("features", &format::features::encode(&f))
        .unwrap();
}

#[test]
fn a_feature_needed_to_write_stops_every_writer_and_changes_nothing() {
    let s = series();
    let env = Env::new();
    ingest_rev(&env, "r1", &["main"]);
    let bundle = env.path("r1.bundle");
    env.ok(&[
        "export",
        &format!("{REPO}@main"),
        "-o",
        bundle.to_str().unwrap(),
    ]);
    let other = Env::new();
    ingest_rev(&other, "r2", &["main"]);
    put_features(&other, &[], &["gc-v2"]);
    let before = other.objects();
    // Readers go on.
    assert!(other.ok(&["ls", REPO]).contains(&s.commit("r2")));
    other.ok(&["verify", &format!("{REPO}@main")]);
    let r1 = s.commit("r1");
    let plain_r3 = s.plain("r3");
    let writers: Vec<Vec<&str>> = vec![
        vec![
            "ingest",
            plain_r3.to_str().unwrap(),
            "--repo",
            REPO,
            "--revision",
            &r1,
        ],
        vec!["import", bundle.to_str().unwrap()],
        vec!["gc", "--keep-last", "0", "--grace", "0s"],
        vec!["rm", "demo-org/demo-llm@main", "--force"],
        vec!["pin", "demo-org/demo-llm@main"],
        vec!["ref", REPO, "stable", "main"],
    ];
    for args in &writers {
        let err = other.fails(args);
        assert!(
            err.contains("needs a newer modelcas to write to it") && err.contains("gc-v2"),
            "{args:?}: {err}"
        );
        assert_eq!(other.objects(), before, "{args:?} changed the store");
    }
    // Without the feature listed, the same store takes writes again.
    put_features(&other, &[], &[]);
    other.ok(&["ref", REPO, "stable", "main"]);
}

#[test]
fn a_feature_needed_to_read_stops_readers_and_a_damaged_list_is_named() {
    let env = Env::new();
    ingest_rev(&env, "r1", &["main"]);
    put_features(&env, &["sparse-packs"], &[]);
    for args in [
        vec!["ls"],
        vec!["ls", REPO],
        vec!["cat", "demo-org/demo-llm@main", "config.json"],
    ] {
        let err = env.fails(&args);
        assert!(
            err.contains("needs a newer modelcas to read it") && err.contains("sparse-packs"),
            "{args:?}: {err}"
        );
    }
    env.backend().put("features", b"MCASFEAT garbage").unwrap();
    let err = env.fails(&["ls"]);
    assert!(err.contains("corrupt object features"), "{err}");
}
