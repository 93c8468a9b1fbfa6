//! The docs against the code they describe.
//!
//! * `docs/tunables.md` is exactly what `ringcast info --markdown` prints (the engine's own test,
//!   `offload/engine/src/config/tests.rs`, checks that every tunable has its row; this one also
//!   catches a stale row, meaning or preamble).
//! * The cost model's figures `docs/mpi.md` quotes are those `ringcast info` prints today (no doc
//!   copies the decision table itself).
//! * `docs/abi.md` states this build's `ABI_VERSION` (with what it added), every opcode with its
//!   number and every completion status.
//! * Every relative Markdown link in `README.md` and `docs/*.md` names a file that exists.
//! * Every repository path in backticks in `docs/*.md` (a slash, and one of the extensions
//!   below) exists: from the repository root when it starts with one of its top-level entries,
//!   else as the tail of some file of the repository (the docs shorten `offload/proto/src/comm/mod.rs`
//!   to `comm/mod.rs` where the crate is clear), or relative to the doc. `{a,b}` is expanded;
//!   paths with `*`, `<` or `$`, absolute ones and URLs are not repository paths.
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Extensions of the files a backticked path may name and that this test checks.
const EXTENSIONS: &[&str] = &[".rs", ".c", ".h", ".md", ".toml", ".sh", ".py"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// `ringcast ARGS` with no `RINGCAST_*` variable of the test's environment: the defaults.
fn ringcast(args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringcast"));
    cmd.args(args).current_dir(root());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RINGCAST_") {
            cmd.env_remove(k);
        }
    }
    let o = cmd.output().expect("run ringcast");
    assert!(o.status.success(), "ringcast {args:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 output")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `README.md` and every `docs/*.md`, as (path relative to the root, text).
fn docs() -> Vec<(String, String)> {
    let mut v = vec![("README.md".to_string(), read("README.md"))];
    let mut names: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    for n in names {
        let rel = format!("docs/{n}");
        let text = read(&rel);
        v.push((rel, text));
    }
    v
}

#[test]
fn tunables_page_is_what_ringcast_info_prints() {
    let generated = ringcast(&["info", "--markdown"]);
    let doc = read("docs/tunables.md");
    if doc != generated {
        let (g, d): (Vec<&str>, Vec<&str>) = (generated.lines().collect(), doc.lines().collect());
        let i = g.iter().zip(&d).position(|(a, b)| a != b).unwrap_or(g.len().min(d.len()));
        panic!(
            "docs/tunables.md is stale (regenerate: ringcast info --markdown > docs/tunables.md); first difference at line {}:\n  doc:       {}\n  generated: {}",
            i + 1,
            d.get(i).unwrap_or(&"<end of file>"),
            g.get(i).unwrap_or(&"<end of output>")
        );
    }
}

/// The "predicted microseconds at N ranks" table of `ringcast info`: N, and per algorithm its
/// value per size label as printed (the chosen one's `*` removed; `-` where it does not apply).
fn predictions(info: &str) -> (String, BTreeMap<String, BTreeMap<String, String>>) {
    let mut lines = info.lines().skip_while(|l| !l.starts_with("predicted microseconds at "));
    let title = lines.next().expect("`ringcast info` prints its predictions");
    let ranks = title.trim_start_matches("predicted microseconds at ").split(' ').next().unwrap().to_string();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().skip(1).collect();
    let labels: Vec<String> = header.chunks(2).map(|c| c.join(" ")).collect();
    let mut table = BTreeMap::new();
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        let mut cells = line.split_whitespace();
        let name = cells.next().unwrap().to_string();
        let row = labels.iter().cloned().zip(cells.map(|c| c.trim_end_matches('*').to_string())).collect();
        table.insert(name, row);
    }
    (ranks, table)
}

