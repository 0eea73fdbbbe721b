//! Architecture checks over every crate's `src/` and manifest: each file opens with a `//!`
//! line, the files of a crate import one another without a cycle, the crates depend on one
//! another only along the arrows of ARCHITECTURE.md, and the libraries it says only some crates
//! know (rmcp, clap, hyper, the PostgreSQL driver, OpenTelemetry, ...) are known only by them.
//!
//! A file imports another when its code names a path into it: `use crate::a::b::X`,
//! `use super::X`, or `crate::a::f()` / `super::f()` in an expression. `mod` declarations
//! (the module tree itself) do not count, nor do comments, strings, or `super::` inside an
//! inline module (`mod tests { use super::*; }`: a test module importing its parent is no
//! cycle). A path is resolved to the file that defines its longest module prefix (`a.rs` or
//! `a/mod.rs`), found by following `mod a;` from each crate root (`lib.rs`, `main.rs`,
//! `bin/*.rs`).
//!
//! A crate depends on what its `Cargo.toml` lists under `[dependencies]` and
//! `[target.'…'.dependencies]`, optional ones included (a feature turning one on counts);
//! `[dev-dependencies]` and `[build-dependencies]` do not (tests and build scripts are not
//! what the crate's users link).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, each a folder at the top with its sources in `src/`. Any other
/// folder with a `Cargo.toml` and a `src/` (a crate added since) is checked too.
const CRATES: &[&str] = &[
    "protocol",
    "http",
    "runner",
    "host",
    "openapi",
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

/// The arrows between the workspace's crates: each crate and the workspace crates it may
/// depend on; any other is a dependency ARCHITECTURE.md does not allow.
/// `protocol` ← `http` ← `runner`; `protocol` ← `host` ← `policy` ← `capabilities`, `mcp` ←
/// `cli`; `runner` never depends on `host`; the SDKs and the conformance kit sit on the side.
const ARROWS: &[(&str, &[&str])] = &[
    ("execbox-protocol", &[]),
    ("execbox-http", &["execbox-protocol"]),
    ("execbox-runner", &["execbox-protocol", "execbox-http"]),
    ("execbox-pg", &[]),
    // The in-process executor (feature `inprocess`) links the runner's engine.
    ("execbox-host", &["execbox-protocol", "execbox-runner"]),
    // OpenAPI documents as providers: over the core's provider API, with an HTTP client the
    // core does not carry.
    ("execbox-openapi", &["execbox-host"]),
    (
        "execbox-policy",
        &["execbox-protocol", "execbox-host", "execbox-pg"],
    ),
    (
        "execbox-capabilities",
        &[
            "execbox-protocol",
            "execbox-host",
            "execbox-policy",
            "execbox-pg",
            "execbox-http",
        ],
    ),
    (
        "execbox-mcp",
        &[
            "execbox-protocol",
            "execbox-host",
            "execbox-policy",
            "execbox-http",
        ],
    ),
    (
        "execbox-cli",
        &[
            "execbox-protocol",
            "execbox-http",
            "execbox-runner",
            "execbox-host",
            "execbox-policy",
            "execbox-capabilities",
            "execbox-mcp",
            "execbox-openapi",
        ],
    ),
    ("execbox-conformance", &[]),
    (
        "execbox-python",
        &[
            "execbox-host",
            "execbox-policy",
            "execbox-runner",
            "execbox-openapi",
        ],
    ),
    (
        "execbox-node",
        &["execbox-host", "execbox-policy", "execbox-openapi"],
    ),
];

/// A library some crates only may know: a crate name, or every crate whose name contains a word.
#[derive(Debug, Clone, Copy)]
enum Library {
    Named(&'static str),
    Containing(&'static str),
}

impl Library {
    fn matches(self, dependency: &str) -> bool {
        match self {
            Library::Named(name) => dependency == name,
            Library::Containing(word) => dependency.contains(word),
        }
    }
}

/// A crate that may know a library, and the feature of its own that must turn it on (`None`:
/// it may depend on it always).
type Knower = (&'static str, Option<&'static str>);

/// Which crates know each of these libraries, and behind which of their features (`None`:
/// always). A crate not listed must not depend on it; a crate listed with a feature must list
/// it as optional, turned on by that feature alone.
const ONLY: &[(Library, &[Knower])] = &[
    (Library::Named("rmcp"), &[("execbox-mcp", None)]),
    // The binaries' command lines: `execbox`, `execbox-runner` (and `execbox runner`, which is
    // the runner's `cli` feature linked into the CLI), and the conformance kit's replayer.
    (
        Library::Named("clap"),
        &[
            ("execbox-cli", None),
            ("execbox-runner", Some("cli")),
            ("execbox-conformance", None),
        ],
    ),
    (
        Library::Named("anyhow"),
        &[
            ("execbox-cli", None),
            ("execbox-runner", Some("cli")),
            ("execbox-conformance", None),
        ],
    ),
    (
        Library::Named("tracing-subscriber"),
        &[("execbox-cli", None), ("execbox-runner", Some("cli"))],
    ),
    (Library::Named("clap_complete"), &[("execbox-cli", None)]),
    (
        Library::Containing("opentelemetry"),
        &[("execbox-cli", None)],
    ),
    // The PostgreSQL driver (tokio-postgres), its pool and its TLS.
    (Library::Containing("postgres"), &[("execbox-pg", None)]),
    // Policy state: `execbox-host` knows no policy.
    (
        Library::Named("rusqlite"),
        &[("execbox-policy", None), ("execbox-capabilities", None)],
    ),
    (Library::Named("governor"), &[("execbox-policy", None)]),
    (
        Library::Containing("hyper"),
        &[("execbox-http", Some("server"))],
    ),
    (
        Library::Named("axum"),
        &[
            ("execbox-http", Some("server")),
            ("execbox-capabilities", Some("serve")),
            ("execbox-mcp", None),
        ],
    ),
    (Library::Named("rquickjs"), &[("execbox-runner", None)]),
];

/// What `execbox-protocol` may depend on: the wire, and nothing else.
const PROTOCOL_DEPENDS_ON: &[&str] = &["serde", "serde_json", "thiserror"];

#[test]
fn crates_depend_on_one_another_only_along_the_arrows() {
    let problems = arrow_problems(&manifests());
    assert!(
        problems.is_empty(),
        "dependencies between crates that ARCHITECTURE.md does not allow (its code map says \
         which way the arrows point; change the design there first, then ARROWS here):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn only_the_crates_named_in_architecture_md_know_these_libraries() {
    let problems = library_problems(&manifests());
    assert!(
        problems.is_empty(),
        "libraries known by crates that ARCHITECTURE.md says must not know them:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn protocol_depends_on_serde_serde_json_and_thiserror_only() {
    let manifests = manifests();
    let protocol = manifests
        .iter()
        .find(|m| m.name == "execbox-protocol")
        .expect("the protocol crate's manifest");
    let extra: Vec<&String> = protocol
        .dependencies
        .keys()
        .filter(|d| !PROTOCOL_DEPENDS_ON.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "execbox-protocol depends on {extra:?}; it is the wire only and needs {} alone",
        PROTOCOL_DEPENDS_ON.join(", ")
    );
}

/// The checker of manifests itself: what counts as a dependency, and planted violations found.
#[test]
fn the_manifest_checker_finds_planted_violations() {
    let text = r#"
[package]
name = "execbox-host" # the core
version.workspace = true

[features]
default = ["store"]
store = [
    "dep:rusqlite", # a planted policy store
]
web = ["axum"]

[dependencies]
execbox-protocol.workspace = true
execbox-policy = { workspace = true }
rusqlite = { version = "0.42", optional = true, features = [
    "bundled",
] }
axum = { version = "0.8", optional = true }

[target.'cfg(unix)'.dependencies]
clap = "4"

[dev-dependencies]
rmcp = "3"

[build-dependencies]
hyper = "1"
"#;
    let manifest = Manifest::parse(text);
    assert_eq!(manifest.name, "execbox-host");
    let listed: Vec<(&str, bool)> = manifest
        .dependencies
        .iter()
        .map(|(name, optional)| (name.as_str(), *optional))
        .collect();
    assert_eq!(
        listed,
        [
            ("axum", true),
            ("clap", false),
            ("execbox-policy", false),
            ("execbox-protocol", false),
            ("rusqlite", true),
        ]
    );
    assert_eq!(manifest.enabled_by("rusqlite"), ["store"]);
    // An optional dependency no `dep:` names is its own implicit feature.
    assert_eq!(manifest.enabled_by("axum"), ["axum", "web"]);
    let manifests = [manifest];
    assert_eq!(
        arrow_problems(&manifests),
        ["execbox-host depends on execbox-policy"]
    );
    let mut found = library_problems(&manifests);
    found.sort();
    assert_eq!(
        found,
        [
            "execbox-host depends on axum",
            "execbox-host depends on clap",
            "execbox-host depends on rusqlite",
        ]
    );
    // A crate allowed a library behind a feature, with it unconditional or behind another.
    let runner = Manifest::parse(
        "[package]\nname = \"execbox-runner\"\n[features]\nextra = [\"dep:clap\"]\n\
         [dependencies]\nclap = { version = \"4\", optional = true }\nanyhow = \"1\"\n",
    );
    let mut found = library_problems(&[runner]);
    found.sort();
    assert_eq!(
        found,
        [
            "execbox-runner depends on anyhow always; only its feature `cli` may turn it on",
            "execbox-runner depends on clap through its features [\"extra\"]; only its feature \
             `cli` may turn it on",
        ]
    );
}

/// What [`ARROWS`] forbids in `manifests`, one line each.
fn arrow_problems(manifests: &[Manifest]) -> Vec<String> {
    let mut problems = Vec::new();
    for manifest in manifests {
        let Some((_, allowed)) = ARROWS.iter().find(|(name, _)| *name == manifest.name) else {
            problems.push(format!(
                "{} is not in ARROWS: add it with the crates it may depend on, and its place \
                 in ARCHITECTURE.md",
                manifest.name
            ));
            continue;
        };
        for dependency in manifest.dependencies.keys() {
            let internal = ARROWS.iter().any(|(name, _)| name == dependency);
            if internal && !allowed.contains(&dependency.as_str()) {
                problems.push(format!("{} depends on {dependency}", manifest.name));
            }
        }
    }
    problems
}

/// What [`ONLY`] forbids in `manifests`, one line each.
fn library_problems(manifests: &[Manifest]) -> Vec<String> {
    let mut problems = Vec::new();
    for manifest in manifests {
        for (dependency, optional) in &manifest.dependencies {
            for (library, knowers) in ONLY {
                if !library.matches(dependency) {
                    continue;
                }
                let Some((_, feature)) = knowers.iter().find(|(k, _)| *k == manifest.name) else {
                    problems.push(format!("{} depends on {dependency}", manifest.name));
                    continue;
                };
                let Some(feature) = feature else {
                    continue;
                };
                if !optional {
                    problems.push(format!(
                        "{} depends on {dependency} always; only its feature `{feature}` may \
                         turn it on",
                        manifest.name
                    ));
                    continue;
                }
                let enabled_by = manifest.enabled_by(dependency);
                if enabled_by != [*feature] {
                    problems.push(format!(
                        "{} depends on {dependency} through its features {enabled_by:?}; only \
                         its feature `{feature}` may turn it on",
                        manifest.name
                    ));
                }
            }
        }
    }
    problems
}

/// The manifest of every crate of the workspace (those [`crate_sources`] finds).
fn manifests() -> Vec<Manifest> {
    crate_sources()
        .iter()
        .map(|src| {
            let path = src.parent().unwrap().join("Cargo.toml");
            Manifest::parse(&std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// A crate's manifest, as far as these checks read it.
#[derive(Debug)]
struct Manifest {
    /// `[package] name`.
    name: String,
    /// Each dependency of `[dependencies]` and `[target.'…'.dependencies]` (by the name of the
    /// package it is, when `package =` renames it), and whether it is optional.
    dependencies: BTreeMap<String, bool>,
    /// `[features]`: each feature and what it turns on (`dep:x`, `x/f`, `x?/f`, another feature).
    features: BTreeMap<String, Vec<String>>,
}

impl Manifest {
    /// Reads the sections these checks need. Only the forms this workspace writes are known:
    /// `name = "1"`, `name.workspace = true`, `name = { … }` (over several lines too) and
    /// feature lists; a `[dependencies.name]` table is refused, so it is not silently skipped.
    fn parse(text: &str) -> Manifest {
        #[derive(PartialEq)]
        enum Section {
            Package,
            Dependencies,
            Features,
            Other,
        }
        let mut manifest = Manifest {
            name: String::new(),
            dependencies: BTreeMap::new(),
            features: BTreeMap::new(),
        };
        let mut section = Section::Other;
        let mut entry = String::new();
        for line in text.lines() {
            let line = without_comment(line);
            if entry.is_empty() && line.trim_start().starts_with('[') {
                let header = line.trim();
                section = if header == "[package]" {
                    Section::Package
                } else if header == "[dependencies]"
                    || (header.starts_with("[target.") && header.ends_with(".dependencies]"))
                {
                    Section::Dependencies
                } else if header == "[features]" {
                    Section::Features
                } else {
                    let table = header.starts_with("[dependencies.")
                        || (header.starts_with("[target.") && header.contains(".dependencies."));
                    assert!(
                        !table,
                        "{header}: write a dependency as one `name = {{ … }}` line, which \
                         this check reads"
                    );
                    Section::Other
                };
                continue;
            }
            entry.push_str(&line);
            entry.push('\n');
            if !balanced(&entry) {
                continue;
            }
            let whole = std::mem::take(&mut entry);
            let Some((key, value)) = whole.split_once('=') else {
                continue;
            };
            let key = key.trim().trim_matches('"');
            let value = value.trim();
            match section {
                Section::Package if key == "name" => {
                    manifest.name = value.trim_matches('"').to_owned();
                }
                Section::Dependencies => {
                    let name = key.split('.').next().unwrap_or(key);
                    let inline = value.starts_with('{').then_some(value);
                    let field = |field: &str| inline.and_then(|t| table_field(t, field));
                    let optional = field("optional").as_deref() == Some("true");
                    let package = field("package").map(|p| p.trim_matches('"').to_owned());
                    manifest
                        .dependencies
                        .insert(package.unwrap_or_else(|| name.to_owned()), optional);
                }
                Section::Features => {
                    manifest.features.insert(key.to_owned(), quoted(value));
                }
                _ => {}
            }
        }
        manifest
    }

    /// The features that turn on optional dependency `name` directly: those listing
    /// `dep:name`, `name` or `name/feature`, and when no feature says `dep:name`, the implicit
    /// feature `name` itself.
    fn enabled_by(&self, name: &str) -> Vec<String> {
        let explicit = self
            .features
            .values()
            .flatten()
            .any(|item| *item == format!("dep:{name}"));
        let mut by: Vec<String> = self
            .features
            .iter()
            .filter(|(_, items)| {
                items.iter().any(|item| {
                    *item == format!("dep:{name}")
                        || *item == name
                        || item.starts_with(&format!("{name}/"))
                })
            })
            .map(|(feature, _)| feature.clone())
            .collect();
        if !explicit && !by.iter().any(|feature| feature == name) {
            by.push(name.to_owned());
        }
        by.sort();
        by
    }
}

/// `line` without a `#` comment (a `#` inside a string is kept).
fn without_comment(line: &str) -> String {
    let mut in_string = false;
    let mut kept = String::new();
    for c in line.chars() {
        match c {
            '"' => in_string = !in_string,
            '#' if !in_string => break,
            _ => {}
        }
        kept.push(c);
    }
    kept
}

/// Whether every `[` and `{` of `text` outside strings is closed.
fn balanced(text: &str) -> bool {
    let mut depth = 0i32;
    let mut in_string = false;
    for c in text.chars() {
        match c {
            '"' => in_string = !in_string,
            '[' | '{' if !in_string => depth += 1,
            ']' | '}' if !in_string => depth -= 1,
            _ => {}
        }
    }
    depth <= 0
}

/// The value of `field` in an inline table `{ a = 1, field = value, … }`, as written.
fn table_field(table: &str, field: &str) -> Option<String> {
    let inner = table.trim().trim_start_matches('{').trim_end_matches('}');
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in inner.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().find_map(|part| {
        let (key, value) = part.split_once('=')?;
        (key.trim() == field).then(|| value.trim().to_owned())
    })
}

/// The quoted strings of `text`, in order.
fn quoted(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
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
