//! The mistakes table (docs/mistakes.md): the answer a model gets from `execbox mcp` for each
//! program of `conformance/mistakes/programs`, each a mistake models make every day.
//!
//! The trial `the_mistakes_table_is_current` runs every program through a real `execbox mcp`
//! (the tools file `conformance/mistakes/tools.yaml`, the upstream roles `alpha`, a rate-limited
//! `limited` and a `broken` one that does not start) and compares the table it renders with
//! docs/mistakes.md, so a change that makes an answer worse shows in review. With
//! `EXECBOX_BLESS=1` it writes the file instead:
//!
//! ```text
//! EXECBOX_BLESS=1 cargo test -p execbox-cli --test mcp -- the_mistakes_table_is_current
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{answer, Harness};

/// Where the programs and their tools live, and where the table goes.
const MISTAKES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/mistakes");
const TABLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mistakes.md");

/// Set to write docs/mistakes.md instead of comparing with it.
const BLESS_ENV: &str = "EXECBOX_BLESS";

/// One program (or `search_tools` query) of the table.
struct Case {
    /// The file name without its extension, e.g. `01-writes-not-awaited`.
    name: String,
    /// What the model got wrong (the `// mistake:` line).
    mistake: String,
    /// The program, or the query, without its header lines.
    body: String,
    /// A program run right after, whose answer shows what the first one left behind.
    then: Option<String>,
    /// A `search_tools` query rather than a program.
    search: bool,
}

fn cases() -> Result<Vec<Case>, String> {
    let dir = Path::new(MISTAKES).join("programs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "js" || x == "search"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut mistake = None;
        let mut then = None;
        let mut body = Vec::new();
        for line in text.lines() {
            if let Some(m) = line.strip_prefix("// mistake: ") {
                mistake = Some(m.to_owned());
            } else if let Some(t) = line.strip_prefix("// then: ") {
                then = Some(t.to_owned());
            } else {
                body.push(line);
            }
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        cases.push(Case {
            mistake: mistake.ok_or_else(|| format!("{name}: no `// mistake:` line"))?,
            name,
            body: body.join("\n").trim().to_owned(),
            then,
            search: path.extension().is_some_and(|x| x == "search"),
        });
    }
    Ok(cases)
}

/// What varies from run to run (times, the test's folder) replaced by a fixed word, so the
/// table changes only when an answer does.
fn steady(text: &str, dir: &Path) -> String {
    let mut out = text.replace(&dir.display().to_string(), "$DIR");
    for (before, unit) in [
        ("retry in ", " s"),
        ("pending ", " s"),
        ("\"retryAfterMs\":", ""),
        ("retryAfterMs: ", ""),
    ] {
        let mut rest = out.as_str();
        let mut steadied = String::with_capacity(out.len());
        while let Some(at) = rest.find(before) {
            let start = at + before.len();
            steadied.push_str(&rest[..start]);
            let digits = rest[start..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len() - start);
            if digits > 0 && rest[start + digits..].starts_with(unit) {
                steadied.push('N');
                rest = &rest[start + digits..];
            } else {
                rest = &rest[start..];
            }
        }
        steadied.push_str(rest);
        out = steadied;
    }
    out
}

/// The answer text as the table shows it: JSON answers pretty-printed, so a reader sees the
/// error message and the logs on lines of their own.
fn shown(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => {
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned())
        }
        _ => text.to_owned(),
    }
}

/// A Markdown table cell: one line, pipes escaped, cut at `max` characters.
fn cell(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = one_line.chars().take(max).collect();
    let cut = if cut.len() < one_line.len() {
        format!("{cut}…")
    } else {
        cut
    };
    cut.replace('|', "\\|")
}

/// The first thing a model reads in an answer: the error's message, or the result.
fn gist(text: &str) -> String {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return text.lines().next().unwrap_or_default().to_owned();
    };
    let mut out = if value["ok"] == json!(false) {
        let error = &value["error"];
        format!(
            "{}: {}",
            error["code"].as_str().unwrap_or_default(),
            error["message"].as_str().unwrap_or_default()
        )
    } else {
        format!("ok: {}", value.get("result").unwrap_or(&Value::Null))
    };
    if let Some(note) = value["logs"]
        .as_array()
        .and_then(|logs| logs.iter().rev().find_map(|l| l.as_str()))
        .filter(|l| l.starts_with("[execbox]"))
    {
        out.push_str(&format!(" — {note}"));
    }
    out
}

