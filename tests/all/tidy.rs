//! The house's boundaries, read off the source (in the style of
//! rust-analyzer's `tidy`): the modules of `host/src` depend on each other
//! without a cycle, and the crates that carry a concern stay in the modules
//! ARCHITECTURE.md gives them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::repo;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is (`caps/store.rs` → `caps::store`, `gate/mod.rs` → `gate`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib" || p == "main") {
        parts.pop();
    }
    parts.join("::")
}

/// The file's code without its unit tests (tests may reach anything).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The code without comments and without the contents of string literals
/// (a doc link or a log target names a module without depending on it).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push('"');
            }
            // A char literal ('"', '\'') is not a string's start.
            '\'' if matches!(chars.clone().nth(1), Some('\'')) || chars.peek() == Some(&'\\') => {
                out.push('\'');
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                chars.next();
                chars.next();
                out.push('\'');
            }
            _ => out.push(c),
        }
    }
    out
}

/// What each non-test file of host/src is: its module and its code.
fn host_modules() -> Vec<(String, String)> {
    let src = repo().join("host/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|f| (module_of(&src, f), code_only(without_tests(&std::fs::read_to_string(f).unwrap()))))
        .collect()
}

/// The top-level modules a module's code names (`crate::x`, `use crate::{x, y}`).
fn names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(list) = rest.strip_prefix('{') {
            let end = list.find('}').unwrap_or(list.len());
            for item in list[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap()
}

/// Every cycle of `graph`, as the path of modules that leads back.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    // A cycle is a module that reaches itself; name each with its path.
    let mut cycles = Vec::new();
    for start in graph.keys() {
        let mut stack: Vec<Vec<&str>> = vec![vec![start.as_str()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = *path.last().unwrap();
            for next in graph.get(last).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(next);
                    cycles.push(cycle.join(" → "));
                } else if seen.insert(next.as_str()) {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push(longer);
                }
            }
        }
    }
    cycles
}

#[test]
fn the_host_modules_depend_on_each_other_without_a_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in host_modules() {
        let from = top(&module).to_string();
        if from.is_empty() {
            continue;
        }
        let edges = graph.entry(from.clone()).or_default();
        for to in names(&code) {
            if to != from {
                edges.insert(to);
            }
        }
    }
    let cycles = cycles(&graph);
    assert!(cycles.is_empty(), "modules that depend on each other:\n{}", cycles.join("\n"));
}

/// The sibling rooms a room's code names: for `housekeeping::restore`, the
/// `super::backup` and `crate::housekeeping::backup` it reaches (with or
/// without a `{…}` list), when `known` has such a module.
fn rooms_named(module: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let Some((parent, _)) = module.rsplit_once("::") else { return BTreeSet::new() };
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    let crate_path = format!("crate::{parent}::");
    for prefix in ["super::", crate_path.as_str()] {
        for (i, _) in code.match_indices(prefix) {
            // `crate::a::super::` is not a thing; `x::super::` (a longer path) is not ours.
            if prefix == "super::" && code[..i].ends_with("::") {
                continue;
            }
            let rest = &code[i + prefix.len()..];
            let items: Vec<String> = match rest.strip_prefix('{') {
                Some(list) => {
                    list[..list.find('}').unwrap_or(list.len())].split(',').map(|x| ident(x.trim())).collect()
                }
                None => vec![ident(rest)],
            };
            for item in items {
                let room = format!("{parent}::{item}");
                if room != module && known.contains(&room) {
                    out.insert(room);
                }
            }
        }
    }
    out
}

#[test]
fn the_rooms_of_one_module_depend_on_each_other_without_a_cycle() {
    let modules = host_modules();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &modules {
        graph.entry(module.clone()).or_default().extend(rooms_named(module, code, &known));
    }
    let cycles = cycles(&graph);
    assert!(cycles.is_empty(), "rooms that depend on each other:\n{}", cycles.join("\n"));
}

/// The external crates that carry a concern, and the only modules that may
/// name them (ARCHITECTURE.md, "Deliberately absent").
const CONFINED: &[(&str, &[&str])] = &[
    // `sqlite` opens every connection (hardened); `elsewhere::sqlite` reads
    // a database file from elsewhere without trusting it.
    ("rusqlite", &["sqlite", "caps::store", "gate::record", "plans", "elsewhere::sqlite"]),
    ("wasmtime", &["runtime", "bindings", "caps"]),
    ("wasmtime_wasi", &["runtime", "bindings", "caps"]),
    ("wasmtime_wasi_http", &["runtime", "bindings", "caps"]),
    ("axum", &["server"]),
    ("hyper", &["server", "caps::network"]),
    ("rmcp", &["mcp"]),
    // The kernel's confinement has one home: the shim every process the host
    // starts goes through.
    ("landlock", &["caps::confine"]),
    ("seccompiler", &["caps::confine"]),
    ("signal_hook", &["caps::confine"]),
];

