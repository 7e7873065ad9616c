//! Leases and locks judged by the object store's clock, end to end: a writer whose clock is
//! 15 minutes off either way, two gc runs on hosts whose clocks disagree, and a writer
//! stopped (SIGSTOP) past its lease's time to live. The process clock is shifted with
//! `MODELCAS_TEST_CLOCK_OFFSET_SECS`, the lease time to live shortened with
//! `MODELCAS_TEST_LEASE_TTL_SECS`; interleavings are driven with pause points. Runs on
//! the local store and, with `MODELCAS_TEST_BACKEND=s3`, on Garage. Those hooks exist only
//! in test builds: the last test checks that no code reads them otherwise.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{fsck_clean, ingest_rev, series, wait_until, Env};

const REPO: &str = "demo-org/demo-llm";
/// 15 minutes: more than the default lease time to live (10 minutes) and more than the
/// 5 minutes gc allows between a mark and a lease's start.
const SKEW_SECS: i64 = 15 * 60;

fn rev(r: &str) -> String {
    format!("{REPO}@{r}")
}

/// gc with no grace period, as JSON.
fn gc(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["gc", "--json", "--grace", "0s", "--keep-last", "0"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// `ingest r3 --ref r3` arguments (r3 re-shards r2: its chunks are r2's).
fn ingest_r3_args() -> Vec<String> {
    let s = series();
    vec![
        "ingest".into(),
        s.plain("r3").to_str().unwrap().into(),
        "--repo".into(),
        REPO.into(),
        "--revision".into(),
        s.commit("r3"),
        "--ref".into(),
        "r3".into(),
    ]
}

/// A store holding r1 (ref `main`) and r2 detached, so that gc condemns r2's packs, which
/// an ingest of r3 deduplicates against.
fn store_with_r2_detached() -> (Env, PathBuf) {
    let s = series();
    let env = Env::new();
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    ingest_rev(&env, "r1", &["main"]);
    ingest_rev(&env, "r2", &[]);
    env.ok(&["rm", &rev(&s.commit("r2"))]);
    (env, pause)
}

/// Starts modelcas with `args` and `envs`, pausing at `point`; returns once it is there.
fn paused<S: AsRef<str>>(
    env: &Env,
    args: &[S],
    envs: &[(&str, String)],
    point: &str,
    dir: &Path,
) -> Child {
    let _ = std::fs::remove_file(dir.join(format!("{point}.go")));
    let _ = std::fs::remove_file(dir.join(format!("{point}.reached")));
    let mut cmd = env.cmd();
    cmd.args(args.iter().map(|a| a.as_ref()))
        .env("MODELCAS_PAUSE_AT", point)
        .env("MODELCAS_PAUSE_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let reached = dir.join(format!("{point}.reached"));
    wait_until(
        format_args!("the pause point {point} to be reached"),
        Duration::from_secs(120),
        || {
            if reached.exists() {
                return Some(());
            }
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = Vec::new();
                child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
                panic!(
                    "exited ({st}) before {point}: {}",
                    String::from_utf8_lossy(&err)
                );
            }
            None
        },
    );
    child
}

/// Lets a paused process go on; returns its exit status and stderr.
fn finish(child: Child, point: &str, dir: &Path) -> (Option<i32>, String) {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An ingest whose clock is `offset_secs` off, paused after its index sync (it may
/// deduplicate against r2's packs), while gc condemns r2's packs and tries to delete them.
fn skewed_ingest_keeps_its_packs(offset_secs: i64) {
    let (env, pause) = store_with_r2_detached();
    let skew = [("MODELCAS_TEST_CLOCK_OFFSET_SECS", offset_secs.to_string())];
    let ingest = paused(&env, &ingest_r3_args(), &skew, "ingest-after-sync", &pause);
    let g1 = gc(&env, &[]);
    assert!(g1["packs_condemned"].as_u64().unwrap() > 0, "{g1:#}");
    let g2 = gc(&env, &[]);
    for g in [&g1, &g2] {
        assert_eq!(
            g["stale_locks_removed"], 0,
            "clock {offset_secs:+} s: a live lease was judged stale: {g:#}"
        );
    }
    assert_eq!(
        g2["packs_deleted"], 0,
        "clock {offset_secs:+} s: packs deleted under a live lease: {g2:#}"
    );
    assert!(
        g2["packs_waiting_on_ingest"].as_u64().unwrap() > 0,
        "{g2:#}"
    );
    let (code, err) = finish(ingest, "ingest-after-sync", &pause);
    assert_eq!(
        code,
        Some(0),
        "clock {offset_secs:+} s: ingest failed: {err}"
    );
    for _ in 0..3 {
        gc(&env, &[]);
    }
    for r in ["r3", "main"] {
        env.verifies(&rev(r));
    }
    fsck_clean(&env, true);
}

#[test]
fn ingest_with_a_clock_15_minutes_behind_keeps_its_lease_and_packs() {
    skewed_ingest_keeps_its_packs(-SKEW_SECS);
}

#[test]
fn ingest_with_a_clock_15_minutes_ahead_keeps_its_lease_and_packs() {
    skewed_ingest_keeps_its_packs(SKEW_SECS);
}

#[test]
fn two_gc_runs_with_clocks_15_minutes_apart_exclude_each_other() {
    for (first, second) in [(0, SKEW_SECS), (-SKEW_SECS, 0)] {
        let (env, pause) = store_with_r2_detached();
        let before = env.objects();
        let first_gc = paused(
            &env,
            &["gc", "--keep-last", "0", "--grace", "0s"],
            &[("MODELCAS_TEST_CLOCK_OFFSET_SECS", first.to_string())],
            "gc-after-listing",
            &pause,
        );
        let out = env
            .cmd()
            .args(["gc", "--keep-last", "0", "--grace", "0s"])
            .env("MODELCAS_TEST_CLOCK_OFFSET_SECS", second.to_string())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "clocks {first:+} s / {second:+} s: the second gc ran beside the first: {err}"
        );
        assert!(err.contains("another gc is running"), "{err}");
        assert_eq!(env.objects(), before, "the refused gc changed the store");
        let (code, err) = finish(first_gc, "gc-after-listing", &pause);
        assert_eq!(code, Some(0), "{err}");
        env.verifies(&rev("main"));
        fsck_clean(&env, true);
    }
}

/// Sends `sig` to `child`.
fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a pid this test started and has not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", child.id());
}

/// Continues and kills a stopped child if the test fails before it is waited for.
struct Stopped(Option<Child>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            // SAFETY: as in `signal`.
            unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
            let _ = c.wait();
        }
    }
}

