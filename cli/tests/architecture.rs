//! Architecture checks over every crate's `src/`: each file opens with a `//!` line, the
//! files of a crate import one another without a cycle, and only the binary depends on
//! OpenTelemetry.
//!
//! A file imports another when its code names a path into it: `use crate::a::b::X`,
//! `use super::X`, or `crate::a::f()` / `super::f()` in an expression. `mod` declarations
//! (the module tree itself) do not count, nor do comments, strings, or `super::` inside an
//! inline module (`mod tests { use super::*; }`: a test module importing its parent is no
//! cycle). A path is resolved to the file that defines its longest module prefix (`a.rs` or
//! `a/mod.rs`), found by following `mod a;` from each crate root (`lib.rs`, `main.rs`,
//! `bin/*.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, each a folder at the top with its sources in `src/`. Any other
/// folder with a `Cargo.toml` and a `src/` (a crate added since) is checked too.
const CRATES: &[&str] = &[
    "protocol",
    "runner",
    "host",
    "policy",
    "pg",
    "capabilities",
    "mcp",
    "cli",
    "conformance",
    "sdk/python",
    "sdk/node",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `src/` folder of every crate at the top of the workspace (not `fuzz/` nor `target/`),
/// and of every SDK's crate under `sdk/`.
fn crate_sources() -> Vec<PathBuf> {
    let root = workspace();
    let folders = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|entries| entries.map(|entry| entry.unwrap().path()).collect())
            .unwrap_or_default()
    };
    let mut found: Vec<PathBuf> = folders(&root)
        .into_iter()
        .chain(folders(&root.join("sdk")))
        .filter(|dir| {
            let name = dir.file_name().unwrap_or_default();
            name != "fuzz" && name != "target"
        })
        .filter(|dir| dir.join("Cargo.toml").is_file() && dir.join("src").is_dir())
        .map(|dir| dir.join("src"))
        .collect();
    found.sort();
    for krate in CRATES {
        assert!(
            found.contains(&root.join(krate).join("src")),
            "no crate {krate} with a src/ under {}",
            root.display()
        );
    }
    found
}

