//! `modelcas index rebuild`.

use std::process::ExitCode;

use anyhow::Result;

use crate::args::IndexAction;
use crate::ctx::Ctx;

pub fn run(ctx: &Ctx, action: IndexAction) -> Result<ExitCode> {
    match action {
        IndexAction::Rebuild => {
            let store = ctx.open()?;
            let index = ctx.index(&store)?;
            let condemned = store::gc::state::condemned_packs(store.backend().as_ref())?;
            let (index, r) = index.rebuild(store.backend().as_ref(), &condemned, &|w| {
                tracing::warn!("{w}")
            })?;
            println!(
                "rebuilt index {} from {}: {} packs, {} chunks",
                index.path().display(),
                store.backend().location(),
                r.learned,
                index.chunk_count_estimate()?
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
