//! A progress bar on stderr for long simulator sweeps.
//!
//! Shown only when a person can see it: stderr must be a terminal (a bar redrawn with `\r` would
//! fill a CI log or a redirected file with junk) and `RINGCAST_NO_PROGRESS` must not be set (for a
//! terminal session whose output is being recorded, e.g. under `script` or tmux capture). When
//! hidden every call is a cheap no-op, so sweep code calls it unconditionally. The bar goes to
//! stderr so stdout stays clean for the table, which may be piped.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The variable that turns the bar off.
pub const NO_PROGRESS_ENV: &str = "RINGCAST_NO_PROGRESS";

/// `label [elapsed] ████░░ pos/len ETA message`.
const TEMPLATE: &str = "{prefix} [{elapsed_precise}] {bar:40} {pos}/{len} ETA {eta} {wide_msg}";

/// A counted progress bar over a known number of items.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar counting to `total`, prefixed with `label`; hidden per the module rules.
    pub fn new(total: u64, label: &str) -> Self {
        let env = std::env::var_os(NO_PROGRESS_ENV);
        Self::with_visibility(total, label, visible(std::io::stderr().is_terminal(), env.as_deref()))
    }

    /// A bar whose visibility the caller decides (`--quiet`, tests).
    pub fn with_visibility(total: u64, label: &str, visible: bool) -> Self {
        if !visible {
            return Progress { bar: ProgressBar::hidden() };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        // The template is a constant, so this only fails if indicatif changes its syntax; the
        // default style is a fine fallback and not worth a panic.
        let style = ProgressStyle::with_template(TEMPLATE)
            .map(|s| s.progress_chars("█▉▊▋▌▍▎▏ "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        // A sweep point can take seconds; ticking keeps the elapsed time and ETA moving between
        // `inc`s so the run does not look hung.
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar }
    }

    /// Advances by `n` finished items.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Text after the bar, e.g. the sweep point now running (`"binomial n=64 8 KiB"`).
    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        self.bar.set_message(msg);
    }

    /// Prints a line to stderr without tearing the bar (above it when shown, plainly when hidden),
    /// for warnings met mid-sweep.
    pub fn println(&self, line: impl AsRef<str>) {
        if self.bar.is_hidden() {
            eprintln!("{}", line.as_ref());
        } else {
            self.bar.println(line);
        }
    }

    /// Stops the ticker and leaves the full bar with its total time on screen.
    pub fn finish(&self) {
        self.bar.finish();
    }

    /// Whether anything is drawn.
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Items counted so far.
    pub fn position(&self) -> u64 {
        self.bar.position()
    }
}

/// The display rule, apart from the process environment so it can be tested: a terminal, and
/// `RINGCAST_NO_PROGRESS` unset, empty or `0` (so `RINGCAST_NO_PROGRESS=0` means what it says).
fn visible(stderr_is_terminal: bool, no_progress: Option<&OsStr>) -> bool {
    let suppressed = no_progress.is_some_and(|v| !v.is_empty() && v != "0");
    stderr_is_terminal && !suppressed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visibility_rule() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert!(visible(true, None));
        assert!(visible(true, os("")));
        assert!(visible(true, os("0")));
        assert!(!visible(true, os("1")));
        assert!(!visible(true, os("yes")));
        assert!(!visible(false, None));
        assert!(!visible(false, os("0")));
    }

    #[test]
    fn hidden_bar_still_counts() {
        let p = Progress::with_visibility(10, "sweep", false);
        assert!(p.is_hidden());
        p.set_message("binomial n=8");
        p.inc(1);
        p.inc(2);
        assert_eq!(p.position(), 3);
        p.finish();
    }

    #[test]
    fn not_shown_under_cargo_test() {
        // In CI (and `cargo test > log`) stderr is a pipe or file, so `new` must pick the hidden
        // bar; run from a terminal the bar may legitimately show, and the check is skipped.
        if !std::io::stderr().is_terminal() {
            assert!(Progress::new(5, "sweep").is_hidden());
        }
    }
}
