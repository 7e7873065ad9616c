//! `modelcas stats`.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use crate::ctx::Ctx;
use crate::output::bytes;

pub fn run(ctx: &Ctx, json: bool) -> Result<ExitCode> {
    let store = ctx.open()?;
    let s = store::stats::stats(&store)?;
    if json {
        let v = json!({
            "repos": s.repos, "commits": s.commits, "files": s.files,
            "logical_bytes": s.logical_bytes, "unique_chunks": s.unique_chunks, "unique_bytes": s.unique_bytes,
            "compressed_bytes": s.compressed_bytes, "packs": s.packs, "stored_bytes": s.stored_bytes,
            "dedup_ratio": s.dedup_ratio(), "compression_ratio": s.compression_ratio(), "total_ratio": s.total_ratio(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("store          {}", store.backend().location());
        println!(
            "repos          {}  commits {}  files {}",
            s.repos, s.commits, s.files
        );
        println!(
            "logical bytes  {} ({})",
            s.logical_bytes,
            bytes(s.logical_bytes)
        );
        println!(
            "unique bytes   {} ({}) in {} chunks",
            s.unique_bytes,
            bytes(s.unique_bytes),
            s.unique_chunks
        );
        println!(
            "stored bytes   {} ({}) in {} packs",
            s.stored_bytes,
            bytes(s.stored_bytes),
            s.packs
        );
        println!("dedup          {:.2}x", s.dedup_ratio());
        println!("compression    {:.2}x", s.compression_ratio());
        println!("overall        {:.2}x", s.total_ratio());
    }
    Ok(ExitCode::SUCCESS)
}