pub(super) async fn the_mistakes_table_is_current(h: Harness) -> Result<(), String> {
    let cases = cases()?;
    if cases.len() < 30 {
        return Err(format!(
            "only {} mistakes; the table wants 30 or more",
            cases.len()
        ));
    }
    // The tools run in their file's folder: a copy, so the store starts empty.
    let fixture = h.dir.join("mistakes");
    std::fs::create_dir_all(fixture.join("tools")).map_err(|e| e.to_string())?;
    for file in ["tools.yaml", "tools/store.py", "tools/math.py"] {
        std::fs::copy(Path::new(MISTAKES).join(file), fixture.join(file))
            .map_err(|e| format!("cannot copy {file}: {e}"))?;
    }
    let mut limited = h.upstream("alpha");
    limited["rateLimit"] = json!({"requests": 2, "window": "1m"});
    let config = h.config(json!({
        "alpha": h.upstream("alpha"),
        "limited": limited,
        "broken": h.upstream("crash"),
    }));
    let tools = fixture.join("tools.yaml");
    let mcp = h
        .start(&[
            "--config",
            config.to_str().unwrap(),
            "--tools",
            tools.to_str().unwrap(),
            "--timeout-ms",
            "2000",
            "--startup-timeout",
            "20",
        ])
        .await?;

    let mut table = String::from(
        "# What a model reads when it gets it wrong\n\n\
         Each row is a program with a mistake models make every day (or a `search_tools` query), \
         run through `execbox mcp` with the tools of `conformance/mistakes/tools.yaml`, the test \
         upstream `alpha`, the same upstream rate-limited to 2 calls a minute as `limited`, and an \
         upstream that fails to start as `broken`; time limit 2 s. The answers below are exactly \
         what the model gets back (times replaced by N). A change that makes an answer worse \
         shows here in review.\n\n\
         Generated by `EXECBOX_BLESS=1 cargo test -p execbox-cli --test mcp -- \
         the_mistakes_table_is_current`; the same test without `EXECBOX_BLESS` fails when this \
         file is not what the code answers. The programs are in `conformance/mistakes/programs`.\n\n\
         | # | mistake | what the model reads first |\n|---|---|---|\n",
    );
    let mut details = String::new();
    for case in &cases {
        let (tool, arguments) = if case.search {
            ("search_tools", json!({ "query": case.body }))
        } else {
            ("execute_code", json!({ "code": case.body }))
        };
        let text = steady(&answer(mcp.call(tool, arguments).await?).text, &h.dir);
        let number = case.name.split('-').next().unwrap_or_default();
        writeln!(
            table,
            "| [{number}](#{}) | {} | {} |",
            case.name,
            cell(&case.mistake, 120),
            cell(&gist(&text), 160)
        )
        .unwrap();
        let language = if case.search { "text" } else { "js" };
        write!(
            details,
            "\n### {}\n\n{}.\n\n```{language}\n{}\n```\n\n",
            case.name, case.mistake, case.body
        )
        .unwrap();
        write!(details, "```json\n{}\n```\n", shown(&text)).unwrap();
        if let Some(then) = &case.then {
            let after = steady(
                &answer(mcp.call("execute_code", json!({ "code": then })).await?).text,
                &h.dir,
            );
            write!(
                details,
                "\nThen `{then}` answers:\n\n```json\n{}\n```\n",
                shown(&after)
            )
            .unwrap();
        }
    }
    mcp.stop().await?;
    table.push_str("\n## The answers in full\n");
    table.push_str(&details);

    if std::env::var_os(BLESS_ENV).is_some() {
        std::fs::write(TABLE, &table).map_err(|e| format!("cannot write {TABLE}: {e}"))?;
        return Ok(());
    }
    let current = std::fs::read_to_string(TABLE).unwrap_or_default();
    if current != table {
        let first = current
            .lines()
            .zip(table.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(table.lines().count()));
        return Err(format!(
            "docs/mistakes.md is not what the code answers now (first difference at line {}):\n  \
             in the file: {}\n  answered:    {}\n\
             If the new answers are better, write the file with\n  \
             {BLESS_ENV}=1 cargo test -p execbox-cli --test mcp -- the_mistakes_table_is_current",
            first + 1,
            current.lines().nth(first).unwrap_or("(end of file)"),
            table.lines().nth(first).unwrap_or("(end of file)"),
        ));
    }
    Ok(())
}
