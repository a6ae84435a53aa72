//! The map of rooms and imports in `gateway/src/lib.rs` holds: only the front ends name the
//! JSON API's types (`crate::api`), and no module or file of the gateway, the store or the
//! policy crate imports in a circle.
//!
//! Imports are read as text (`crate::…`, `super::…`, `self::…` paths, braces included),
//! leaving out comments. For circles, each file's `#[cfg(test)]` tail is left out too (a test
//! may reach anywhere); the wire stays at the door in tests as well. A
//! module and the modules inside it are not an import of each other (a `mod.rs` declares its
//! files, and they take shared things from it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The front ends, the door that opens them, and the JSON API itself: the only rooms that may
/// name `crate::api`.
const NAME_THE_WIRE: &[&str] = &["api", "cli", "http", "inbox", "mcp", "serve", "slack"];

/// Every `.rs` file under `src`, by its module path (`mcp::calls`; a `mod.rs` is its folder's
/// module; `lib.rs` is the empty path).
fn modules(src: &Path, with_tests: bool) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            let last = parts.last().cloned().unwrap_or_default();
            if last == "mod" || last == "lib" || last == "main" {
                parts.pop();
            }
            if last == "main" || (last == "tests" && !with_tests) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.insert(parts, code_of(&text, with_tests));
        }
    }
    out
}

/// The file without comments and without its `#[cfg(test)]` tail.
fn code_of(text: &str, with_tests: bool) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) if !with_tests => &text[..i],
        _ => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            // Not a `//` inside a string such as "http://…".
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file names: each `crate::`, `super::` or `self::` path, resolved against the
/// file's module, with every item of a `{…}` group.
fn paths_named(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let base: Vec<String> = match start {
                "crate::" => Vec::new(),
                "super::" => module[..module.len().saturating_sub(1)].to_vec(),
                _ => module.to_vec(),
            };
            read_path(&code[from..], base, &mut out);
        }
    }
    out
}

/// Reads `a::b::{c, d::e}` from the start of `rest` onto `base`.
fn read_path(rest: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let ident: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let after = &rest[ident.len()..];
    if ident.is_empty() {
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        read_path(group[item_start..i].trim_start(), base.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        read_path(group[item_start..i].trim_start(), base.clone(), out);
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        }
        out.push(base);
        return;
    }
    let mut path = base;
    path.push(ident);
    match after.strip_prefix("::") {
        Some(more) => read_path(more, path, out),
        None => out.push(path),
    }
}

/// The longest known module that `path` starts with.
fn module_of<'a>(
    path: &[String],
    known: &'a BTreeMap<Vec<String>, String>,
) -> Option<&'a [String]> {
    (1..=path.len())
        .rev()
        .find_map(|n| known.get_key_value(&path[..n]).map(|(k, _)| k.as_slice()))
}

/// The import arrows between files of one crate, leaving out a module and those inside it.
fn arrows(src: &Path, with_tests: bool) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let known = modules(src, with_tests);
    let mut out: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, code) in &known {
        let entry = out.entry(module.clone()).or_default();
        for path in paths_named(module, code) {
            let Some(to) = module_of(&path, &known) else {
                continue;
            };
            if to.starts_with(module) || module.starts_with(to) {
                continue;
            }
            entry.insert(to.to_vec());
        }
    }
    out
}

