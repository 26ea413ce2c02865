//! The evidence index (`docs/evidence.md`) is the one place where each claim meets the file
//! behind it. This checks it against the tree: every cited path exists; every hex commit
//! appears in a cited path's name or in the files under it; every decimal number (and every
//! integer of three digits or more) in a claim appears in those files; every folder under
//! `results/` is cited; every `results/…` path the README, NOTES, CHANGELOG or docs name
//! exists; and every decimal number in the README's tables appears in a results file the
//! README cites. No GPU, no network.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The text of `path` (a file) or of every text file under it (a folder): what a claim's
/// numbers and commit must be found in. Compressed archives and images are skipped.
fn text_under(path: &Path) -> String {
    if path.is_file() {
        let skip = ["gz", "tgz", "png", "svg"].iter().any(|e| path.extension().is_some_and(|x| x == *e));
        return if skip { String::new() } else { std::fs::read_to_string(path).unwrap_or_default() };
    }
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(path).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    entries.sort();
    entries.iter().map(|p| text_under(p)).collect::<Vec<_>>().join("\n")
}

/// The numbers of `text` a reader would take as measured: tokens of digits with a decimal
/// point (5.02), or integers of three digits or more (120000, 861). Digits inside words
/// (b024d2b, sm_90) are not numbers.
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == '.')) {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || (chars[i] == '.' && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit())))
            {
                i += 1;
            }
            let token: String = chars[start..i].iter().collect();
            let in_word = chars.get(i).is_some_and(|c| c.is_alphabetic() || *c == '_');
            if !in_word && (token.contains('.') || token.len() >= 3) {
                out.push(token);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Backticked spans of a table cell.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

struct Row {
    claim: String,
    paths: Vec<String>,
    commit: String,
}

/// The rows of the table whose header is `| claim | where | commit |`.
fn index_rows() -> Vec<Row> {
    let index = read("docs/evidence.md");
    let mut lines = index.lines().skip_while(|l| !l.starts_with("| claim | where | commit |")).skip(2);
    let mut rows = Vec::new();
    for line in lines.by_ref().take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "docs/evidence.md: not a claim | where | commit row: {line}");
        let paths = code_spans(cells[1]).into_iter().map(str::to_string).collect::<Vec<_>>();
        assert!(!paths.is_empty(), "docs/evidence.md: a row cites no path: {line}");
        rows.push(Row { claim: cells[0].to_string(), paths, commit: cells[2].to_string() });
    }
    assert!(rows.len() >= 10, "docs/evidence.md: the index table was not found or is nearly empty ({} rows)", rows.len());
    rows
}

#[test]
fn every_row_of_the_index_points_at_files_that_back_it() {
    let mut problems = Vec::new();
    for row in index_rows() {
        let missing: Vec<&String> = row.paths.iter().filter(|p| !root().join(p).exists()).collect();
        if !missing.is_empty() {
            problems.push(format!("{:?} cites missing {missing:?}", row.claim));
            continue;
        }
        if row.commit == "CI" {
            // Proven by `cargo test` on every commit: the cited code must be in the tree.
            if let Some(p) = row.paths.iter().find(|p| !(p.starts_with("tests/") || p.starts_with("host/"))) {
                problems.push(format!("{:?}: a CI row cites {p}, not a test or library file", row.claim));
            }
            continue;
        }
        let is_commit = (7..=40).contains(&row.commit.len()) && row.commit.chars().all(|c| c.is_ascii_hexdigit());
        if !is_commit {
            problems.push(format!("{:?}: commit {:?} is neither `CI` nor a hex commit", row.claim, row.commit));
            continue;
        }
        let text: String = row.paths.iter().map(|p| format!("{p}\n{}", text_under(&root().join(p)))).collect::<Vec<_>>().join("\n");
        if !text.contains(&row.commit) {
            problems.push(format!("{:?}: commit {} appears in none of {:?}", row.claim, row.commit, row.paths));
        }
        for n in numbers(&row.claim) {
            if !text.contains(&n) {
                problems.push(format!("{:?}: the number {n} appears in none of {:?}", row.claim, row.paths));
            }
        }
    }
    assert!(problems.is_empty(), "docs/evidence.md:\n{}", problems.join("\n"));
}

#[test]
fn every_results_folder_is_in_the_index() {
    let cited: Vec<String> = index_rows().into_iter().flat_map(|r| r.paths).collect();
    let mut uncited = Vec::new();
    for entry in std::fs::read_dir(root().join("results")).expect("results/ exists") {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        let folder = format!("results/{name}/");
        if !cited.iter().any(|p| p.starts_with(&folder) || *p == format!("results/{name}")) {
            uncited.push(folder);
        }
    }
    assert!(uncited.is_empty(), "results folders no claim in docs/evidence.md cites (index them, or delete them): {uncited:?}");
}

/// `results/…` paths of `text`, except those written `commit:results/…` (a path in git history).
fn results_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("results/") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c == ':' || c.is_alphanumeric() || c == '-' || c == '_' || c == '/') {
            continue;
        }
        let path: String = text[i..].chars().take_while(|c| !c.is_whitespace() && !"`)],;|*".contains(*c)).collect();
        let path = path.trim_end_matches(['.', ':']).to_string();
        // "results/<folder>" at least, and not a pattern (results/<date>-h200*/).
        if path.len() > "results/".len() && !path.contains(['<', '*', '…']) {
            out.insert(path);
        }
    }
    out
}

#[test]
fn every_results_path_the_docs_name_exists() {
    let mut docs: Vec<String> = ["README.md", "NOTES.md", "CHANGELOG.md"].iter().map(|s| s.to_string()).collect();
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(format!("docs/{}", p.file_name().unwrap().to_string_lossy()));
        }
    }
    let mut missing = Vec::new();
    for doc in &docs {
        for p in results_paths(&read(doc)) {
            if !root().join(&p).exists() {
                missing.push(format!("{doc}: {p}"));
            }
        }
    }
    assert!(missing.is_empty(), "paths under results/ that do not exist:\n{}", missing.join("\n"));
}

/// No number in the README's tables without a results file behind it.
#[test]
fn every_number_in_the_readme_tables_is_in_a_results_file_it_cites() {
    let readme = read("README.md");
    let cited: String = results_paths(&readme).iter().map(|p| text_under(&root().join(p))).collect::<Vec<_>>().join("\n");
    assert!(!cited.is_empty(), "the README cites no results file");
    let mut unbacked = Vec::new();
    for line in readme.lines().filter(|l| l.starts_with('|')) {
        for n in numbers(line).into_iter().filter(|n| n.contains('.')) {
            if !cited.contains(&n) {
                unbacked.push(format!("{n} in {line}"));
            }
        }
    }
    assert!(unbacked.is_empty(), "README numbers no cited results file contains:\n{}", unbacked.join("\n"));
}

#[test]
fn the_number_scanner_reads_measurements_not_names() {
    assert_eq!(numbers("5.02 / 7.52 µs, 861 of 861, b024d2b, sm_90, 2^32, 4.04×, n_t 16, v0.1.0"), ["5.02", "7.52", "861", "861", "4.04"]);
    assert_eq!(
        results_paths("see `results/a/b.txt`, c5ea5b2:results/old/, results/<date>-h200*/ and results/x."),
        ["results/a/b.txt", "results/x"].iter().map(|s| s.to_string()).collect()
    );
}
