//! The daemon's rooms keep their direction (ARCHITECTURE.md, bftpd): no module of bftpd
//! imports one that imports it back, `lanes/` (shared with `bftp transfer`) depends on no
//! room that runs jobs, and the store door is the only place that sends work to the
//! blocking pool. Read from the sources, so a new import that breaks a rule fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src`, by module path (`crate::lanes::walk`).
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).unwrap().with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod") {
                    parts.pop();
                }
                if parts == ["lib"] || parts == ["main"] {
                    parts.clear();
                }
                let name = std::iter::once("crate".to_string())
                    .chain(parts)
                    .collect::<Vec<_>>();
                out.insert(name.join("::"), production_code(&path));
            }
        }
    }
    out
}

/// The file without its `#[cfg(test)] mod tests` and without comments.
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules each module names (`crate::a::b` paths and `super::x`), its own ancestors
/// left out.
fn imports(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, code) in mods {
        let mut deps = BTreeSet::new();
        let mut named = |path: Vec<&str>| {
            // The longest prefix that is a module.
            for k in (2..=path.len()).rev() {
                let m = path[..k].join("::");
                if mods.contains_key(&m) {
                    if m != *name && !name.starts_with(&format!("{m}::")) {
                        deps.insert(m);
                    }
                    break;
                }
            }
        };
        for (i, _) in code.match_indices("crate::") {
            let path: Vec<&str> = code[i..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap()
                .split("::")
                .filter(|p| !p.is_empty())
                .collect();
            named(path);
        }
        let parent = name
            .rsplit_once("::")
            .map_or("crate", |(p, _)| p)
            .to_string();
        for (i, _) in code.match_indices("super::") {
            let rest = code[i + 7..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap();
            let mut path: Vec<&str> = parent.split("::").collect();
            path.push(rest);
            named(path);
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == start {
                return Some([path.clone(), vec![start.to_string()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

#[test]
fn no_module_of_bftpd_imports_one_that_imports_it_back() {
    let graph = imports(&modules());
    assert!(
        graph.contains_key("crate::lanes::walk"),
        "{:?}",
        graph.keys()
    );
    let cycles: Vec<Vec<String>> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .collect();
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}

#[test]
fn lanes_depend_on_no_room_that_runs_jobs() {
    let graph = imports(&modules());
    let lanes: Vec<_> = graph
        .iter()
        .filter(|(m, _)| m.starts_with("crate::lanes"))
        .collect();
    assert!(lanes.len() >= 4, "{lanes:?}");
    for (m, deps) in lanes {
        for d in deps {
            let room = d.split("::").take(2).collect::<Vec<_>>().join("::");
            assert!(
                ![
                    "crate::scheduler",
                    "crate::attempt",
                    "crate::api",
                    "crate::mail",
                    "crate::foreground",
                    "crate::daemon"
                ]
                .contains(&room.as_str()),
                "{m} imports {d}"
            );
        }
    }
}

#[test]
fn only_the_store_door_sends_work_to_the_blocking_pool() {
    let mods = modules();
    let users: Vec<&String> = mods
        .iter()
        .filter(|(_, code)| code.contains("spawn_blocking"))
        .map(|(m, _)| m)
        .collect();
    assert_eq!(users, ["crate::store"]);
}
