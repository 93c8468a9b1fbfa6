//! A table of strings with three renderings: aligned plain text for the terminal, RFC 4180 CSV and
//! a JSON array of objects.
//!
//! Cells are strings on purpose: the caller formats each number once (units, precision), and the
//! text, CSV and JSON all show exactly that. The renderings only decide alignment and quoting, and
//! JSON turns a cell into a number only when the cell already is valid JSON number text.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Rows of cells under a header line. Rows may be shorter or longer than `headers`: every
/// rendering pads to the widest row instead of failing, since a half-filled sweep table is still
/// worth printing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers and no rows.
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table { headers: headers.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    /// Appends one row; anything `Display` works, so callers can pass numbers they have already
    /// rounded, e.g. `format!("{:.2}", us)`.
    pub fn push_row<I, D>(&mut self, cells: I)
    where
        I: IntoIterator<Item = D>,
        D: std::fmt::Display,
    {
        self.rows.push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// Number of columns: the header count or the longest row, whichever is larger.
    fn columns(&self) -> usize {
        self.rows.iter().map(Vec::len).chain([self.headers.len()]).max().unwrap_or(0)
    }

    fn cell(row: &[String], col: usize) -> &str {
        row.get(col).map_or("", String::as_str)
    }

    /// Aligned plain text: a header line, a dashed rule, then one line per row. Columns whose cells
    /// all look numeric are right-aligned (header included) so digits line up; others are
    /// left-aligned. Control characters (a newline inside a note, say) print as blanks so every
    /// row stays on one line. Widths count `char`s, which is exact for the ASCII and Latin text
    /// the simulator prints (wide CJK glyphs would be off, and are not worth a Unicode-width table).
    pub fn render(&self) -> String {
        let ncols = self.columns();
        let numeric: Vec<bool> = (0..ncols).map(|c| self.numeric_column(c)).collect();
        let clean = |row: &[String]| -> Vec<String> {
            (0..ncols)
                .map(|c| {
                    Self::cell(row, c).chars().map(|ch| if ch.is_control() { ' ' } else { ch }).collect()
                })
                .collect()
        };
        let header = clean(&self.headers);
        let body: Vec<Vec<String>> = self.rows.iter().map(|r| clean(r)).collect();
        let widths: Vec<usize> = (0..ncols)
            .map(|c| std::iter::once(&header).chain(&body).map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();

        let mut out = String::new();
        for cells in std::iter::once(&header).chain([&rule]).chain(&body) {
            let mut line = String::new();
            for (c, cell) in cells.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let w = widths[c];
                // `write!` to a String cannot fail.
                let _ = if numeric[c] { write!(line, "{cell:>w$}") } else { write!(line, "{cell:<w$}") };
            }
            // Left-aligned last columns would leave trailing blanks; they only make diffs noisy.
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// True when column `col` has at least one number and otherwise only blanks or "-" (the usual
    /// placeholder for a missing measurement), so one failed run does not flip a column's alignment.
    fn numeric_column(&self, col: usize) -> bool {
        let mut any = false;
        for row in &self.rows {
            let cell = Self::cell(row, col).trim();
            if cell.is_empty() || cell == "-" {
                continue;
            }
            if !looks_numeric(cell) {
                return false;
            }
            any = true;
        }
        any
    }

    /// RFC 4180 CSV: CRLF line ends, a header record, every record padded to the same number of
    /// fields, and a field quoted (with `"` doubled) exactly when it holds a comma, quote, CR or LF.
    pub fn to_csv(&self) -> String {
        let ncols = self.columns();
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            for c in 0..ncols {
                if c > 0 {
                    out.push(',');
                }
                let cell = Self::cell(row, c);
                if cell.contains([',', '"', '\r', '\n']) {
                    out.push('"');
                    out.push_str(&cell.replace('"', "\"\""));
                    out.push('"');
                } else {
                    out.push_str(cell);
                }
            }
            out.push_str("\r\n");
        }
        out
    }

    /// A JSON array with one object per row, keys in column order (serde_json's own map would sort
    /// them, and turning on its `preserve_order` feature pulls in indexmap for this one use). A cell
    /// that is already valid JSON number text is written verbatim as a number, so `"1.50"` stays
    /// `1.50` and a 20-digit integer keeps every digit; anything else — `NaN`, `inf`, `007`,
    /// `1e400`, text — is a JSON string. Missing header names become `column_N` and repeated ones
    /// get a `_2`, `_3`… suffix, so no cell is lost to a key collision.
    pub fn to_json(&self) -> String {
        let keys: Vec<String> = self.json_keys().iter().map(|k| json_string(k)).collect();
        let mut out = String::from("[");
        for (r, row) in self.rows.iter().enumerate() {
            out.push_str(if r == 0 { "\n  {" } else { ",\n  {" });
            for (c, key) in keys.iter().enumerate() {
                if c > 0 {
                    out.push_str(", ");
                }
                out.push_str(key);
                out.push_str(": ");
                let cell = Self::cell(row, c);
                if is_json_number(cell) {
                    out.push_str(cell);
                } else {
                    out.push_str(&json_string(cell));
                }
            }
            out.push('}');
        }
        out.push_str(if self.rows.is_empty() { "]\n" } else { "\n]\n" });
        out
    }

    fn json_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::with_capacity(self.columns());
        for c in 0..self.columns() {
            let base = match Self::cell(&self.headers, c) {
                "" => format!("column_{}", c + 1),
                h => h.to_string(),
            };
            let mut key = base.clone();
            let mut n = 1;
            while keys.contains(&key) {
                n += 1;
                key = format!("{base}_{n}");
            }
            keys.push(key);
        }
        keys
    }

    /// Writes `<stem>.csv` and `<stem>.json` (creating the parent directory) and returns their
    /// paths. The suffix is appended, not substituted, so a stem like `sweep.v2` keeps its dot.
    pub fn write(&self, stem: &Path) -> Result<Vec<PathBuf>, String> {
        if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let mut paths = Vec::with_capacity(2);
        for (ext, text) in [("csv", self.to_csv()), ("json", self.to_json())] {
            let mut name = OsString::from(stem.as_os_str());
            name.push(".");
            name.push(ext);
            let path = PathBuf::from(name);
            std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// Loose test for alignment only: anything Rust parses as a float (including `inf`/`NaN`), or
/// such a number followed by `%`.
fn looks_numeric(cell: &str) -> bool {
    let cell = cell.strip_suffix('%').unwrap_or(cell);
    cell.parse::<f64>().is_ok()
}

/// Strict test for JSON: the cell must be a finite number in JSON's own grammar with no surrounding
/// blanks, so emitting it verbatim always yields valid JSON.
fn is_json_number(cell: &str) -> bool {
    cell == cell.trim() && !cell.is_empty() && serde_json::from_str::<serde_json::Number>(cell).is_ok()
}

fn json_string(s: &str) -> String {
    // Serialising a `&str` cannot fail; the fallback keeps this total without an unwrap.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn sample() -> Table {
        let mut t = Table::new(["algo", "ranks", "p50 us", "note"]);
        t.push_row(["binomial", "8", "12.5", "ok"]);
        t.push_row(["chain", "128", "1034.25", "has, comma"]);
        t.push_row(["linear", "16", "-", "say \"hi\"\nbye"]);
        t
    }

    #[test]
    fn render_aligns_numbers_right_and_text_left() {
        let text = sample().render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "algo      ranks   p50 us  note");
        assert_eq!(lines[1], "--------  -----  -------  ------------");
        assert_eq!(lines[2], "binomial      8     12.5  ok");
        assert_eq!(lines[3], "chain       128  1034.25  has, comma");
        // "-" is a placeholder and keeps the column numeric.
        assert_eq!(lines[4], "linear       16        -  say \"hi\" bye");
        assert!(lines.iter().all(|l| l == &l.trim_end()));
    }

    #[test]
    fn render_handles_ragged_and_empty_tables() {
        assert_eq!(Table::default().render(), "\n\n");
        let mut t = Table::new(["a"]);
        t.push_row(["1", "extra"]);
        t.push_row(Vec::<String>::new());
        assert_eq!(t.render(), "a\n-  -----\n1  extra\n\n");
    }

    #[test]
    fn csv_quotes_per_rfc_4180() {
        let csv = sample().to_csv();
        assert_eq!(
            csv,
            "algo,ranks,p50 us,note\r\n\
             binomial,8,12.5,ok\r\n\
             chain,128,1034.25,\"has, comma\"\r\n\
             linear,16,-,\"say \"\"hi\"\"\nbye\"\r\n"
        );
    }

    #[test]
    fn csv_pads_short_rows() {
        let mut t = Table::new(["a", "b", "c"]);
        t.push_row(["1"]);
        assert_eq!(t.to_csv(), "a,b,c\r\n1,,\r\n");
    }

    #[test]
    fn json_parses_back_with_numbers_and_strings() {
        let json = sample().to_json();
        let v: Value = serde_json::from_str(&json).expect("valid JSON");
        let rows = v.as_array().expect("array");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["algo"], "binomial");
        assert_eq!(rows[0]["ranks"], 8);
        assert_eq!(rows[1]["p50 us"], 1034.25);
        assert_eq!(rows[2]["p50 us"], "-");
        assert_eq!(rows[2]["note"], "say \"hi\"\nbye");
        // Keys keep column order in the text (serde_json's map would sort them).
        let first = json.lines().nth(1).expect("row line");
        assert!(first.find("\"algo\"") < first.find("\"ranks\""), "{first}");
        assert!(first.find("\"ranks\"") < first.find("\"p50 us\""), "{first}");
    }

    #[test]
    fn json_number_detection_is_strict() {
        for ok in ["0", "-3", "1.50", "2e-9", "-0.0", "123456789012345678901234567890"] {
            assert!(is_json_number(ok), "{ok}");
        }
        for not in ["", " 1", "1 ", "+1", ".5", "1.", "007", "NaN", "inf", "1e400", "0x10", "12%"] {
            assert!(!is_json_number(not), "{not}");
        }
        let mut t = Table::new(["v"]);
        t.push_row(["1.50"]);
        t.push_row(["NaN"]);
        assert_eq!(t.to_json(), "[\n  {\"v\": 1.50},\n  {\"v\": \"NaN\"}\n]\n");
    }

    #[test]
    fn json_keys_never_collide() {
        let mut t = Table::new(["x", "x", ""]);
        t.push_row(["1", "2", "3", "4"]);
        let v: Value = serde_json::from_str(&t.to_json()).expect("valid JSON");
        let obj = v[0].as_object().expect("object");
        assert_eq!(obj.len(), 4);
        assert_eq!(v[0]["x"], 1);
        assert_eq!(v[0]["x_2"], 2);
        assert_eq!(v[0]["column_3"], 3);
        assert_eq!(v[0]["column_4"], 4);
        assert_eq!(Table::new(["a"]).to_json(), "[]\n");
    }

    #[test]
    fn write_appends_extensions() {
        let dir = std::env::temp_dir().join(format!("ringcast-table-{}", std::process::id()));
        let stem = dir.join("sub").join("sweep.v2");
        let paths = sample().write(&stem).expect("write");
        assert_eq!(paths, [dir.join("sub/sweep.v2.csv"), dir.join("sub/sweep.v2.json")]);
        let csv = std::fs::read_to_string(&paths[0]).expect("csv");
        assert!(csv.starts_with("algo,ranks"));
        let json = std::fs::read_to_string(&paths[1]).expect("json");
        serde_json::from_str::<Value>(&json).expect("valid JSON");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
