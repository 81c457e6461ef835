//! Turns every rendered chapter (`book/markdown/*.md`, written by `mdbook build` with all
//! includes expanded) into a doc comment, so `cargo test --doc` compiles and runs its Rust
//! blocks against the workspace crates.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let rendered = root.join("book/markdown");
    println!("cargo:rerun-if-changed={}", rendered.display());
    let mut code = String::new();
    let mut count = 0;
    if let Ok(entries) = std::fs::read_dir(&rendered) {
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
            println!("cargo:rerun-if-changed={}", path.display());
            let stem = path.file_stem().unwrap().to_string_lossy();
            if stem == "SUMMARY" {
                continue;
            }
            let name: String = stem
                .split(|c: char| !c.is_ascii_alphanumeric())
                .map(|w| w[..1.min(w.len())].to_uppercase() + &w[1.min(w.len())..])
                .collect();
            writeln!(code, "#[doc = include_str!({:?})]\npub struct Chapter{name};", path.display()).unwrap();
            count += 1;
        }
    }
    let out = std::env::var("OUT_DIR").unwrap();
    std::fs::write(Path::new(&out).join("chapters.rs"), code).unwrap();
    println!("cargo:rustc-env=BOOK_RENDERED_CHAPTERS={count}");
}