/// A field of the model line: `L 1000 ns` → 1000.
fn model_field(info: &str, key: &str) -> f64 {
    let line = info.lines().find(|l| l.starts_with("model: ")).expect("model line");
    let rest =
        &line[line.find(&format!("{key} ")).unwrap_or_else(|| panic!("{key} in {line}")) + key.len() + 1..];
    rest.split_whitespace().next().unwrap().trim_end_matches(',').parse().unwrap()
}

#[test]
fn mpi_doc_quotes_the_cost_model_as_it_is() {
    let info = ringcast(&["info"]);
    let (ranks, t) = predictions(&info);
    let at = |alg: &str, size: &str| -> f64 {
        t.get(alg)
            .and_then(|r| r.get(size))
            .unwrap_or_else(|| panic!("{alg} at {size} in `ringcast info`"))
            .parse()
            .unwrap()
    };
    let cell = |alg: &str, size: &str| t[alg][size].clone();
    // The cheapest point-to-point algorithm at a size.
    let best_p2p = |size: &str| -> (String, String) {
        let (name, row) = t
            .iter()
            .filter(|(n, r)| n.as_str() != "multicast" && r[size] != "-")
            .min_by(|a, b| a.1[size].parse::<f64>().unwrap().total_cmp(&b.1[size].parse::<f64>().unwrap()))
            .unwrap();
        (name.clone(), row[size].clone())
    };
    let small_comm = info
        .lines()
        .find_map(|l| l.split("multicast from ").nth(1))
        .and_then(|s| s.split(' ').next())
        .expect("`multicast from N ranks` in `ringcast info`")
        .to_string();
    let (p64k, v64k) = best_p2p("64 KiB");
    let (p4m, v4m) = best_p2p("4 MiB");
    let fmt = |ns: f64| format!("{}", ns / 1000.0);
    let expected = [
        format!("below `small_comm` ({small_comm}) ranks"),
        format!("from {small_comm} on the constant-time multicast"),
        format!("at {ranks} ranks (default cluster model"),
        format!("L = {} µs, o = {} µs", fmt(model_field(&info, "L")), fmt(model_field(&info, "o"))),
        format!(
            "it predicts {} µs against {} µs for a binomial tree at 8 B",
            cell("multicast", "8 B"),
            cell("binomial", "8 B")
        ),
        format!(
            "{} µs against {} µs for the best point-to-point algorithm (`{}`) at 64 KiB",
            cell("multicast", "64 KiB"),
            v64k,
            p64k
        ),
        format!(
            "{} µs against {} µs (`{}`; `scatter-allgather` {} µs) at 4 MiB",
            cell("multicast", "4 MiB"),
            v4m,
            p4m,
            cell("scatter-allgather", "4 MiB")
        ),
    ];
    // The interposer's staging cost the doc adds (0.84 ms at 4 MiB) must still leave it ahead.
    assert!(
        at("multicast", "4 MiB") + 840.0 < v4m.parse::<f64>().unwrap(),
        "docs/mpi.md: offload no longer ahead at 4 MiB"
    );
    let doc = read("docs/mpi.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let missing: Vec<&String> = expected.iter().filter(|e| !doc.contains(e.as_str())).collect();
    assert!(
        missing.is_empty(),
        "docs/mpi.md no longer quotes `ringcast info` as it is; expected:\n{missing:#?}"
    );
}

#[test]
fn abi_doc_names_the_version_every_opcode_and_every_status() {
    use ringcast_abi::{Op, Opcode, StatusKind, ABI_VERSION};
    let doc = read("docs/abi.md");
    let mut missing = Vec::new();
    let version = format!("`ABI_VERSION = {ABI_VERSION}` ({ABI_VERSION}:");
    if !doc.contains(&version) {
        missing.push(version);
    }
    for code in 0..=u8::MAX {
        if let Ok(op) = Op::try_from(Opcode(code)) {
            let entry = format!("`{} = {code}`", op.name().to_uppercase().replace('-', "_"));
            if !doc.contains(&entry) {
                missing.push(entry);
            }
        }
    }
    for status in StatusKind::ALL {
        let name = format!("{status:?}");
        if !doc.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == name) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "docs/abi.md lacks (or misnumbers) {missing:?}");
}

