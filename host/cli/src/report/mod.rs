//! Output for `ringcast sim`: a parameter sweep's results as a plain-text table on stdout, the same
//! rows as CSV and JSON for other tools, line/scatter charts as SVG (for documents) and PNG (for
//! quick looks and issue trackers), and a progress bar on stderr while the sweep runs.
//!
//! * [`table::Table`] — aligned text, RFC 4180 CSV, JSON array of objects.
//! * [`plot::Chart`] / [`plot::Series`] — one chart written as `<stem>.svg` and `<stem>.png`.
//! * [`progress::Progress`] — hidden when stderr is not a terminal or `RINGCAST_NO_PROGRESS` is set.
//!
//! Nothing here knows about the simulator: it takes strings and `(f64, f64)` points, so the sweep
//! code decides units and formatting and this module only lays them out.

// The `sim` command that calls this module lands separately; until then most items are unused
// outside the unit tests.
#![allow(dead_code)]

pub mod plot;
pub mod progress;
pub mod table;
