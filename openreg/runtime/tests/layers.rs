//! The runtime's modules form layers: a module may use the ones below it, never one that
//! uses it back. A reader learns them bottom up (device, memory, streams, then what extends
//! streams: events, graphs, the trace). This test reads each module's `crate::` paths and
//! fails on a circle, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name -> the modules its code (tests excluded) names through `crate::`.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut visit = vec![src.clone()];
    while let Some(dir) = visit.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                visit.push(path);
                continue;
            }
            // A directory module (comm/) is one module: its files use each other freely.
            let relative = path.strip_prefix(&src).unwrap();
            let module = relative.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_owned();
            if module == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let uses = graph.entry(module.clone()).or_default();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if rest.starts_with('{') {
                    panic!("{}: write `use crate::module::...` per module, so that this test can read it", path.display());
                }
                if !name.is_empty() && name != module {
                    uses.insert(name);
                }
            }
        }
    }
    graph
}

/// A circle through `start`, if one exists, as the list of modules along it.
fn circle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((module, path)) = stack.pop() {
        for next in graph.get(&module).into_iter().flatten() {
            if next == start {
                return Some([path.clone(), vec![start.to_owned()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

#[test]
fn the_runtime_modules_import_no_circle() {
    let graph = dependencies();
    assert!(graph.contains_key("stream") && graph.contains_key("graph"), "modules not found: {graph:?}");
    let circles: Vec<String> =
        graph.keys().filter_map(|m| circle_from(&graph, m)).map(|c| c.join(" -> ")).collect();
    assert!(circles.is_empty(), "modules that use each other in a circle:\n{}", circles.join("\n"));
}

#[test]
fn streams_sit_under_what_extends_them() {
    let graph = dependencies();
    for (lower, upper) in [("stream", "graph"), ("stream", "trace"), ("stream", "event"), ("device", "stream"), ("fault", "memory")] {
        assert!(!graph[lower].contains(upper), "{lower} uses {upper}: {:?}", graph[lower]);
    }
}

#[test]
fn the_reader_finds_a_circle() {
    // The check itself: a made-up circle is found, and named in order.
    let mut graph = BTreeMap::new();
    graph.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    graph.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    graph.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    graph.insert("d".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(circle_from(&graph, "a").unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(circle_from(&graph, "d"), None);
}
