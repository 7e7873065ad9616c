//! Downloads and verifies every file of a revision, for trying the client by hand
//! against an endpoint (the Hub, a mirror, `modelcas serve`):
//!
//! ```text
//! HF_ENDPOINT=http://127.0.0.1:8080 cargo run --release -p modelcas-hubclient \
//!     --example hub_get -- ORG/NAME[@REV] [OUT_DIR]
//! ```
//!
//! Without `OUT_DIR` the bytes are only hashed. Prints one line per file, then the
//! client's counters as JSON.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use hubclient::{HubClient, HubOptions, Verifier, Verifying};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(target) = args.first() else {
        eprintln!("usage: hub_get ORG/NAME[@REV] [OUT_DIR]");
        std::process::exit(2);
    };
    if let Err(e) = run(target, args.get(1).map(Path::new)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(target: &str, out: Option<&Path>) -> Result<(), Box<dyn std::error::Error>> {
    let (repo, rev) = target.split_once('@').unwrap_or((target, "main"));
    let client = HubClient::new(HubOptions::from_env(None, None))?;
    let start = Instant::now();
    let revision = client.revision(repo, rev)?;
    println!(
        "{repo}@{rev} = {} ({} files)",
        revision.commit,
        revision.files.len()
    );
    for f in &revision.files {
        let download = client.open_file(repo, &revision.commit, f, 0)?;
        let mut reader = Verifying::new(download, Verifier::for_file(f));
        let mut sink: Box<dyn Write> = match out {
            Some(dir) => {
                let path = dir.join(&f.path);
                std::fs::create_dir_all(path.parent().unwrap_or(dir))?;
                Box::new(BufWriter::new(File::create(path)?))
            }
            None => Box::new(io::sink()),
        };
        io::copy(&mut reader, &mut sink)?;
        sink.flush()?;
        f.check(&reader.finish().0)?;
        println!("ok {:>14} {}", f.size, f.path);
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{} in {secs:.1}s", serde_json::to_string(&client.stats())?);
    Ok(())
}