/// The targets of the inline links and images of `text`: `](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            v.push(rest[..end].trim().to_string());
        }
    }
    v
}

#[test]
fn relative_links_name_existing_files() {
    let root = root();
    let mut broken = Vec::new();
    for (rel, text) in docs() {
        let dir = root.join(rel.as_str()).parent().unwrap().to_path_buf();
        for target in link_targets(&strip_fences(&text)) {
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let file = target.split('#').next().unwrap();
            // The repository stands alone: a link that leaves it (`../shared/...`) works only
            // where something happens to sit beside the checkout.
            let inside =
                dir.join(file).canonicalize().is_ok_and(|p| p.starts_with(root.canonicalize().unwrap()));
            if !dir.join(file).exists() || !inside {
                broken.push(format!("{rel}: ]({target})"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to files that do not exist or lie outside the repository:\n{}",
        broken.join("\n")
    );
}

/// `text` without its fenced code blocks (program output, commands).
fn strip_fences(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The inline code spans of `text` (outside fenced blocks; a span may wrap a line, never a
/// paragraph).
fn code_spans(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    for para in strip_fences(text).split("\n\n") {
        let parts: Vec<&str> = para.split('`').collect();
        // Odd-indexed parts are inside backticks; `` (an empty span) yields an empty part.
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 && i + 1 < parts.len() {
                v.push(p.to_string());
            }
        }
    }
    v
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (every brace group, left to right).
fn expand_braces(s: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (s.find('{'), s.find('}')) else { return vec![s.to_string()] };
    if close < open {
        return vec![s.to_string()];
    }
    let (head, alts, tail) = (&s[..open], &s[open + 1..close], &s[close + 1..]);
    alts.split(',').flat_map(|a| expand_braces(&format!("{head}{a}{tail}"))).collect()
}

/// The repository paths one code span names (see the module doc).
fn paths_in(span: &str) -> Vec<String> {
    let mut v = Vec::new();
    for token in span.split_whitespace() {
        let token = token.rsplit('=').next().unwrap();
        let token = token.split("::").next().unwrap();
        let token = token
            .trim_start_matches(['(', '[', '"', '\''])
            .trim_end_matches([',', '.', ';', ':', ')', ']', '"', '\'']);
        if !token.contains('/')
            || token.starts_with('/')
            || token.starts_with('~')
            || token.contains("://")
            || token.contains(['*', '<', '$'])
        {
            continue;
        }
        for p in expand_braces(token) {
            let p = match p.rsplit_once(':') {
                Some((path, line)) if line.chars().all(|c| c.is_ascii_digit()) => path.to_string(),
                _ => p,
            };
            if EXTENSIONS.iter().any(|e| p.ends_with(e)) {
                v.push(p);
            }
        }
    }
    v
}

/// Every file of the repository (relative, `/`-separated), build output and hidden directories
/// left out.
fn repository_files(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = e.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap();
                out.push(
                    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"),
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn backticked_paths_exist() {
    let root = root();
    let files = repository_files(&root);
    let top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (rel, text) in docs().into_iter().filter(|(r, _)| r.starts_with("docs/")) {
        let dir = root.join(&rel).parent().unwrap().to_path_buf();
        for span in code_spans(&text) {
            for p in paths_in(&span) {
                checked += 1;
                let first = Path::new(&p).components().next();
                let at_root =
                    matches!(first, Some(Component::Normal(c)) if top.iter().any(|t| c == t.as_str()));
                let found = if at_root {
                    root.join(&p).exists()
                } else {
                    dir.join(&p).exists() || files.iter().any(|f| f == &p || f.ends_with(&format!("/{p}")))
                };
                if !found {
                    broken.push(format!("{rel}: `{p}`"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} paths found: the scan is broken");
    broken.sort();
    broken.dedup();
    assert!(broken.is_empty(), "backticked paths that do not exist:\n{}", broken.join("\n"));
}
