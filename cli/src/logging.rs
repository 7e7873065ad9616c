//! Logs through `tracing` to standard error: `modelcas: warning: ...` lines by default,
//! one JSON object per event with `--log-format json`. The level comes from `--log-level`
//! (`MODELCAS_LOG_LEVEL`, the config file), else `RUST_LOG`, else `info`. Libraries other
//! than modelcas's own (the AWS SDK, hyper) log at `warn` unless `RUST_LOG` names them, so
//! request signatures and headers never reach the log by accident; no secret is ever
//! logged by modelcas itself.

use std::fmt;

use anyhow::{bail, Result};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Our crates; everything else logs at `warn` unless `RUST_LOG` says otherwise.
const OWN: [&str; 6] = [
    "modelcas", "store", "modelfs", "hubserve", "chunker", "access",
];

/// `modelcas: <level>: message key=value ...`, the format the command line always had.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        write!(w, "modelcas: {level}")?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Installs the subscriber. `quiet` (`-q`) drops informational lines unless a level is
/// asked for; a server's access log (target `access`) stays.
pub fn init(level: Option<&str>, format: Option<&str>, quiet: bool) -> Result<()> {
    let filter = match level {
        Some(l) => {
            let l = l.to_ascii_lowercase();
            if !["error", "warn", "info", "debug", "trace"].contains(&l.as_str()) {
                bail!("--log-level {l:?}: use error, warn, info, debug or trace");
            }
            let mut spec = String::from("warn");
            for c in OWN {
                spec.push_str(&format!(",{c}={l}"));
            }
            EnvFilter::new(spec)
        }
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => {
                EnvFilter::try_new(&v).map_err(|e| anyhow::anyhow!("RUST_LOG {v:?}: {e}"))?
            }
            _ if quiet => EnvFilter::new("warn,access=info"),
            _ => {
                let mut spec = String::from("warn");
                for c in OWN {
                    spec.push_str(&format!(",{c}=info"));
                }
                EnvFilter::new(spec)
            }
        },
    };
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format.unwrap_or("text") {
        "text" => builder.event_format(Plain).try_init(),
        "json" => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        other => bail!("--log-format {other:?}: use text or json"),
    };
    // A second init (tests calling run twice) keeps the first subscriber.
    let _ = installed;
    Ok(())
}
