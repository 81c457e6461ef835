//! The repository's book passes every check, and each check fails — naming file and line —
//! on a deliberately broken copy.

use std::path::{Path, PathBuf};

use book_tests::{Problem, check};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_book_is_consistent() {
    let problems = check(&root());
    let report: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(problems.is_empty(), "the book has problems:\n{}", report.join("\n"));
}

#[test]
fn every_rendered_chapter_is_a_doctest() {
    let rendered: usize = book_tests::RENDERED_CHAPTERS.parse().unwrap();
    assert!(rendered >= 5, "only {rendered} rendered chapters: run `mdbook build` before this crate's tests");
}

/// A small book in a temporary directory: one chapter including one source file.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(chapter: &str, source: &str) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join("openreg")).unwrap();
        std::fs::write(dir.path().join("src/chapter.md"), chapter).unwrap();
        std::fs::write(dir.path().join("openreg/code.rs"), source).unwrap();
        Scratch { dir }
    }

    fn problems(&self) -> Vec<Problem> {
        check(self.dir.path())
    }
}

const GOOD_SOURCE: &str = "fn a() {}\n// ANCHOR: demo\nfn b() {}\n// ANCHOR_END: demo\n";

#[test]
fn a_good_scratch_book_passes() {
    let book = Scratch::new("# C\n\n```rust\n{{#include ../openreg/code.rs:demo}}\n```\n", GOOD_SOURCE);
    assert_eq!(book.problems(), vec![]);
}

#[test]
fn a_missing_anchor_names_chapter_and_line() {
    let book = Scratch::new("# C\n\ntext\n```rust\n{{#include ../openreg/code.rs:nope}}\n```\n", GOOD_SOURCE);
    let p = book.problems();
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].to_string(), "src/chapter.md:5: includes anchor `nope` of `../openreg/code.rs`, which has no `ANCHOR: nope`");
}

#[test]
fn a_missing_file_names_chapter_and_line() {
    let book = Scratch::new("# C\n{{#include ../openreg/gone.rs:demo}}\n", GOOD_SOURCE);
    assert_eq!(book.problems()[0].to_string(), "src/chapter.md:2: includes `../openreg/gone.rs`, which does not exist");
}

#[test]
fn an_unclosed_anchor_names_source_and_line() {
    let book = Scratch::new("# C\n", "fn a() {}\n// ANCHOR: open\nfn b() {}\n");
    assert_eq!(book.problems()[0].to_string(), "openreg/code.rs:2: `ANCHOR: open` is never closed with `ANCHOR_END: open`");
    let book = Scratch::new("# C\n", "// ANCHOR_END: stray\n");
    assert_eq!(book.problems()[0].to_string(), "openreg/code.rs:1: `ANCHOR_END: stray` without a matching `ANCHOR: stray`");
}

#[test]
fn an_unused_chapter_crate_is_reported() {
    let book = Scratch::new("# C\n", GOOD_SOURCE);
    let crate_dir = book.dir.path().join("listings/orphan");
    std::fs::create_dir_all(&crate_dir).unwrap();
    std::fs::write(crate_dir.join("Cargo.toml"), "[package]\nname = \"orphan\"\n").unwrap();
    assert_eq!(
        book.problems()[0].to_string(),
        "listings/orphan/Cargo.toml:1: chapter crate `listings/orphan` is not included by any chapter"
    );
}

#[test]
fn escaped_includes_and_line_ranges_are_understood() {
    let book = Scratch::new("# C\n`\\{{#include}}`\n{{#include ../openreg/code.rs:2:3}}\n", GOOD_SOURCE);
    assert_eq!(book.problems(), vec![]);
}