#[test]
fn ingest_stopped_past_its_lease_refuses_to_publish() {
    let s = series();
    let (env, pause) = store_with_r2_detached();
    let ttl = [("MODELCAS_TEST_LEASE_TTL_SECS", "2".to_string())];
    let point = "ingest-after-sync";
    let ingest = paused(&env, &ingest_r3_args(), &ttl, point, &pause);
    // Frozen with its lease refresher: let it go on as soon as it is continued.
    signal(&ingest, libc::SIGSTOP);
    let mut stopped = Stopped(Some(ingest));
    std::fs::write(pause.join(format!("{point}.go")), b"").unwrap();

    // gc until the lease has gone stale and r2's packs (which the ingest's index still
    // names) are deleted. The wait is the lease's real time to live.
    let mut stale = 0;
    wait_until(
        "gc to judge the stopped ingest's lease stale and delete r2's packs",
        Duration::from_secs(120),
        || {
            let g = gc(&env, &[]);
            stale += g["stale_locks_removed"].as_u64().unwrap();
            (g["packs_deleted"].as_u64().unwrap() > 0).then_some(())
        },
    );
    assert_eq!(stale, 1, "the stopped ingest's lease was removed once");

    let ingest = stopped.0.take().unwrap();
    signal(&ingest, libc::SIGCONT);
    let out = ingest.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an ingest that lost its lease published"
    );
    assert!(err.contains("lost"), "{err}");
    let listed = env.json(&["ls", REPO, "--json"]);
    let commits: Vec<&str> = listed["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap())
        .collect();
    assert_eq!(commits, vec![s.commit("r1").as_str()], "{listed:#}");
    env.verifies(&rev("main"));
    fsck_clean(&env, true);
    // A rerun publishes it whole.
    ingest_rev(&env, "r3", &["r3"]);
    env.verifies(&rev("r3"));
    fsck_clean(&env, true);
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_code_reads_a_test_hook_variable_but_through_the_test_build_switch() {
    // Issue 26: release binaries read MODELCAS_TEST_LEASE_TTL_SECS and
    // MODELCAS_TEST_CLOCK_OFFSET_SECS, so a stray variable shortened production leases or
    // moved the clock (a revision ingested with a -100 d offset was expired at once by
    // `gc --keep-within 30d`). Every such variable is read through
    // `repo::failpoint::test_var`, which sees nothing without the `failpoints` feature
    // (its own unit test checks both builds' behaviour). The tests run with the feature,
    // so the rule is checked on the sources: no library or binary code reads such a
    // variable directly.
    let root = common::repo_root();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap().flatten() {
        sources(&krate.path().join("src"), &mut files);
    }
    assert!(
        files.len() > 50,
        "sources not found under {}",
        root.display()
    );
    let switch = root.join("repo/src/failpoint.rs");
    let mut offenders = Vec::new();
    for f in files.iter().filter(|f| **f != switch) {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("env::var") && line.contains("MODELCAS_TEST_") {
                offenders.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "test hook variables read outside repo::failpoint::test_var:\n{}",
        offenders.join("\n")
    );
}
