//! Progress bars (indicatif on stderr) behind the store's `Progress` trait.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use read::progress::Progress;

/// A byte progress bar; hidden with `--quiet` or when stderr is not a terminal.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub fn new(quiet: bool) -> Bar {
        let bar = ProgressBar::hidden();
        if !quiet {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        Bar { bar }
    }
}

impl Progress for Bar {
    fn start(&self, label: &str, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_style(
            ProgressStyle::with_template(
                "{msg:>9} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        self.bar.set_message(label.to_string());
    }
    fn advance(&self, n: u64) {
        self.bar.inc(n);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
    fn warn(&self, msg: &str) {
        self.bar.suspend(|| tracing::warn!("{msg}"));
    }
}
