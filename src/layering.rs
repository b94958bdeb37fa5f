//! The module map's rules, checked on the source: the pure core imports
//! only the core, the server layer only the core, no two top-level
//! modules reach each other (the `use crate::X` graph has no cycle),
//! `unsafe` appears only in the server layer (and the two documented
//! exceptions), and the process-wide mutable statics are the listed few,
//! each with a comment saying why it is global.
//! See docs/DESIGN.md, "Module map".

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules with no server types: they unit-test without a server.
const CORE: &[&str] = &["collections", "cursor", "glob", "index", "slot"];

/// The top-level module a file of `src/` belongs to (`None`: the crate root).
fn top_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// Top-level modules named by `crate::...` paths in `text` (comments
/// skipped), including those of grouped imports (`crate::{a, b::c}`).
fn named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split("//").next().unwrap_or("");
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                for item in group.split(',') {
                    out.insert(ident(item.trim()));
                }
            } else {
                out.insert(ident(rest));
            }
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Edges `from -> to` between top-level modules, each with a file that
/// makes it.
fn edges() -> BTreeMap<(String, String), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "src/ not found at {}", src.display());
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap_or(&f);
        let Some(from) = top_of(rel) else { continue };
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for to in named(&text) {
            if to != from {
                out.entry((from.clone(), to))
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    out
}

/// A cycle of the graph, if it has one (depth-first search).
fn find_cycle(edges: &BTreeMap<(String, String), String>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    // 0: unseen, 1: on the current path, 2: done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'a>(
        n: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(n, 1);
        path.push(n);
        for &m in next.get(n).map_or(&[][..], |v| v.as_slice()) {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|x| *x == m).unwrap_or(0);
                    let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
                    cycle.push(m.to_string());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, next, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n, 2);
        None
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    for n in nodes {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &next, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_core_imports_only_the_core() {
    let bad: Vec<String> = edges()
        .iter()
        .filter(|((from, to), _)| CORE.contains(&from.as_str()) && !CORE.contains(&to.as_str()))
        .map(|((from, to), file)| format!("{from} -> {to} ({file})"))
        .collect();
    assert!(
        bad.is_empty(),
        "the core names server-facing modules: {bad:#?}"
    );
}

#[test]
fn the_server_layer_imports_only_the_core() {
    let bad: Vec<String> = edges()
        .iter()
        .filter(|((from, to), _)| from == "server" && !CORE.contains(&to.as_str()))
        .map(|((from, to), file)| format!("{from} -> {to} ({file})"))
        .collect();
    assert!(bad.is_empty(), "server/ names modules above it: {bad:#?}");
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = edges();
    if let Some(cycle) = find_cycle(&edges) {
        let hops: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let file = edges
                    .get(&(w[0].clone(), w[1].clone()))
                    .cloned()
                    .unwrap_or_default();
                format!("{} -> {} ({file})", w[0], w[1])
            })
            .collect();
        panic!("import cycle: {hops:#?}");
    }
}

/// Files outside `server/` that may hold `unsafe`: the global allocator
/// and the CPU prefetch hint of the index (an intrinsic that never
/// dereferences its address).
const UNSAFE_ELSEWHERE: &[&str] = &["alloc.rs", "index/prefetch.rs"];

#[test]
fn unsafe_lives_in_the_server_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap_or(&f).display().to_string();
        if rel.starts_with("server/")
            || rel == "layering.rs"
            || UNSAFE_ELSEWHERE.contains(&rel.as_str())
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let uses_unsafe = text.lines().any(|line| {
            let code = line.split("//").next().unwrap_or("");
            code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == "unsafe")
        });
        if uses_unsafe {
            bad.push(rel);
        }
    }
    assert!(bad.is_empty(), "unsafe outside server/: {bad:?}");
}

/// The process-wide mutable statics (file, name) allowed: everything else
/// is state of the `Module` (docs/DESIGN.md, "State ownership"). Each must
/// be introduced by a comment saying why it is global.
const GLOBALS: &[(&str, &str)] = &[
    ("module.rs", "MODULE"),
    ("alloc.rs", "HEAP"),
    ("index/leaf.rs", "NODE_BYTES"),
    ("server/native.rs", "MODULE_CTX"),
    ("server/blocked.rs", "BLOCKED"),
    ("server/blocked.rs", "WATCHED"),
];

/// Allowed without that comment: statics of test builds only.
const UNEXPLAINED: &[(&str, &str)] = &[
    ("index/tree.rs", "VERIFY_REUSE"),
    ("server/locked.rs", "CELL"),
];

/// Statics declared in `text`: (name, whether the value is mutable, the
/// comment lines right above it). A `static X: &...` (a reference to
/// immutable data, a table) is not mutable; anything else may be (atomics,
/// locks, cells, thread-locals).
fn statics(text: &str) -> Vec<(String, bool, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let Some(decl) = [
            "static ",
            "pub static ",
            "pub(crate) static ",
            "pub(super) static ",
        ]
        .iter()
        .find_map(|p| code.strip_prefix(p)) else {
            continue;
        };
        let name = ident(decl);
        let ty = decl.split_once(':').map_or("", |(_, t)| t.trim_start());
        let mut comment = String::new();
        for above in lines[..i].iter().rev() {
            let a = above.trim_start();
            if a.starts_with("//") {
                comment.insert_str(0, a);
            } else if !(a.starts_with("#[") || a.starts_with("thread_local!")) {
                break;
            }
        }
        out.push((name, !ty.starts_with('&'), comment));
    }
    out
}

#[test]
fn mutable_statics_are_the_listed_few_and_say_why() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut unlisted, mut silent) = (Vec::new(), Vec::new());
    for f in files {
        let rel = f.strip_prefix(&src).unwrap_or(&f).display().to_string();
        if rel == "layering.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (name, mutable, comment) in statics(&text) {
            if !mutable {
                continue;
            }
            let at = (rel.as_str(), name.as_str());
            if UNEXPLAINED.contains(&at) {
                continue;
            }
            if !GLOBALS.contains(&at) {
                unlisted.push(format!("{rel}: {name}"));
            } else if !comment.to_ascii_lowercase().contains("global") {
                silent.push(format!("{rel}: {name}"));
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "mutable statics that are not Module state nor listed in GLOBALS: {unlisted:?}"
    );
    assert!(
        silent.is_empty(),
        "statics without a comment saying why they are global: {silent:?}"
    );
}

#[test]
fn the_statics_checker_sees_tables_atomics_and_thread_locals() {
    let text = "/// Global: why.\nstatic A: AtomicU64 = AtomicU64::new(0);\n\
                pub static T: &[Spec] = &[];\n\
                thread_local! {\n    /// Per thread.\n    static L: Cell<bool> = Cell::new(false);\n}\n\
                fn f(x: &'static str) {}\n";
    let got = statics(text);
    assert_eq!(
        got,
        vec![
            ("A".to_string(), true, "/// Global: why.".to_string()),
            ("T".to_string(), false, String::new()),
            ("L".to_string(), true, "/// Per thread.".to_string()),
        ]
    );
}

#[test]
fn the_checker_sees_cycles_and_grouped_imports() {
    assert_eq!(
        named("use crate::{a, b::c};\n// crate::x\nlet y = crate::d::e(); // crate::z"),
        ["a", "b", "d"].iter().map(|s| s.to_string()).collect()
    );
    let mut e = BTreeMap::new();
    e.insert(("a".to_string(), "b".to_string()), String::new());
    assert_eq!(find_cycle(&e), None);
    e.insert(("b".to_string(), "a".to_string()), String::new());
    assert!(find_cycle(&e).is_some());
}