#[test]
fn every_source_file_opens_with_a_doc_line() {
    let root = workspace();
    let mut missing = Vec::new();
    for src in crate_sources() {
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).unwrap();
            if !text.lines().next().unwrap_or("").starts_with("//!") {
                missing.push(shown(&root, &file));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` line saying what they are for:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn no_crate_has_an_import_cycle_between_its_files() {
    let root = workspace();
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let mut cycles = BTreeSet::new();
    for src in crate_sources() {
        for crate_root in crate_roots(&src) {
            for cycle in import_cycles(&crate_root, &read) {
                let files: Vec<String> = cycle.iter().map(|f| shown(&root, f)).collect();
                cycles.insert(files.join(" -> "));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "files that import each other (break the cycle, e.g. by moving what they share to a \
         module both import):\n  {}",
        cycles.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

/// Only the binary knows OpenTelemetry: the libraries make `tracing` spans and read or write a
/// `traceparent` through `execbox_host::trace` (docs/observability.md).
#[test]
fn only_the_cli_depends_on_opentelemetry() {
    let root = workspace();
    let mut found = Vec::new();
    for src in crate_sources() {
        let krate = src.parent().unwrap();
        if krate.ends_with("cli") {
            continue;
        }
        let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
        for line in manifest.lines() {
            let name = line.split(['=', ' ', '.']).next().unwrap_or("");
            if name.contains("opentelemetry") {
                found.push(format!(
                    "{}: {line}",
                    shown(&root, &krate.join("Cargo.toml"))
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "libraries depending on OpenTelemetry (export in the binary, with tracing spans in the \
         libraries):\n  {}",
        found.join("\n  ")
    );
}

/// The checker itself: a planted cycle is found and an inline test module's `super::*` is not.
#[test]
fn the_checker_finds_a_planted_cycle() {
    let files: BTreeMap<PathBuf, &str> = [
        ("src/lib.rs", "//! Root.\nmod a;\nmod b;\nmod c;\n"),
        (
            "src/a.rs",
            "//! A.\nuse crate::b::B; // crate::c is only in a comment\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        (
            "src/b/mod.rs",
            "//! B.\nmod inner;\npub struct B;\nfn f() { let _ = \"crate::c\"; crate::b::inner::g(); }\n",
        ),
        ("src/b/inner.rs", "//! Inner.\nuse super::super::{c::{self, C}};\n"),
        (
            "src/c.rs",
            "//! C.\npub struct C<'a>(&'a str);\nfn f() { let _ = '\\''; crate::a::h() }\n",
        ),
    ]
    .into_iter()
    .map(|(path, text)| (PathBuf::from(path), text))
    .collect();
    let read = |path: &Path| files.get(path).map(|text| text.to_string());
    let cycles = import_cycles(Path::new("src/lib.rs"), &read);
    let shown: Vec<String> = cycles
        .iter()
        .map(|cycle| {
            let names: Vec<String> = cycle.iter().map(|f| f.display().to_string()).collect();
            names.join(" -> ")
        })
        .collect();
    assert_eq!(
        shown,
        ["src/a.rs -> src/b/mod.rs -> src/b/inner.rs -> src/c.rs -> src/a.rs"]
    );
}

/// Every `.rs` file under `dir`, skipping `target/` and `fuzz/`, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap_or_default();
            if path.is_dir() {
                if name != "target" && name != "fuzz" {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The crate roots in `src`: the library, the binary, and any `bin/*.rs`.
fn crate_roots(src: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .filter(|path| path.is_file())
        .collect();
    roots.extend(
        rust_files(&src.join("bin"))
            .into_iter()
            .filter(|path| path.parent() == Some(&src.join("bin"))),
    );
    roots
}

/// A path relative to the workspace root, for messages.
fn shown(root: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(root).unwrap_or(file);
    relative.display().to_string()
}

/// The import cycles among the files of the crate rooted at `root`, each as its files with the
/// first repeated at the end; `read` gives a file's text (`None`: no such file).
fn import_cycles(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Vec<Vec<PathBuf>> {
    // Module path -> file, and each file's text and module path, following `mod x;`.
    let mut modules: BTreeMap<Vec<String>, PathBuf> = BTreeMap::new();
    let mut scanned: Vec<(PathBuf, Vec<String>, Scan)> = Vec::new();
    let mut pending = vec![(root.to_path_buf(), Vec::new())];
    while let Some((file, module)) = pending.pop() {
        let Some(text) = read(&file) else {
            continue;
        };
        let scan = scan(&text);
        let owns_dir = module.is_empty() || file.file_name().is_some_and(|n| n == "mod.rs");
        let dir = if owns_dir {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for child in &scan.children {
            let child_dir = child[..child.len() - 1]
                .iter()
                .fold(dir.clone(), |d, s| d.join(s));
            let name = child.last().unwrap();
            let flat = child_dir.join(format!("{name}.rs"));
            let nested = child_dir.join(name).join("mod.rs");
            let child_file = if read(&flat).is_some() { flat } else { nested };
            let mut child_module = module.clone();
            child_module.extend(child.iter().cloned());
            pending.push((child_file, child_module));
        }
        modules.insert(module.clone(), file.clone());
        scanned.push((file, module, scan));
    }
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, module, scan) in &scanned {
        let targets = edges.entry(file.clone()).or_default();
        for path in &scan.paths {
            if let Some(target) = resolve(module, path, &modules) {
                if target != file {
                    targets.insert(target.clone());
                }
            }
        }
    }
    find_cycles(&edges)
}

/// The file a path names, from a file of module `module`; `None` when it names that file.
fn resolve<'m>(
    module: &[String],
    path: &NamedPath,
    modules: &'m BTreeMap<Vec<String>, PathBuf>,
) -> Option<&'m PathBuf> {
    let mut full: Vec<String> = match path.start {
        Start::Crate => Vec::new(),
        // An inline module (`mod tests`) is part of its file, and its `super::` names that
        // file or, for a test's helper (`super::super::x`), what the file's tests use.
        Start::Super(_) if path.in_inline_module => return None,
        Start::Super(count) => module[..module.len().checked_sub(count)?].to_vec(),
    };
    full.extend(path.segments.iter().cloned());
    (0..=full.len())
        .rev()
        .find_map(|len| modules.get(&full[..len]))
}

/// Each cycle of the graph reached by a depth-first walk, once, starting at its least file.
fn find_cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    fn walk<'a>(
        file: &'a PathBuf,
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        stack: &mut Vec<&'a PathBuf>,
        done: &mut BTreeSet<&'a PathBuf>,
        cycles: &mut BTreeSet<Vec<PathBuf>>,
    ) {
        if let Some(at) = stack.iter().position(|f| *f == file) {
            let mut cycle: Vec<PathBuf> = stack[at..].iter().map(|f| (*f).clone()).collect();
            let least = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap();
            cycle.rotate_left(least);
            cycle.push(cycle[0].clone());
            cycles.insert(cycle);
            return;
        }
        if !done.insert(file) {
            return;
        }
        stack.push(file);
        for next in edges.get(file).into_iter().flatten() {
            walk(next, edges, stack, done, cycles);
        }
        stack.pop();
    }
    let mut cycles = BTreeSet::new();
    let mut done = BTreeSet::new();
    for file in edges.keys() {
        walk(file, edges, &mut Vec::new(), &mut done, &mut cycles);
    }
    cycles.into_iter().collect()
}

/// What one file declares and names.
#[derive(Debug, Default)]
struct Scan {
    /// `mod x;` declarations, with the inline modules around them (`mod a { mod x; }`: a, x).
    children: Vec<Vec<String>>,
    /// Every `crate::` or `super::` path in code, use trees expanded.
    paths: Vec<NamedPath>,
}

#[derive(Debug)]
struct NamedPath {
    start: Start,
    /// The segments after `crate`/`super`: modules, then perhaps an item.
    segments: Vec<String>,
    /// Whether the path sits in an inline module (`mod tests { … }`).
    in_inline_module: bool,
}

#[derive(Debug, Clone, Copy)]
enum Start {
    Crate,
    /// `super::` repeated this many times.
    Super(usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// Finds the `mod` declarations and `crate::`/`super::` paths of a file's code.
fn scan(text: &str) -> Scan {
    let tokens = tokenize(text);
    let mut scan = Scan::default();
    // Inline modules around the current token: name and the brace depth inside them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let ident = |at: usize| match tokens.get(at) {
            Some(Token::Ident(name)) => Some(name.as_str()),
            _ => None,
        };
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, inside)| *inside == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(name) = ident(i + 1) {
                    match tokens.get(i + 2) {
                        Some(Token::Punct(';')) => {
                            let mut child: Vec<String> =
                                inline.iter().map(|(n, _)| n.clone()).collect();
                            child.push(name.to_owned());
                            scan.children.push(child);
                        }
                        Some(Token::Punct('{')) => {
                            inline.push((name.to_owned(), depth + 1));
                            depth += 1;
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Token::Ident(word)
                if (word == "crate" || word == "super")
                    && tokens.get(i + 1) == Some(&Token::PathSep)
                    && (i == 0 || tokens[i - 1] != Token::PathSep) =>
            {
                let mut trees = Vec::new();
                i = use_tree(&tokens, i, Vec::new(), &mut trees);
                for mut segments in trees {
                    let supers = segments.iter().take_while(|s| *s == "super").count();
                    let start = if supers > 0 {
                        Start::Super(supers)
                    } else {
                        Start::Crate
                    };
                    segments.drain(..supers.max(1));
                    segments.retain(|s| s != "self");
                    scan.paths.push(NamedPath {
                        start,
                        segments,
                        in_inline_module: !inline.is_empty(),
                    });
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

/// Reads the path or use tree at `i` (`a::b::{c, d::e}`), adding each full path to `trees`
/// after `prefix`; returns the index after it.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    mut prefix: Vec<String>,
    trees: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match tokens.get(i) {
            Some(Token::Ident(name)) => {
                prefix.push(name.clone());
                i += 1;
            }
            Some(Token::Punct('{')) => {
                i += 1;
                while i < tokens.len() && tokens[i] != Token::Punct('}') {
                    i = use_tree(tokens, i, prefix.clone(), trees);
                    while i < tokens.len() && !matches!(tokens[i], Token::Punct(',' | '}')) {
                        i += 1; // `as name`, or anything unexpected
                    }
                    if tokens.get(i) == Some(&Token::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => break, // `*`, or the end of the path
        }
        if tokens.get(i) != Some(&Token::PathSep) {
            break;
        }
        i += 1;
    }
    trees.push(prefix);
    i
}

/// The identifiers, `::` and punctuation of Rust source, without comments, strings,
/// characters and numbers.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let is_ident = |c: char| c == '_' || c.is_alphanumeric();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut nesting = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    nesting += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    nesting -= 1;
                    i += 2;
                    if nesting == 0 {
                        break;
                    }
                } else if i >= chars.len() {
                    break;
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            i = end;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal (a lifetime has no closing quote), `'\''` included.
            i += if at(i + 1) == '\\' { 3 } else { 2 };
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == 'r' && at(i + 1) == '#' && is_ident(at(i + 2)) {
            i += 2; // a raw identifier: `r#type`
        } else if is_ident(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            if !c.is_ascii_digit() {
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token::PathSep);
            i += 2;
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// The index after a raw or prefixed string literal starting at `i` (`r"…"`, `r#"…"#`,
/// `b"…"`, `br#"…"#`, `c"…"`), if one starts there.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1] == '_' || chars[i - 1].is_alphanumeric()) {
        return None;
    }
    let mut j = i;
    if matches!(chars.get(j), Some('b' | 'c')) {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    if j == i {
        return None;
    }
    let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '\\' && !raw {
            j += 2;
        } else if chars[j] == '"'
            && chars[j + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        } else {
            j += 1;
        }
    }
    Some(j)
}
