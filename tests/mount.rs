//! The FUSE mount on a real kernel mount: every revision reads back byte-exact, no
//! symlinks, random pread and mmap reads, safetensors loads, concurrent readers, EROFS on
//! every write, refs that move while files stay open, and the mount's own errors.

use crate::common;

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::process::Command;
use std::time::{Duration, Instant};

use common::mount::{is_mounted, Mount};
use common::{ingest_series, series, sha256_file, tree_hashes, wait_until, Env};
use rand::{Rng, SeedableRng};

const REVS: [&str; 4] = ["r1", "r2", "r3", "r4"];
const REPO: &str = "demo-org/demo-llm";

#[test]
fn every_revision_reads_back_and_nothing_is_a_symlink() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    // the repo directory lists every ref and every full commit sha, nothing else
    let mut listed: Vec<String> = std::fs::read_dir(m.p(REPO))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    let mut want: Vec<String> = REVS
        .iter()
        .map(|r| r.to_string())
        .chain(REVS.iter().map(|r| s.commit(r)))
        .collect();
    want.sort();
    assert_eq!(listed, want);
    for r in REVS {
        // by ref, by sha, by a 7-digit prefix (resolved on lookup)
        for name in [r.to_string(), s.commit(r), s.commit(r)[..7].to_string()] {
            let dir = m.p(&format!("{REPO}/{name}"));
            assert_eq!(tree_hashes(&dir), s.files(r), "{r} through {name}");
        }
    }
    // no symlinks anywhere, and stat looks like plain files
    let out = Command::new("find")
        .arg(&m.path)
        .args(["-type", "l"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "symlinks: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let f = m.p(&format!("{REPO}/r1/model-00001-of-00004.safetensors"));
    let a = std::fs::metadata(&f).unwrap();
    let b = std::fs::metadata(m.p(&format!(
        "{REPO}/{}/model-00001-of-00004.safetensors",
        s.commit("r1")
    )))
    .unwrap();
    assert!(a.is_file());
    assert_eq!(a.mode() & 0o777, 0o444);
    assert_eq!(
        a.len(),
        std::fs::metadata(s.plain("r1").join("model-00001-of-00004.safetensors"))
            .unwrap()
            .len()
    );
    assert_eq!(a.blocks(), a.len().div_ceil(512));
    assert_eq!(a.ino(), b.ino(), "one inode for one file of one commit");
    assert_eq!(a.mtime(), b.mtime());
    std::thread::sleep(Duration::from_millis(1100));
    let again = std::fs::metadata(&f).unwrap();
    assert_eq!(
        (again.ino(), again.mtime()),
        (a.ino(), a.mtime()),
        "inode and mtime are stable"
    );
}

#[test]
fn single_revision_at_the_root() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &["--repo", &format!("{REPO}@r3")]);
    assert_eq!(tree_hashes(&m.path), s.files("r3"));
}

#[test]
fn random_pread_and_mmap_match_the_source() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &["--cache-mib", "16"]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for name in [
        "model-00001-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "tokenizer.json",
        "config.json",
    ] {
        let src = std::fs::read(s.plain("r3").join(name)).unwrap();
        let path = m.p(&format!("{REPO}/r3/{name}"));
        let f = File::open(&path).unwrap();
        for _ in 0..150 {
            let off = rng.gen_range(0..src.len());
            let len = match rng.gen_range(0..3) {
                0 => rng.gen_range(1..64),
                1 => rng.gen_range(1..200_000),
                _ => rng.gen_range(1..4 << 20),
            };
            let mut buf = vec![0u8; len];
            let n = f.read_at(&mut buf, off as u64).unwrap();
            let end = (off + len).min(src.len());
            assert_eq!(n, end - off);
            assert!(buf[..n] == src[off..end], "pread {name} at {off}+{len}");
        }
        // mmap the whole file (the safe_open pattern) and compare slices in random order
        // SAFETY: a read-only private mapping of `src.len()` bytes of `f`, which stays open and
        // unchanged while the slice is read; unmapped after the last read.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                src.len(),
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mapped = std::slice::from_raw_parts(p as *const u8, src.len());
            for _ in 0..100 {
                let off = rng.gen_range(0..src.len());
                let end = (off + rng.gen_range(1..3 << 20)).min(src.len());
                assert!(
                    mapped[off..end] == src[off..end],
                    "mmap {name} at {off}..{end}"
                );
            }
            assert!(mapped == &src[..], "full mmap walk of {name}");
            libc::munmap(p, src.len());
        }
    }
}

