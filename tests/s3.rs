//! What only an S3 store has: read-only credentials, several writing machines, the
//! node-local chunk cache, and the server going away in the middle of an ingest. They need
//! an S3 server, so they are ignored by default and `.ci/run` runs them against Garage
//! (`MODELCAS_TEST_BACKEND=s3 cargo test --test s3 -- --ignored`); run without S3 they fail
//! and say so. The rest of the suite runs against both backends.

mod common;

use std::process::Command;

use common::{ingest_series, poll_until, series, tree_hashes, Env};

const REPO: &str = "demo-org/demo-llm";

/// One test at a time: one of them stops the server.
static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn serial() -> parking_lot::MutexGuard<'static, ()> {
    SERIAL.lock()
}

const NEEDS_S3: &str = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)";

fn s3_env() -> Env {
    let env = Env::new();
    assert!(env.is_s3(), "{NEEDS_S3}");
    env
}

#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn read_only_credentials_serve_but_cannot_write() {
    let _serial = serial();
    let env = s3_env();
    let s = series();
    ingest_series(&env);
    let ro = env.read_only();
    assert!(ro.ok(&["ls"]).contains(REPO));
    let out = ro.path("co");
    ro.ok(&[
        "checkout".as_ref(),
        format!("{REPO}@r2").as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(tree_hashes(&out), s.files("r2"));
    assert_eq!(
        ro.json(&["verify", &format!("{REPO}@r3"), "--json"])["ok"],
        true
    );
    let cat = ro.run(&["cat", &format!("{REPO}@r1"), "config.json"]);
    assert!(cat.status.success());
    // the mount serves with read-only credentials too
    let mnt = ro.path("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = ro.cmd().arg("mount").arg(&mnt).spawn().unwrap();
    let file = mnt.join(format!("{REPO}/r2/config.json"));
    // Not a failure yet when it does not show: the mount is stopped first.
    poll_until(std::time::Duration::from_secs(20), || {
        file.exists().then_some(())
    });
    let served = std::fs::read(&file);
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert_eq!(
        served.unwrap(),
        std::fs::read(s.plain("r2").join("config.json")).unwrap()
    );
    // a write fails, clearly, and changes nothing
    let err = ro.fails(&[
        "ingest".as_ref(),
        s.plain("r1").as_os_str(),
        "--repo".as_ref(),
        "other/x".as_ref(),
    ]);
    assert!(err.contains("access denied"), "{err}");
    assert_eq!(
        env.json(&["ls", "--json"])["repos"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn a_second_machine_dedups_against_the_first() {
    let _serial = serial();
    let a = s3_env();
    let s = series();
    let first = a.ingest_json(&s.plain("r1"), &["--repo", REPO]);
    assert!(first["pack_bytes_written"].as_u64().unwrap() > 0);
    // another machine: its own (empty) index, same bucket
    let b = a.sharing();
    let second = b.ingest_json(&s.plain("r1"), &["--repo", "mirror/copy"]);
    assert_eq!(second["pack_bytes_written"], 0, "{second}");
    let out = b.path("co");
    let commit = second["snapshots"][0]["commit"]
        .as_str()
        .unwrap()
        .to_string();
    b.ok(&[
        "checkout".as_ref(),
        format!("mirror/copy@{commit}").as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(tree_hashes(&out), s.files("r1"));
    // and the index can be rebuilt from the bucket alone
    assert!(b.ok(&["index", "rebuild"]).contains("rebuilt index"));
}

#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn chunk_cache_survives_restarts_and_heals_damaged_entries() {
    let _serial = serial();
    let env = s3_env();
    let s = series();
    ingest_series(&env);
    let co = |name: &str| {
        let out = env.path(name);
        env.ok(&[
            "checkout".as_ref(),
            format!("{REPO}@r2").as_ref(),
            out.as_os_str(),
        ]);
        tree_hashes(&out)
    };
    assert_eq!(co("a"), s.files("r2"));
    let cache = env.path("chunk-cache");
    let mut entries: Vec<_> = walk(&cache);
    entries.sort();
    assert!(
        entries.len() > 10,
        "the checkout filled the node cache ({} entries)",
        entries.len()
    );
    // damage one entry: it is detected, refetched and rewritten
    let victim = &entries[entries.len() / 2];
    let good = std::fs::read(victim).unwrap();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n / 2] ^= 0xff;
    std::fs::write(victim, &bad).unwrap();
    assert_eq!(co("b"), s.files("r2"));
    assert_eq!(
        std::fs::read(victim).unwrap(),
        good,
        "the damaged entry was fetched again"
    );
    // a later process reads from the cache: with the pack objects gone it still works
    let packs = env.packs();
    let backend = env.backend();
    let saved: Vec<(String, Vec<u8>)> = packs
        .iter()
        .map(|(k, _)| (k.clone(), backend.get(k).unwrap()))
        .collect();
    for (k, _) in &saved {
        backend.delete(k).unwrap();
    }
    let from_cache = co("c");
    for (k, v) in &saved {
        backend.put(k, v).unwrap();
    }
    assert_eq!(from_cache, s.files("r2"));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).unwrap().flatten() {
        if d.path().is_dir() {
            out.extend(walk(&d.path()));
        } else {
            out.push(d.path());
        }
    }
    out
}

#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn server_gone_mid_ingest_then_back() {
    let _serial = serial();
    let env = s3_env();
    let gdir = std::env::var("MODELCAS_TEST_GARAGE_DIR")
        .expect("needs MODELCAS_TEST_GARAGE_DIR (the Garage that tests/garage.sh started)");
    let s = series();
    let garage = common::repo_root().join("tests/garage.sh");
    // Stop the server while an ingest of the whole cache is between its index sync and its
    // first pack upload.
    let pause = env.path("pause");
    let child = common::spawn_paused(
        env.cmd().arg("ingest").arg(s.cache_repo()),
        "ingest-after-sync",
        &pause,
    );
    assert!(Command::new("bash")
        .arg(&garage)
        .args(["stop", &gdir])
        .status()
        .unwrap()
        .success());
    common::go_on(&pause, "ingest-after-sync");
    let out = child.wait_with_output();
    let restarted = Command::new("bash")
        .arg(&garage)
        .args(["restart", &gdir])
        .status()
        .unwrap();
    assert!(restarted.success());
    let out = out.unwrap();
    assert!(
        !out.status.success(),
        "the ingest succeeded with the server gone"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("modelcas: error:"), "{err}");
    // nothing visible
    let repos = env.json(&["ls", "--json"]);
    assert!(repos["repos"].as_array().unwrap().is_empty(), "{repos}");
    env.ingest(&s.cache_repo(), &[]);
    let v = env.json(&["verify", &format!("{REPO}@main"), "--json"]);
    assert_eq!(v["ok"], true);
}

/// `put_many` on S3 (manifests and refs of an ingest, sent as concurrent PUTs): every
/// object lands whole, a batch larger than the PUTs in flight included, and a second
/// batch replaces them.
#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn a_batch_of_puts_lands_every_object() {
    let _serial = serial();
    let env = s3_env();
    let backend = env.backend();
    let objects: Vec<(String, Vec<u8>)> = (0..50)
        .map(|i| (format!("test-batch/{i:03}"), vec![i as u8; 1000 + i * 37]))
        .collect();
    backend.put_many(&objects).unwrap();
    for (k, v) in &objects {
        assert_eq!(&backend.get(k).unwrap(), v, "{k}");
    }
    assert_eq!(backend.list("test-batch/").unwrap().len(), objects.len());
    let again: Vec<(String, Vec<u8>)> = objects
        .iter()
        .map(|(k, _)| (k.clone(), k.as_bytes().to_vec()))
        .collect();
    backend.put_many(&again).unwrap();
    for (k, _) in &objects {
        assert_eq!(backend.get(k).unwrap(), k.as_bytes());
    }
}

/// Reads every file of the mount of `m` on `threads` threads per mount, all mounts at once;
/// each (path, sha256) list sorted.
fn read_mounts_at_once(mounts: &[common::mount::Mount]) -> Vec<Vec<(String, String)>> {
    let barrier = std::sync::Barrier::new(mounts.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = mounts
            .iter()
            .map(|m| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    tree_hashes(&m.path)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
#[ignore = "needs an S3 server: MODELCAS_TEST_BACKEND=s3 (tests/garage.sh, .ci/run)"]
fn a_fleet_start_through_a_cold_hub_sends_one_copy() {
    // Issue 43: 8 nodes start one revision at once through a cold hub; the bucket's egress
    // is counted by a relay in front of Garage, outside every modelcas process.
    let _serial = serial();
    let env = s3_env();
    let s = series();
    ingest_series(&env);
    let s3 = env.s3.clone().unwrap();
    let relay = common::relay::Relay::start(s3.endpoint.trim_start_matches("http://"));
    let via_relay = format!("http://{}", relay.addr);
    let rev = format!("{REPO}@r2");
    // One node straight from the bucket (read-only key): one copy.
    let one = env.read_only();
    let vars = [("MODELCAS_ENDPOINT_URL", via_relay.as_str())];
    let m =
        common::mount::Mount::start_with(&one, &["--repo", &rev, "--file-cache-size", "0"], &vars);
    assert_eq!(
        read_mounts_at_once(std::slice::from_ref(&m))[0],
        s.files("r2")
    );
    drop(m);
    let one_copy = relay.egress();
    // Eight nodes through one cold hub, which alone reaches the bucket through the relay.
    relay.reset();
    let hub = common::hub::start_hub(&env, &[], &vars);
    let nodes: Vec<Env> = (0..8)
        .map(|_| common::hub::node(&common::hub::url(&hub)))
        .collect();
    let mounts: Vec<_> = nodes
        .iter()
        .map(|n| common::mount::Mount::start(n, &["--repo", &rev, "--file-cache-size", "0"]))
        .collect();
    for got in read_mounts_at_once(&mounts) {
        assert_eq!(got, s.files("r2"));
    }
    let fleet = relay.egress();
    println!("bucket egress: one node {one_copy} bytes, 8 nodes through a hub {fleet} bytes");
    assert!(
        (fleet as f64) <= 1.1 * one_copy as f64,
        "8 nodes through a cold hub took {fleet} bytes from the bucket, one copy is {one_copy}"
    );
}