#[test]
fn the_crates_that_carry_a_concern_stay_in_their_modules() {
    let mut crossed = Vec::new();
    for (module, code) in host_modules() {
        for (krate, allowed) in CONFINED {
            let named = code.match_indices(krate).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                let after = code[i + krate.len()..].chars().next();
                !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    && after == Some(':')
                    && code[i + krate.len()..].starts_with("::")
            });
            let inside = allowed.iter().any(|a| module == *a || module.starts_with(&format!("{a}::")));
            if named && !inside {
                crossed.push(format!("{module} names {krate} (only {} may)", allowed.join(", ")));
            }
        }
    }
    // The gate decides; it knows no transport.
    for (module, code) in host_modules() {
        if top(&module) == "gate" {
            for transport in ["axum::", "hyper::", "tokio::net", "crate::server", "crate::control", "crate::mcp"] {
                if code.contains(transport) {
                    crossed.push(format!("{module} names {transport}: the gate knows no transport"));
                }
            }
        }
    }
    assert!(crossed.is_empty(), "{}", crossed.join("\n"));
}

/// Every SQLite connection the host opens is opened by `sqlite::open` (or
/// `sqlite::in_memory`): `trusted_schema = OFF`, defensive, no extension. A
/// database file may have come from elsewhere.
#[test]
fn every_sqlite_connection_is_opened_by_the_hardened_helper() {
    let mut found = Vec::new();
    for (module, code) in host_modules() {
        for open in ["Connection::open", "open_in_memory", "open_with_flags"] {
            if module != "sqlite" && code.contains(open) {
                found.push(format!("{module} calls {open}; open connections with crate::sqlite::open"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    // No way to load an extension is compiled in.
    let manifest = std::fs::read_to_string(repo().join("host/Cargo.toml")).unwrap();
    let rusqlite = manifest.lines().find(|l| l.starts_with("rusqlite")).expect("host/Cargo.toml names rusqlite");
    assert!(!rusqlite.contains("load_extension") && !rusqlite.contains("bundled-full"), "{rusqlite}");
}

/// `build::check` and `build::policy` share what they both need through
/// `build` itself, never through each other.
#[test]
fn build_check_and_build_policy_do_not_import_each_other() {
    for (module, code) in host_modules() {
        let other = match module.as_str() {
            "build::check" => "policy::",
            "build::policy" => "check::",
            _ => continue,
        };
        assert!(!code.contains(other), "{module} names {other}");
    }
}

#[test]
fn the_tidy_reader_finds_what_it_looks_for() {
    // The checks above are only as good as this reading.
    let code = "use crate::{apps, gate::Caller};\nfn f() { crate::caps::store::x(); }";
    assert_eq!(names(code), ["apps", "caps", "gate"].map(String::from).into());
    assert_eq!(without_tests("a\n#[cfg(test)]\nmod tests { crate::b }"), "a\n");
    assert_eq!(code_only("a // crate::x\nb \"crate::y \\\" z\" c '\"' d"), "a \nb \"\" c '' d");
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")].iter().fold(BTreeMap::new(), |mut g, (from, to)| {
            g.entry(from.to_string()).or_insert_with(BTreeSet::new).insert(to.to_string());
            g
        });
    assert!(cycles(&graph).contains(&"a → b → c → a".to_string()), "{:?}", cycles(&graph));
    let known: BTreeSet<String> = ["h::backup", "h::restore", "h::list"].map(String::from).into();
    let named = rooms_named("h::restore", "use super::{backup::Entry, list};\nfn f() { crate::h::list::x(); }", &known);
    assert_eq!(named, ["h::backup", "h::list"].map(String::from).into());
    assert!(rooms_named("h::backup", "use super::said; use crate::other::restore;", &known).is_empty());
    let src = Path::new("/r/host/src");
    assert_eq!(module_of(src, Path::new("/r/host/src/caps/store.rs")), "caps::store");
    assert_eq!(module_of(src, Path::new("/r/host/src/gate/mod.rs")), "gate");
}

/// Every file of host/src with its whole code (tests too), comments and
/// string contents left out.
fn host_code_with_tests() -> Vec<(String, String)> {
    let src = repo().join("host/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    files.iter().map(|f| (module_of(&src, f), code_only(&std::fs::read_to_string(f).unwrap()))).collect()
}

/// The ways to write to a terminal that pass by the one writer.
const RAW_PRINTS: &[&str] = &[
    "println!",
    "eprintln!",
    "print!",
    "eprint!",
    "dbg!",
    "io::stdout",
    "io::stderr",
    "libc::write",
    "stdout()",
    "stderr()",
];

/// Whether `code` uses `what` as itself (`print!` is not the end of `eprint!`
/// or `say_inline!`).
fn uses(code: &str, what: &str) -> bool {
    code.match_indices(what).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[test]
fn the_escape_probe_is_compiled_into_no_release() {
    // What a runtime escape would try (raw opens, connects, exec) is a test's
    // tool: its module is declared only in debug builds, so a release build
    // cannot name it — not the runtime that links it as a guest's import,
    // not the build that accepts a component importing it, not the command
    // that runs it unconfined — and no other file names its interface.
    let lib = std::fs::read_to_string(repo().join("host/src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib.lines().filter(|l| l.trim_end().ends_with("mod probe;")).collect();
    assert_eq!(declared.len(), 1, "the probe module is declared once");
    let at = lib.find(declared[0]).unwrap();
    let before = lib[..at].lines().last().unwrap_or_default().trim();
    assert_eq!(before, "#[cfg(debug_assertions)]", "the probe module is declared for debug builds only");
    let src = repo().join("host/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut users = 0;
    for f in files.iter().filter(|f| !f.ends_with("src/probe.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains("autoapp:escape"), "{} names the probe's interface: only probe.rs may", f.display());
        let lines: Vec<&str> = text.lines().collect();
        let uses = |l: &&&str| l.contains("crate::probe") && !l.trim_start().starts_with("//");
        for (n, _) in lines.iter().enumerate().filter(|(_, l)| uses(l)) {
            users += 1;
            let guarded = lines[n.saturating_sub(4)..n].iter().any(|l| l.trim() == "#[cfg(debug_assertions)]");
            assert!(guarded, "{}:{} uses the probe outside `#[cfg(debug_assertions)]`", f.display(), n + 1);
        }
    }
    assert!(users >= 3, "the runtime links it, the build accepts it, the command line runs it: {users} uses");
    let probe = std::fs::read_to_string(repo().join("host/src/probe.rs")).unwrap();
    assert!(probe.contains("\"autoapp:escape/probe\""), "the probe names its interface");
}

#[test]
fn every_print_goes_through_the_one_escaping_writer() {
    // Text from an app, an agent or a file (a grant's name, a plan, a record
    // row, an error message) reaches a terminal only through
    // elsewhere::text's `say!`/`tell!`, which show control and format
    // characters visibly: no print of the host writes past them. The one
    // writer itself, and the tracing subscriber's writer (tracing escapes
    // what it logs), are the exceptions, each named.
    let allowed: &[(&str, &str)] = &[
        ("elsewhere::text", "io::stdout"),
        ("elsewhere::text", "io::stderr"),
        ("elsewhere::text", "stdout()"),
        ("elsewhere::text", "stderr()"),
        ("cli", "io::stderr"),
        // An app's worker answers its parent on its standard output, a pipe
        // its parent made, never a terminal; the parent says what it read.
        ("worker", "io::stdout"),
        ("worker", "stdout()"),
        // A launcher's worker answers on the same pipe, one line per call.
        ("worker::serve", "io::stdout"),
        ("worker::serve", "stdout()"),
    ];
    let mut raw = Vec::new();
    for (module, code) in host_code_with_tests() {
        for what in RAW_PRINTS {
            if uses(&code, what) && !allowed.contains(&(module.as_str(), *what)) {
                raw.push(format!(
                    "{module} uses {what}: print with say!/tell! (elsewhere::text), which escapes what it prints"
                ));
            }
        }
    }
    // The tracing subscriber is told to write to stderr by name, once.
    let cli = std::fs::read_to_string(repo().join("host/src/cli/mod.rs")).unwrap();
    assert_eq!(cli.matches("io::stderr").count(), 1, "cli names io::stderr only for the tracing subscriber's writer");
    assert!(raw.is_empty(), "{}", raw.join("\n"));
    // The reading finds what it looks for.
    assert!(uses(&code_only("fn f() { println!(\"{x}\") }"), "println!"));
    assert!(!uses("say_inline!(x)", "print!") && !uses("tell_inline!(x)", "print!") && uses("x; print!(y)", "print!"));
}