#[test]
fn safetensors_loads_every_tensor() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    for r in ["r1", "r3"] {
        let out = common::python()
            .arg(common::repo_root().join("tests/safetensors_check.py"))
            .arg(m.p(&format!("{REPO}/{r}")))
            .arg(s.plain(r))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tensors equal"), "{text}");
    }
}

#[test]
fn concurrent_readers_get_the_right_bytes() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &["--cache-mib", "32"]);
    let files = s.files("r2");
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (m, files) = (&m, &files);
            scope.spawn(move || {
                for round in 0..3 {
                    // half the threads read the same file, the others different ones
                    let (path, sha) = if t % 2 == 0 {
                        &files[0]
                    } else {
                        &files[(t + round) % files.len()]
                    };
                    let got = sha256_file(&m.p(&format!("{REPO}/r2/{path}")));
                    assert_eq!(&got, sha, "thread {t} reading {path}");
                }
            });
        }
    });
}

/// Every spelling of a commit (a prefix, the full sha, any case) is one directory on the
/// kernel mount, read by threads spelling it differently at once, byte-exact: the
/// directory's one dentry moves between the names, and no read or lookup fails.
#[test]
fn every_spelling_of_a_commit_reads_the_same_at_once() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    let c = s.commit("r2");
    let spellings = [
        c[..7].to_string(),
        c[..12].to_ascii_uppercase(),
        c.clone(),
        c.to_ascii_uppercase(),
        c[..20].to_string(),
    ];
    let ino = |name: &str| {
        std::fs::metadata(m.p(&format!("{REPO}/{name}")))
            .unwrap()
            .ino()
    };
    let first = ino(&spellings[0]);
    assert!(spellings.iter().all(|n| ino(n) == first));
    let files = s.files("r2");
    std::thread::scope(|scope| {
        for (t, name) in spellings.iter().enumerate() {
            let (m, files) = (&m, &files);
            scope.spawn(move || {
                for round in 0..3 {
                    let (path, sha) = &files[(t + round) % files.len()];
                    let got = sha256_file(&m.p(&format!("{REPO}/{name}/{path}")));
                    assert_eq!(&got, sha, "{name}/{path}");
                }
            });
        }
    });
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn writes_fail_with_erofs() {
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    let dir = m.p(&format!("{REPO}/r1"));
    let file = dir.join("config.json");
    let erofs = libc::EROFS;
    assert_eq!(
        errno_of(std::fs::OpenOptions::new().write(true).open(&file)),
        erofs,
        "open for write"
    );
    assert_eq!(errno_of(File::create(dir.join("new.txt"))), erofs, "create");
    assert_eq!(
        errno_of(std::fs::create_dir(dir.join("newdir"))),
        erofs,
        "mkdir"
    );
    assert_eq!(errno_of(std::fs::remove_file(&file)), erofs, "unlink");
    assert_eq!(
        errno_of(std::fs::rename(&file, dir.join("x.json"))),
        erofs,
        "rename"
    );
    assert_eq!(
        errno_of(std::fs::set_permissions(
            &file,
            std::os::unix::fs::PermissionsExt::from_mode(0o777)
        )),
        erofs,
        "chmod"
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("a", dir.join("l"))),
        erofs,
        "symlink"
    );
    assert_eq!(
        errno_of(std::fs::hard_link(&file, dir.join("h"))),
        erofs,
        "link"
    );
    let c = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: `c` and the name are NUL-terminated and the value a live slice, all
    // outliving the call.
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.x".as_ptr(),
            b"1".as_ptr() as *const _,
            1,
            0,
        )
    };
    assert_eq!(
        (rc, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(erofs)),
        "setxattr"
    );
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::truncate(c.as_ptr(), 0) };
    assert_eq!(
        (rc, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(erofs)),
        "truncate"
    );
    // and nothing changed
    assert_eq!(
        sha256_file(&file),
        series()
            .files("r1")
            .iter()
            .find(|f| f.0 == "config.json")
            .unwrap()
            .1
    );
}

