//! The client against a real `modelcas serve`: a revision ingested from a directory,
//! listed, downloaded whole and from an offset, verified; and serve's error codes.
//!
//! Needs a built `modelcas` binary (this crate does not build the store): run with
//! `MODELCAS_BIN=/path/to/modelcas cargo test --release -p modelcas-hubclient --test hub_serve
//! -- --ignored`.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hubclient::{Error, HubClient, HubOptions, Verifier, Verifying};

const REPO: &str = "org/served";
const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// The `serve` child, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn modelcas(bin: &Path, store: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("--store")
        .arg(store.join("store"))
        .arg("--index-dir")
        .arg(store.join("index"))
        .arg("--quiet");
    c
}

/// Writes the snapshot: an LFS-sized weight file (serve treats `.safetensors` as LFS),
/// a small config, a file in a subdirectory.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut weights = Vec::with_capacity(3 << 20);
    let mut x = 7u32;
    while weights.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        weights.extend_from_slice(&x.to_le_bytes());
    }
    let files = vec![
        ("model.safetensors".to_string(), weights),
        ("config.json".to_string(), b"{\"a\": 1}\n".to_vec()),
        (
            "sub/dir/tokenizer.json".to_string(),
            b"{\"t\": [1, 2, 3]}\n".to_vec(),
        ),
    ];
    for (p, d) in &files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, d).unwrap();
    }
    files
}

fn start(bin: &Path, work: &Path) -> (Server, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(work.join("tokens"), "t0ken\n").unwrap();
    let child = modelcas(bin, work)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(work.join("tokens"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(child);
    testutil::wait_until("serve to start", Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    (server, format!("http://127.0.0.1:{port}"))
}

#[test]
#[ignore = "needs MODELCAS_BIN, a built modelcas binary (.ci/run sets it and runs this)"]
fn against_modelcas_serve() {
    let bin = PathBuf::from(std::env::var("MODELCAS_BIN").expect("MODELCAS_BIN"));
    let work = tempfile::tempdir().unwrap();
    let snap = work.path().join("snap");
    let files = snapshot(&snap);
    let ok = modelcas(&bin, work.path())
        .arg("ingest")
        .arg(&snap)
        .args(["--repo", REPO, "--revision", COMMIT, "--ref", "main"])
        .status()
        .unwrap();
    assert!(ok.success());
    let (_server, url) = start(&bin, work.path());

    let anonymous = HubClient::new(HubOptions {
        endpoint: url.clone(),
        ..HubOptions::default()
    })
    .unwrap();
    let e = anonymous.revision(REPO, "main").unwrap_err();
    assert!(
        matches!(e, Error::Unauthorized { .. }) && e.to_string().contains("HF_TOKEN"),
        "{e}"
    );

    let opts = HubOptions {
        endpoint: url,
        token: Some("t0ken".into()),
        ..HubOptions::default()
    };
    let c = HubClient::new(opts).unwrap();
    let rev = c.revision(REPO, "main").unwrap();
    assert_eq!(rev.commit, COMMIT);
    let mut listed: Vec<_> = rev.files.iter().map(|f| f.path.clone()).collect();
    listed.sort();
    let mut want: Vec<_> = files.iter().map(|(p, _)| p.clone()).collect();
    want.sort();
    assert_eq!(listed, want);
    for f in &rev.files {
        let data = &files.iter().find(|(p, _)| *p == f.path).unwrap().1;
        assert_eq!(f.is_lfs(), f.path.ends_with(".safetensors"));
        let mut r = Verifying::new(
            c.open_file(REPO, COMMIT, f, 0).unwrap(),
            Verifier::for_file(f),
        );
        let mut got = Vec::new();
        std::io::copy(&mut r, &mut got).unwrap();
        f.check(&r.finish().0).unwrap();
        assert_eq!(&got, data);
        let half = f.size / 2;
        let mut tail = Vec::new();
        c.open_file(REPO, COMMIT, f, half)
            .unwrap()
            .copy_to(&mut tail)
            .unwrap();
        assert_eq!(tail, data[half as usize..]);
    }
    assert!(matches!(
        c.revision(REPO, "nope"),
        Err(Error::RevisionNotFound { .. })
    ));
    assert!(matches!(
        c.revision("org/absent", "main"),
        Err(Error::RepoNotFound { .. })
    ));
    let e = c.open(REPO, COMMIT, "absent.bin", 0, None).err().unwrap();
    assert!(matches!(e, Error::EntryNotFound { .. }), "{e}");
}
