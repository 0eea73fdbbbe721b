//! `execbox run` and the tool calls a program did not await: by default they finish before
//! the result is printed, `--unawaited cancel` stops them, and a log line names them either way.

use super::support::cli::{execbox, text};
use super::support::scripts::inline_tool;
use super::support::temp::TempDir;

const TWO_PUTS: &str = "t.put({ key: 'a' }); t.put({ key: 'b' }); return 'queued'";

/// Runs `TWO_PUTS` with `flags` against a `t.put` that writes a file into its folder after a
/// moment; returns stdout, stderr and how many files were written.
fn two_puts(name: &str, flags: &[&str]) -> (String, String, usize) {
    let dir = TempDir::new(name);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let script = "sleep 0.3; cat > \"$1/out/put.$$\"; echo true";
    let tools = inline_tool(dir.path(), "put", script, &dir.path().display().to_string());
    let mut args = vec!["run", "-", "--tools", tools.to_str().unwrap()];
    args.extend_from_slice(flags);
    let out = execbox(&args, TWO_PUTS);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_dir(dir.join("out")).unwrap().count();
    (text(&out.stdout), text(&out.stderr), written)
}

#[test]
fn unawaited_tool_calls_finish_before_run_prints_and_are_named() {
    let (stdout, stderr, written) = two_puts("unawaited-finish", &[]);
    assert_eq!(stdout.trim(), "\"queued\"");
    assert_eq!(written, 2, "both writes landed; stderr: {stderr}");
    assert!(
        stderr.contains("[execbox] 2 tool calls were not awaited: t.put ×2; they finished after the program returned — await them"),
        "{stderr}"
    );
}

#[test]
fn unawaited_cancel_stops_unawaited_tool_calls_and_names_them() {
    let (stdout, stderr, written) = two_puts("unawaited-cancel", &["--unawaited", "cancel"]);
    assert_eq!(stdout.trim(), "\"queued\"");
    assert_eq!(written, 0, "{stderr}");
    assert!(
        stderr.contains("[execbox] 2 tool calls were not awaited: t.put ×2; they were cancelled when the program returned — await them"),
        "{stderr}"
    );
}
