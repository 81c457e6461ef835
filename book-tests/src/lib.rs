//! Checks that keep the book honest. mdBook renders an empty block and exits 0 when an
//! include names a missing file or anchor; these checks fail instead, naming file and line.
//!
//! * [`check`] — includes, anchors and chapter crates (run by `tests/book.rs`);
//! * the rendered chapters become doctests of this crate (see `build.rs`), so every Rust
//!   block in the book is compiled and run against the real workspace crates.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// Number of rendered chapters compiled into doctests (0 if the book was not built first).
pub const RENDERED_CHAPTERS: &str = env!("BOOK_RENDERED_CHAPTERS");

#[cfg(doctest)]
mod chapters {
    include!(concat!(env!("OUT_DIR"), "/chapters.rs"));
}

// ANCHOR: problem
/// One thing wrong with the book, at a file and line (1-based), relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}
// ANCHOR_END: problem

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Directories whose files may hold anchors (and chapter crates).
const SOURCE_DIRS: &[&str] = &["openreg", "listings", "bench"];
const SOURCE_FILES: &[&str] = &["Makefile", ".cargo/config.toml", "Cargo.toml"];
const TEXT_EXTENSIONS: &[&str] = &["rs", "cpp", "h", "py", "toml", "txt", "md", "svg", "yml"];

/// Runs every check on the repository at `root`.
pub fn check(root: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut included = BTreeSet::new();
    for chapter in files_under(&root.join("src"), &["md"]) {
        check_includes(root, &chapter, &mut included, &mut problems);
    }
    for file in source_files(root) {
        check_anchor_pairs(root, &file, &mut problems);
    }
    check_listings_used(root, &included, &mut problems);
    problems
}

fn relative(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if !(name.starts_with('.') || name == "target" || name == "__pycache__") {
                out.extend(files_under(&path, extensions));
            }
        } else if path.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)) {
            out.push(path);
        }
    }
    out
}

fn source_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = SOURCE_DIRS
        .iter()
        .flat_map(|d| files_under(&root.join(d), TEXT_EXTENSIONS))
        .collect();
    files.extend(SOURCE_FILES.iter().map(|f| root.join(f)).filter(|p| p.exists()));
    files
}

// ANCHOR: includes
/// Every `{{#include path[:anchor]}}` (and `rustdoc_include`) in `chapter` must name an
/// existing file and, if given, an anchor that the file opens and closes.
fn check_includes(root: &Path, chapter: &Path, included: &mut BTreeSet<PathBuf>, problems: &mut Vec<Problem>) {
    let Ok(text) = std::fs::read_to_string(chapter) else { return };
    for (index, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("{{#") {
            let escaped = start > 0 && rest.as_bytes()[start - 1] == b'\\';
            let after = &rest[start + 3..];
            let Some(end) = after.find("}}") else { break };
            let directive = after[..end].trim();
            rest = &after[end + 2..];
            if escaped {
                continue;
            }
            let Some(target) = directive
                .strip_prefix("include ")
                .or_else(|| directive.strip_prefix("rustdoc_include "))
            else {
                continue;
            };
            let problem = |message: String| Problem { file: relative(root, chapter), line: index + 1, message };
            let target = target.trim();
            let (path, selector) = match target.split_once(':') {
                Some((p, s)) => (p, Some(s)),
                None => (target, None),
            };
            let file = chapter.parent().unwrap().join(path);
            let Ok(contents) = std::fs::read_to_string(&file) else {
                problems.push(problem(format!("includes `{path}`, which does not exist")));
                continue;
            };
            included.insert(file.canonicalize().unwrap_or(file.clone()));
            match selector {
                Some(s) if !s.is_empty() && !s.chars().all(|c| c.is_ascii_digit() || c == ':') => {
                    let anchors = anchors(&contents);
                    match anchors.get(s) {
                        None => problems.push(problem(format!("includes anchor `{s}` of `{path}`, which has no `ANCHOR: {s}`"))),
                        Some((_, None)) => problems.push(problem(format!("includes anchor `{s}` of `{path}`, which has no `ANCHOR_END: {s}`"))),
                        Some(_) => {}
                    }
                }
                _ => {}
            }
        }
    }
}
// ANCHOR_END: includes

/// Anchor name -> (line of ANCHOR, line of ANCHOR_END), 1-based.
fn anchors(text: &str) -> HashMap<String, (usize, Option<usize>)> {
    let mut found: HashMap<String, (usize, Option<usize>)> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(name) = marker(line, "ANCHOR_END:") {
            if let Some(entry) = found.get_mut(&name) {
                entry.1.get_or_insert(index + 1);
            }
        } else if let Some(name) = marker(line, "ANCHOR:") {
            found.entry(name).or_insert((index + 1, None));
        }
    }
    found
}

fn marker(line: &str, tag: &str) -> Option<String> {
    let at = line.find(tag)?;
    let name: String = line[at + tag.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (!name.is_empty()).then_some(name)
}

// ANCHOR: anchor_pairs
/// Every `ANCHOR: x` needs a later `ANCHOR_END: x` and vice versa, once per file.
fn check_anchor_pairs(root: &Path, file: &Path, problems: &mut Vec<Problem>) {
    let Ok(text) = std::fs::read_to_string(file) else { return };
    let mut open: HashMap<String, usize> = HashMap::new();
    let mut seen = BTreeSet::new();
    for (index, line) in text.lines().enumerate() {
        let problem = |message: String| Problem { file: relative(root, file), line: index + 1, message };
        if let Some(name) = marker(line, "ANCHOR_END:") {
            if open.remove(&name).is_none() {
                problems.push(problem(format!("`ANCHOR_END: {name}` without a matching `ANCHOR: {name}`")));
            }
        } else if let Some(name) = marker(line, "ANCHOR:") {
            if !seen.insert(name.clone()) {
                problems.push(problem(format!("anchor `{name}` is defined twice in this file")));
            }
            open.insert(name, index + 1);
        }
    }
    for (name, line) in open {
        problems.push(Problem {
            file: relative(root, file),
            line,
            message: format!("`ANCHOR: {name}` is never closed with `ANCHOR_END: {name}`"),
        });
    }
}
// ANCHOR_END: anchor_pairs

/// Each chapter crate (`listings/<name>/Cargo.toml`) must be included by some chapter.
fn check_listings_used(root: &Path, included: &BTreeSet<PathBuf>, problems: &mut Vec<Problem>) {
    let Ok(entries) = std::fs::read_dir(root.join("listings")) else { return };
    let mut crates: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.join("Cargo.toml").exists()).collect();
    crates.sort();
    for dir in crates {
        let dir = dir.canonicalize().unwrap_or(dir);
        if !included.iter().any(|f| f.starts_with(&dir)) {
            problems.push(Problem {
                file: relative(root, &dir.join("Cargo.toml")),
                line: 1,
                message: format!(
                    "chapter crate `{}` is not included by any chapter",
                    relative(root, &dir).display()
                ),
            });
        }
    }
}