#[test]
fn moved_ref_shows_up_while_open_files_keep_their_commit() {
    let s = series();
    let env = Env::new();
    let ingest = |r: &str| {
        env.ingest(
            &s.plain(r),
            &["--repo", REPO, "--revision", &s.commit(r), "--ref", "main"],
        )
    };
    ingest("r1");
    let m = Mount::start(&env, &[]);
    let name = "model-00004-of-00004.safetensors";
    let sha = |r: &str| s.files(r).into_iter().find(|f| f.0 == name).unwrap().1;
    let path = m.p(&format!("{REPO}/main/{name}"));
    assert_eq!(sha256_file(&path), sha("r1"));
    let old = File::open(&path).unwrap();
    ingest("r2");
    let t = Instant::now();
    wait_until("the moved ref to show up", Duration::from_secs(10), || {
        (sha256_file(&path) == sha("r2")).then_some(())
    });
    eprintln!("ref move visible after {:?}", t.elapsed());
    // the file opened before the move still reads the old commit
    let len = old.metadata().unwrap().len() as usize;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = old.read_at(&mut buf[done..], done as u64).unwrap();
        assert!(n > 0);
        done += n;
    }
    use sha2::Digest;
    assert_eq!(hex::encode(sha2::Sha256::digest(&buf)), sha("r1"));
}

#[test]
fn clean_unmount_on_sigterm() {
    let env = Env::new();
    ingest_series(&env);
    let mut m = Mount::start(&env, &[]);
    assert!(m.p(REPO).exists());
    let st = m.stop();
    assert!(st.success(), "{st}");
    assert!(!is_mounted(&m.path));
}

#[test]
fn umount_command() {
    let env = Env::new();
    ingest_series(&env);
    let mut m = Mount::start(&env, &[]);
    env.ok(&["umount".as_ref(), m.path.as_os_str()]);
    let child = m.child.as_mut().unwrap();
    let st = wait_until(
        "the mount process to exit after umount",
        Duration::from_secs(10),
        || child.try_wait().unwrap(),
    );
    assert!(st.success());
    m.child = None;
    assert!(!is_mounted(&m.path));
}

#[test]
fn mount_errors_are_clear() {
    let env = Env::empty();
    let mnt = env.path("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let err = env.fails(&["mount".as_ref(), mnt.as_os_str()]);
    assert!(err.contains("no modelcas store at"), "{err}");
    let env = Env::new();
    ingest_series(&env);
    let err = env.fails(&["mount".as_ref(), env.path("missing").as_os_str()]);
    assert!(err.contains("missing does not exist"), "{err}");
    let m = Mount::start(&env, &[]);
    let err = env.fails(&["mount".as_ref(), m.path.as_os_str()]);
    assert!(err.contains("is busy"), "{err}");
    let err = env.fails(&["mount", "/tmp", "--repo", "demo-org/demo-llm@nope"]);
    assert!(err.contains("unknown revision nope"), "{err}");
}

#[test]
fn allow_other_lets_another_user_read() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "needs root (to read as another user); the suite runs as root in CI"
    );
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    // the test's temporary directories must be reachable by that user
    std::fs::set_permissions(
        env.tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let read_as_nobody = |m: &Mount| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sha256sum",
            ])
            .arg(m.p(&format!("{REPO}/r1/config.json")))
            .output()
            .unwrap()
    };
    let owner_only = Mount::start(&env, &[]);
    let out = read_as_nobody(&owner_only);
    assert!(
        !out.status.success(),
        "another user could read a mount without --allow-other"
    );
    drop(owner_only);
    let shared = Mount::start(&env, &["--allow-other"]);
    let out = read_as_nobody(&shared);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = s
        .files("r1")
        .into_iter()
        .find(|f| f.0 == "config.json")
        .unwrap()
        .1;
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&want));
}

/// `modelcas gc --json` with the given options.
fn gc(env: &Env, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["gc", "--json", "--keep-last", "0"];
    all.extend_from_slice(args);
    env.json(&all)
}

fn sha256_reading(f: &File, size: u64) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut at = 0;
    while at < size {
        let n = f.read_at(&mut buf, at).unwrap();
        assert!(n > 0, "short read at {at} of {size}");
        h.update(&buf[..n]);
        at += n as u64;
    }
    hex::encode(h.finalize())
}

