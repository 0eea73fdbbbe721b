//! Tools files whose tools are shell scripts, in one provider `t`.

use std::path::{Path, PathBuf};

/// Writes one script per tool into `dir` and `dir/tools.yaml` running each with `/bin/sh` (so
/// a script being written by another test's thread can never make `exec` fail with ETXTBSY).
/// `tools`: (name, extra YAML lines of the tool, script). Returns the tools file.
pub fn script_tools(dir: &Path, tools: &[(&str, &str, &str)]) -> PathBuf {
    let mut yaml = String::from("version: 1\nproviders:\n  t:\n    tools:\n");
    for (name, extra, script) in tools {
        let path = dir.join(format!("{name}.sh"));
        std::fs::write(&path, script).expect("write a tool script");
        yaml.push_str(&format!(
            "      {name}:\n        command: /bin/sh\n        args: [{:?}]\n{extra}",
            path.display().to_string()
        ));
    }
    let file = dir.join("tools.yaml");
    std::fs::write(&file, yaml).expect("write the tools file");
    file
}

/// Writes `dir/tools.yaml` with one tool, `t.NAME`, running `sh -c SCRIPT NAME ARG` (the
/// script sees `ARG` as `$1`). Returns the tools file.
pub fn inline_tool(dir: &Path, name: &str, script: &str, arg: &str) -> PathBuf {
    let yaml = serde_json::json!({
        "version": 1,
        "providers": {"t": {"tools": {name: {
            "command": "/bin/sh",
            "args": ["-c", script, name, arg],
        }}}}
    });
    let file = dir.join("tools.yaml");
    // JSON is YAML.
    std::fs::write(&file, yaml.to_string()).expect("write the tools file");
    file
}
