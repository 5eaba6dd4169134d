//! **Architecture invariant: the store's files import each other only downward.** Each record's
//! row reader lives with the feature that owns the record, shared row helpers in `sql.rs` and
//! `codec.rs`, so no two files of `src/store/` import each other, directly or round a circle.
//! `mod.rs` (which declares and joins them all) is the root and not counted. This test reads the
//! sources and fails naming the first circle it finds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The store's modules by name (`sql`, `postgres::pool`, …) and the text of each.
fn store_modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut modules = BTreeMap::new();
    for (folder, prefix) in [(root.clone(), ""), (root.join("postgres"), "postgres::")] {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let Some(stem) = path.file_stem().and_then(|stem| stem.to_str()) else { continue };
            if path.extension().is_some_and(|extension| extension == "rs") && stem != "mod" {
                modules.insert(format!("{prefix}{stem}"), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    modules
}

/// The modules `text` (the file of `module`) names, outside comments: `super::x`, `crate::store::x`
/// and, in a `postgres/` file, `super::super::x`, and the module names inside a `use super::{…}`.
fn imports(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let in_postgres = module.starts_with("postgres::") && module != "postgres::";
    let mut found = BTreeSet::new();
    let code: Vec<&str> = text.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
    let code = code.join("\n");
    let mut note = |name: &str| {
        if modules.contains(name) && name != module {
            found.insert(name.to_owned());
        }
    };
    let store_prefixes: &[&str] =
        if in_postgres { &["super::super::", "crate::store::"] } else { &["super::", "crate::store::"] };
    for prefix in store_prefixes {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                for word in group.split('}').next().unwrap_or("").split([',', ' ', '\n']) {
                    note(&module_of(&word.split("::").collect::<Vec<_>>()));
                }
                continue;
            }
            let path: Vec<&str> = rest
                .split(|character: char| !(character.is_alphanumeric() || character == '_' || character == ':'))
                .next()
                .unwrap_or("")
                .split("::")
                .collect();
            note(&module_of(&path));
        }
    }
    if in_postgres {
        // A sibling in `postgres/`: `super::pool` from `postgres/listener.rs`.
        for (at, _) in code.match_indices("super::") {
            if code[..at].ends_with("super::") {
                continue;
            }
            let rest = &code[at + "super::".len()..];
            let name: String =
                rest.chars().take_while(|character| character.is_alphanumeric() || *character == '_').collect();
            note(&format!("postgres::{name}"));
        }
    }
    found
}

/// The module a path names: its first segment, or for `postgres::x::…` the file `postgres/x.rs`
/// (an import through `postgres.rs` depends on the file it reaches, not on `postgres.rs`).
fn module_of(path: &[&str]) -> String {
    match path {
        ["postgres", file, ..] => format!("postgres::{file}"),
        [first, ..] => (*first).to_owned(),
        [] => String::new(),
    }
}

/// A circle of the import graph, as the modules round it, or `None`.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| on_path == module) {
            let mut circle = path[start..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

fn import_graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    modules.iter().map(|(module, text)| (module.clone(), imports(module, text, &names))).collect()
}

#[test]
fn the_store_files_import_each_other_without_a_circle() {
    let graph = import_graph(&store_modules());
    // The reader sees imports: the features that own records others read are imported.
    assert!(graph["assignments"].contains("inventory"), "{graph:?}");
    assert!(graph["signals"].contains("postgres::listener"), "{graph:?}");
    if let Some(circle) = find_circle(&graph) {
        panic!("the store's files import each other round a circle: {}", circle.join(" -> "));
    }
}

#[test]
fn a_circle_is_found_and_named() {
    let mut modules = BTreeMap::new();
    modules.insert("sql".to_owned(), "use super::codec::read;\n// use super::inventory::x;\n".to_owned());
    modules.insert("codec".to_owned(), "use super::{StoreError, inventory};\n".to_owned());
    modules.insert("inventory".to_owned(), "fn f() { super::sql::g() }\n".to_owned());
    modules.insert("postgres::pool".to_owned(), "use super::super::sql::Pool;\nuse super::listener::x;\n".to_owned());
    modules.insert("postgres::listener".to_owned(), "use crate::store::codec::y;\n".to_owned());
    let graph = import_graph(&modules);
    assert_eq!(graph["sql"], BTreeSet::from(["codec".to_owned()]));
    assert_eq!(graph["codec"], BTreeSet::from(["inventory".to_owned()]));
    assert_eq!(graph["postgres::pool"], BTreeSet::from(["sql".to_owned(), "postgres::listener".to_owned()]));
    assert_eq!(
        find_circle(&graph),
        Some(vec!["codec", "inventory", "sql", "codec"].into_iter().map(String::from).collect())
    );
    modules.insert("inventory".to_owned(), "fn f() {}\n".to_owned());
    assert_eq!(find_circle(&import_graph(&modules)), None);
}