/// The circles (strongly connected sets of more than one node) of a graph.
fn circles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    let mut nodes: BTreeSet<N> = graph.keys().cloned().collect();
    for to in graph.values() {
        nodes.extend(to.iter().cloned());
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for n in &nodes {
        if seen.contains(n) {
            continue;
        }
        let mut stack = vec![(n.clone(), false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                order.push(v);
                continue;
            }
            if !seen.insert(v.clone()) {
                continue;
            }
            stack.push((v.clone(), true));
            for w in graph.get(&v).into_iter().flatten() {
                if !seen.contains(w) {
                    stack.push((w.clone(), false));
                }
            }
        }
    }
    let mut reversed: BTreeMap<N, BTreeSet<N>> = BTreeMap::new();
    for (from, to) in graph {
        for t in to {
            reversed.entry(t.clone()).or_default().insert(from.clone());
        }
    }
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for n in order.iter().rev() {
        if placed.contains(n) {
            continue;
        }
        let mut component = Vec::new();
        let mut stack = vec![n.clone()];
        placed.insert(n.clone());
        while let Some(v) = stack.pop() {
            component.push(v.clone());
            for w in reversed.get(&v).into_iter().flatten() {
                if placed.insert(w.clone()) {
                    stack.push(w.clone());
                }
            }
        }
        if component.len() > 1 {
            component.sort();
            out.push(component);
        }
    }
    out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

/// The rooms (top-level modules) of the gateway, with the arrows between them.
fn rooms(
    files: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &Vec<String>| m.first().cloned().unwrap_or_default();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in files {
        let entry = out.entry(top(from)).or_default();
        entry.extend(to.iter().map(top).filter(|t| *t != top(from)));
    }
    out
}

#[test]
fn only_the_front_ends_name_the_wire() {
    let files = arrows(&crate_src("gateway"), true);
    let mut wrong = Vec::new();
    for (from, to) in &files {
        let room = from.first().map(String::as_str).unwrap_or("");
        if NAME_THE_WIRE.contains(&room) {
            continue;
        }
        if to.iter().any(|t| t.first().is_some_and(|r| r == "api")) {
            wrong.push(from.join("::"));
        }
    }
    assert!(
        wrong.is_empty(),
        "below the front ends, these name `crate::api`: {wrong:?}"
    );
    // The reading is not blind: the front ends are seen naming it.
    assert!(files[&vec!["http".to_owned(), "admin".to_owned()]]
        .iter()
        .any(|t| t.first().is_some_and(|r| r == "api")));
}

#[test]
fn no_module_or_file_imports_in_a_circle() {
    let gateway = arrows(&crate_src("gateway"), false);
    let room_circles = circles(&rooms(&gateway));
    assert!(
        room_circles.is_empty(),
        "rooms in a circle: {room_circles:?}"
    );
    for name in ["gateway", "storage", "policy"] {
        let files = arrows(&crate_src(name), false);
        assert!(
            files.values().map(BTreeSet::len).sum::<usize>() > 20,
            "{name}: arrows read"
        );
        let found = circles(&files);
        assert!(found.is_empty(), "{name}: files in a circle: {found:?}");
    }
}

#[test]
fn the_reader_sees_a_circle_and_a_braced_import() {
    // a::x takes from b; b takes a::x's name through braces: one circle.
    let a_x = vec!["a".to_owned(), "x".to_owned()];
    let b = vec!["b".to_owned()];
    let known: BTreeMap<Vec<String>, String> = [
        (a_x.clone(), "use crate::b::thing;".to_owned()),
        (b.clone(), "use crate::{a::x::{One, Two}, c};".to_owned()),
        (vec!["a".to_owned()], String::new()),
    ]
    .into_iter()
    .collect();
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, code) in &known {
        for p in paths_named(m, code) {
            if let Some(to) = module_of(&p, &known) {
                if !(to.starts_with(m) || m.starts_with(to)) {
                    graph.entry(m.clone()).or_default().insert(to.to_vec());
                }
            }
        }
    }
    assert_eq!(circles(&graph), vec![vec![a_x.clone(), b.clone()]]);
    // A comment and a test tail are not imports.
    let code = code_of(
        "// use crate::b;\nfn f() {}\n#[cfg(test)]\nuse crate::b;",
        false,
    );
    assert!(paths_named(&a_x, &code).is_empty());
    // `super::` from a file is its folder's module.
    assert_eq!(
        paths_named(&a_x, "use super::y::Z;"),
        vec![vec!["a".to_owned(), "y".to_owned(), "Z".to_owned()]]
    );
}
