//! Progress bars for long commands (`bench`, `provision`): drawn on stderr
//! only when it is a terminal, so piped output and tests see none.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `total` units labelled `what`, or a hidden one when stderr is not a terminal.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} [{elapsed}] {wide_msg}") {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_string());
    bar
}