#[test]
fn revision_expiring_while_open_reads_for_the_grace_period() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    let r1 = s.commit("r1");
    let dir = m.p(&format!("{REPO}/{r1}"));
    // Files opened before the revision expires; nothing read yet.
    let open: Vec<(File, u64, String)> = s
        .files("r1")
        .into_iter()
        .filter(|(p, _)| p.ends_with(".safetensors"))
        .map(|(p, sha)| {
            let f = File::open(dir.join(&p)).unwrap();
            let size = f.metadata().unwrap().len();
            (f, size, sha)
        })
        .collect();
    assert_eq!(open.len(), 4);
    env.ok(&["rm", &format!("{REPO}@r1")]);
    // A grace period no run of this test comes near: what keeps the packs is the rule, not
    // how fast the reads are.
    let first = gc(&env, &["--grace", "1h"]);
    assert_eq!(first["expired"][0]["commit"], r1.as_str(), "{first:#}");
    assert!(first["packs_condemned"].as_u64().unwrap() > 0, "{first:#}");
    let listed = env.json(&["ls", REPO, "--json"]);
    assert!(
        !listed.to_string().contains(&r1),
        "an expired revision is still listed"
    );
    // Within the grace period every open file reads back exactly, while gc keeps running.
    for (f, size, sha) in &open {
        assert_eq!(&sha256_reading(f, *size), sha);
        let again = gc(&env, &["--grace", "1h"]);
        assert_eq!(
            again["packs_deleted"], 0,
            "deleted within the grace period: {again:#}"
        );
    }
    // It is the grace period that kept the packs: without it they go.
    let last = gc(&env, &["--grace", "0s"]);
    assert!(last["packs_deleted"].as_u64().unwrap() > 0, "{last:#}");
    let v = env.json(&["verify", &format!("{REPO}@r4"), "--json"]);
    assert_eq!(v["ok"], true);
}

#[test]
fn a_repacked_revision_keeps_reading_through_the_mount() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let m = Mount::start(&env, &[]);
    let dir = m.p(&format!("{REPO}/r4"));
    // The mount learns r4's manifest (and so its chunk locations) now.
    let listed: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(listed.len(), s.files("r4").len());
    let early = File::open(dir.join("config.json")).unwrap();
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &format!("{REPO}@{r}")]);
    }
    let first = gc(&env, &["--grace", "0s", "--rewrite-below", "1"]);
    assert!(first["forwards_written"].as_u64().unwrap() > 0, "{first:#}");
    let second = gc(&env, &["--grace", "0s", "--rewrite-below", "1"]);
    assert!(second["packs_deleted"].as_u64().unwrap() > 0, "{second:#}");
    // Every file reads back exactly, though the locations the mount knew are gone.
    for (p, sha) in s.files("r4") {
        assert_eq!(sha256_file(&dir.join(&p)), sha, "{p}");
    }
    drop(early);
}

/// The names in directory `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    out.sort();
    out
}

/// `len` bytes of seeded noise (no chunk shared between two seeds).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill(&mut out[..]);
    out
}

