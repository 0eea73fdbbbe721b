//! The strict tools file from the outside: `execbox check` and `execbox run` refuse a bad file
//! with one clear error and exit 2, before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn execbox(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(b"'ran'");
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A temporary directory holding one tools file, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("execbox-toolsfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A tools file with one tool `t.x` whose lines below `command:` are `extra`.
    fn tools(&self, command: &str, extra: &str) -> String {
        let path = self.write(
            "tools.yaml",
            &format!(
                "version: 1\nproviders:\n  t:\n    tools:\n      x:\n        command: {command}\n{extra}"
            ),
        );
        path.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `check --tools FILE` and `run - --tools FILE`; both must exit 2 with one error line
/// on stderr containing every one of `wanted`, and print nothing on stdout.
fn refused_by_check_and_run(file: &str, wanted: &[&str]) {
    for args in [
        vec!["check", "--tools", file],
        vec!["run", "-", "--tools", file],
    ] {
        let out = execbox(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        assert!(stderr.starts_with("execbox: "), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        for want in wanted {
            assert!(stderr.contains(want), "{args:?}: {stderr}\n want: {want}");
        }
    }
}

#[test]
fn a_valid_file_passes_check_with_a_summary_and_runs() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tools.yaml");
    let examples = examples.display().to_string();
    let out = execbox(&["check", "--tools", &examples]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{examples}: ok: 2 providers (text, data), 3 tools\n")
    );
    let dir = Dir::new("valid");
    let file = dir.tools(
        "/bin/sh",
        "        args: [-c, 'echo 1']\n        permissions: [\"t:run\"]\n        \
         rate_limit: { requests: 3, window: 1m }\n        requires_approval: false\n",
    );
    let out = execbox(&["check", "--tools", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with(": ok: 1 provider (t), 1 tool\n"));
    let out = execbox(&["run", "-", "--tools", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "\"ran\"");
}

#[test]
fn an_unknown_field_is_refused_with_its_line_and_the_field_meant() {
    let dir = Dir::new("unknown");
    let file = dir.tools("/bin/sh", "        inputSchema: { type: object }\n");
    refused_by_check_and_run(
        &file,
        &[
            &format!("{file}:7:9: "),
            "providers.t.tools.x: unknown field `inputSchema`; did you mean `input_schema`?",
        ],
    );
    let file = dir.tools("/bin/sh", "        timeout: 10\n");
    refused_by_check_and_run(
        &file,
        &[&format!("{file}:7:9: "), "unknown field `timeout`"],
    );
}

#[test]
fn a_missing_command_is_refused_naming_the_provider_tool_and_path() {
    let dir = Dir::new("missing");
    let file = dir.tools("./no-such-tool.py", "");
    let resolved = dir.0.join("no-such-tool.py").display().to_string();
    refused_by_check_and_run(
        &file,
        &[
            &format!("{file}:6:18: providers.t.tools.x: "),
            &format!("command {resolved} does not exist"),
        ],
    );
    let file = dir.tools("no-such-program-anywhere", "");
    refused_by_check_and_run(
        &file,
        &["providers.t.tools.x: command `no-such-program-anywhere` is not found on PATH"],
    );
}

#[test]
fn a_command_that_is_not_executable_is_refused() {
    let dir = Dir::new("noexec");
    let script = dir.write("tool.py", "print(1)\n");
    let file = dir.tools("./tool.py", "");
    refused_by_check_and_run(
        &file,
        &[
            "providers.t.tools.x: ",
            &format!("command {} is not executable", script.display()),
        ],
    );
}

#[test]
fn a_duplicate_key_is_refused_with_its_line() {
    let dir = Dir::new("duplicate");
    let path = dir.write(
        "tools.yaml",
        "version: 1\nproviders:\n  t:\n    tools:\n      x: { command: /bin/sh }\n      x: { command: /bin/true }\n",
    );
    let file = path.display().to_string();
    refused_by_check_and_run(&file, &[&format!("{file}:6:7: "), "duplicate key `x`"]);
    let path = dir.write(
        "tools.yaml",
        "version: 1\nproviders:\n  t:\n    tools:\n      x:\n        command: /bin/sh\n        command: /bin/true\n",
    );
    let file = path.display().to_string();
    refused_by_check_and_run(&file, &[&format!("{file}:7:"), "duplicate key `command`"]);
}

#[test]
fn a_billion_laughs_file_is_refused_quickly() {
    let dir = Dir::new("bomb");
    // The anchors sit in an input schema, which takes any YAML value.
    let mut yaml = String::from(
        "version: 1\nproviders:\n  t:\n    tools:\n      x:\n        command: /bin/sh\n        \
         input_schema:\n          l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let refs = vec![format!("*l{}", i - 1); 10].join(", ");
        yaml.push_str(&format!("          l{i}: &l{i} [{refs}]\n"));
    }
    let file = dir.write("tools.yaml", &yaml).display().to_string();
    let started = std::time::Instant::now();
    refused_by_check_and_run(&file, &[&format!("{file}:"), "alias"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_command_tool_runs_in_the_tools_file_folder_whatever_the_callers_folder() {
    let dir = Dir::new("cwd");
    std::fs::create_dir_all(dir.0.join("tools")).unwrap();
    // The script is found by a relative argument, and reads a file relative to its folder.
    dir.write("data.txt", "from the tools folder\n");
    dir.write(
        "tools/plain.sh",
        "read line < ./data.txt\nprintf '{\"line\":\"%s\",\"pwd\":\"%s\"}' \"$line\" \"$PWD\"\n",
    );
    let file = dir.tools("sh", "        args: [./tools/plain.sh]\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(["run", "-", "--tools", &file])
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"return await t.x({})").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["line"], "from the tools folder");
    let pwd = std::fs::canonicalize(value["pwd"].as_str().unwrap()).unwrap();
    assert_eq!(pwd, std::fs::canonicalize(&dir.0).unwrap());
}