/// Issue 36 point 7: a commit removed with `rm --force` and ingested again with other
/// files (the way out of an import conflict), its old packs collected, shows its new files
/// through the mount within the refresh window, by ref and by sha: never the old bytes
/// (the kernel's cached pages of them), never a mix.
#[test]
fn a_replaced_commit_shows_its_new_files() {
    let env = Env::new();
    let repo = "swap-org/m";
    let commit = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
    let (x, y, z) = (noise(100_000, 1), noise(150_001, 2), b"z\n".to_vec());
    let (old, new) = (env.path("old"), env.path("new"));
    for (dir, files) in [(&old, vec![("a", &x)]), (&new, vec![("a", &y), ("b", &z)])] {
        std::fs::create_dir(dir).unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let ingest = |dir: &std::path::Path| {
        env.ingest(
            dir,
            &["--repo", repo, "--revision", commit, "--ref", "main"],
        )
    };
    ingest(&old);
    let m = Mount::start(&env, &[]);
    let (main, by_sha) = (
        m.p(&format!("{repo}/main")),
        m.p(&format!("{repo}/{commit}")),
    );
    assert_eq!(std::fs::read(main.join("a")).unwrap(), x);
    assert_eq!(std::fs::read(by_sha.join("a")).unwrap(), x);
    assert_eq!(names(&main), ["a"]);
    let held = File::open(main.join("a")).unwrap();
    env.ok(&["rm", "--force", &format!("{repo}@{commit}")]);
    ingest(&new);
    let deleted: u64 = (0..2)
        .map(|_| {
            gc(&env, &["--grace", "0s"])["packs_deleted"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(deleted > 0, "gc deleted none of the old packs");
    let last = RefCell::new((0, false, Vec::new()));
    wait_until(
        std::fmt::from_fn(|f| {
            let last = last.borrow();
            write!(
                f,
                "main/a to show the replacement: {} bytes (the old ones: {}), listing {:?}",
                last.0, last.1, last.2
            )
        }),
        Duration::from_secs(10),
        || {
            let got = std::fs::read(main.join("a")).unwrap_or_default();
            let listed = names(&main);
            let shown = got == y && listed == ["a", "b"];
            *last.borrow_mut() = (got.len(), got == x, listed);
            shown.then_some(())
        },
    );
    // By sha: the new bytes, or ENOENT for a name the kernel still had; never the old.
    match std::fs::read(by_sha.join("a")) {
        Ok(got) => assert!(
            got == y,
            "{}/a: {} bytes, old: {}",
            commit,
            got.len(),
            got == x
        ),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
    }
    assert_eq!(std::fs::read(by_sha.join("b")).unwrap(), z);
    assert_eq!(names(&by_sha), ["a", "b"]);
    // The handle opened before reads what it opened, or EIO: never the new bytes.
    let mut buf = vec![0u8; x.len() + 10];
    match held.read_at(&mut buf, 0) {
        Ok(n) => assert!(buf[..n] == x[..n], "the held handle read other bytes"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
    }
}

/// The commit [`ingest_failing`] stores.
pub(crate) const FAILING: &str = "0123456789abcdef0123456789abcdef01234567";
pub(crate) const FAILING_CONFIG: &[u8] = br#"{"model_type":"llama","architectures":["X"]}"#;

/// Ingests, as `repo@`[`FAILING`], a revision that fails its release check: its
/// `model.safetensors` says its header is 64 bytes and ends 20 bytes later.
pub(crate) fn ingest_failing(env: &Env, repo: &str) {
    let dir = env.path("failing");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), FAILING_CONFIG).unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        br#"{"model":{"type":"BPE","vocab":{},"merges":[]}}"#,
    )
    .unwrap();
    let mut weights = 64u64.to_le_bytes().to_vec();
    weights.extend([7u8; 20]);
    std::fs::write(dir.join("model.safetensors"), weights).unwrap();
    let out = env.ingest(&dir, &["--repo", repo, "--revision", FAILING]);
    assert!(out.contains("release check: FAILED"), "{out}");
}

/// What `m` writes to stderr, gathered as it comes by a thread of its own.
fn stderr_of(m: &mut Mount) -> std::sync::Arc<parking_lot::Mutex<String>> {
    let mut pipe = m.child.as_mut().unwrap().stderr.take().unwrap();
    let log = std::sync::Arc::new(parking_lot::Mutex::new(String::new()));
    let to = log.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
            to.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    log
}

#[test]
fn a_revision_that_failed_its_release_check_mounts_with_a_warning() {
    let env = Env::new();
    ingest_failing(&env, "o/failing");
    let want = format!(
        "o/failing@{FAILING} failed its release check: model.safetensors: header of 64 bytes \
         in a 28-byte file"
    );
    // One revision: logged when it is resolved.
    let mut m = Mount::start(&env, &["--repo", &format!("o/failing@{FAILING}")]);
    let log = stderr_of(&mut m);
    assert_eq!(std::fs::read(m.p("config.json")).unwrap(), FAILING_CONFIG);
    assert_eq!(
        std::fs::metadata(m.p("model.safetensors")).unwrap().len(),
        28
    );
    wait_until("the warning", Duration::from_secs(20), || {
        log.lock().contains(&want).then_some(())
    });
    m.stop();
    // Every repository: logged when the revision is first entered, once.
    let mut m = Mount::start(&env, &[]);
    let log = stderr_of(&mut m);
    let rev = m.p(&format!("o/failing/{FAILING}"));
    assert_eq!(
        std::fs::read(rev.join("config.json")).unwrap(),
        FAILING_CONFIG
    );
    assert_eq!(
        names(&rev),
        ["config.json", "model.safetensors", "tokenizer.json"]
    );
    wait_until("the warning", Duration::from_secs(20), || {
        log.lock().contains(&want).then_some(())
    });
    m.stop();
    assert_eq!(log.lock().matches(&want).count(), 1, "{}", log.lock());
}
