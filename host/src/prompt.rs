//! A prompt-ready description of the sandbox for a model: how a program runs, what is missing,
//! the error shape, the limits, then the tools' TypeScript declarations.
//!
//! `execbox types --prompt` prints [`model_prompt`]; keep it in step with the runner
//! (`runner/src/normalize.rs`, the guest surface in ARCHITECTURE.md) and with the messages of
//! [`ToolSet::dispatch`](crate::ToolSet::dispatch).

use std::fmt::Write as _;

use execbox_protocol::RuntimeOptions;

use crate::ToolSet;

/// The preamble for `options`, then `tools`' declarations (with each tool's error codes) in a
/// `ts` code fence.
///
/// ```
/// use execbox_host::{model_prompt, ToolSet};
/// let prompt = model_prompt(&ToolSet::empty(), &Default::default());
/// assert!(prompt.contains("top-level `await`"));
/// ```
pub fn model_prompt(tools: &ToolSet, options: &RuntimeOptions) -> String {
    describe(
        "Write a program to run in a sandbox; it can call the tools declared below.\n",
        tools,
        options,
        None,
    )
}

/// The description of a tool that runs the model's program (the SDKs' `sandbox.tool()`): the
/// prompt of [`model_prompt`], saying how the answer looks and where it is cut
/// (`max_answer_chars`, see [`model_answer`](crate::model_answer)).
pub fn code_tool_description(
    tools: &ToolSet,
    options: &RuntimeOptions,
    max_answer_chars: usize,
) -> String {
    describe(
        "Run a JavaScript program in a sandbox; it can call the tools declared below.\n",
        tools,
        options,
        Some(max_answer_chars),
    )
}

fn describe(
    opening: &str,
    tools: &ToolSet,
    options: &RuntimeOptions,
    max_answer_chars: Option<usize>,
) -> String {
    let mut out = String::from(opening);
    out.push_str(
        "\n\
         ## How the program runs\n\
         - Write plain JavaScript or TypeScript with erasable type annotations (no enums or namespaces of your own).\n\
         - The program is the body of an async function: use top-level `await`; `return` a value, or end with an expression statement, whose value is the result. The result must be JSON-serializable.\n\
         - A markdown code fence around the program is stripped.\n\
         - Each provider is a global namespace of async functions, one per tool: `const r = await provider.tool({ ... })`. Run independent calls at once with `Promise.all`.\n\
         - `console.log`, `console.info`, `console.warn` and `console.error` write logs.\n\
         \n\
         ## What is not there\n",
    );
    let namespaces: Vec<&str> = tools.manifests().iter().map(|m| m.name.as_str()).collect();
    out.push_str(&missing_globals(&namespaces));
    out.push_str(
        "\n\
         ## Errors\n\
         - A failed tool call rejects with an `Error` that has a `code` and a `message`. The `code` is one of:\n  \
           - `\"validation_error\"`: the input does not match the tool's parameter type (fix the input), or the tool returned an output that does not match its return type (the tool's fault);\n  \
           - `\"tool_error\"`: the tool failed;\n  \
           - `\"timeout\"`: the tool ran past its own time limit;\n  \
           - `\"serialization_error\"`: a value cannot cross the sandbox boundary (functions, cycles, nesting deeper than 1000 levels).\n\
         - The `message` starts with the tool (`provider.tool: ...`) and says what to fix, with the path in the input (`input.items[3].kind`) and what was expected, e.g. `weather.get_forecast: input.units must be one of \"metric\", \"imperial\"; got \"kelvin\"`.\n\
         - Catch errors with `try`/`catch` to handle them; an uncaught error fails the whole program with its `code` and `message`.\n\
         - The whole program fails with `\"timeout\"` past its time limit, `\"memory_limit\"` past its memory limit, and `\"runtime_error\"` for an uncaught exception or a syntax error.\n\
         \n\
         ## Limits\n",
    );
    let _ = writeln!(
        out,
        "- Time: {} for the whole program, waiting for tools included.",
        duration(options.timeout_ms)
    );
    let _ = writeln!(
        out,
        "- Memory: {} for the program's values.",
        bytes(options.memory_limit_bytes)
    );
    let _ = writeln!(
        out,
        "- Logs: the first {} lines and {} characters are kept.",
        options.max_log_lines, options.max_log_chars
    );
    if let Some(max) = max_answer_chars {
        let _ = write!(
            out,
            "\n## The answer\n\
             JSON: {{\"ok\": true, \"result\": ..., \"logs\": [...]}} or \
             {{\"ok\": false, \"error\": {{\"code\": ..., \"message\": ...}}, \"logs\": [...]}}, \
             cut at {max} characters: return only what you need. A failed program's message \
             names the line and points at it; fix the program and run it again.\n"
        );
    }
    out.push_str("\n## Tools\n");
    let declarations = tools.prompt_declarations();
    if declarations.is_empty() {
        out.push_str("There are no tools.\n");
    } else {
        let _ = write!(out, "```ts\n{declarations}\n```\n");
    }
    out
}

/// The "What is not there" lines: the globals a program might look for that do not exist,
/// leaving out any name that is one of `namespaces` (a tool provider named `fs` is there), and
/// saying which they are.
fn missing_globals(namespaces: &[&str]) -> String {
    let lines: [(&str, &[&str]); 3] = [
        ("No modules", &["`import`", "`import()`", "`require`"]),
        (
            "No timers",
            &["`setTimeout`", "`setInterval`", "`setImmediate`"],
        ),
        (
            "No network, file or process access",
            &["`fetch`", "`XMLHttpRequest`", "`process`", "`fs`"],
        ),
    ];
    let is_namespace = |name: &str| namespaces.contains(&name.trim_matches('`'));
    let mut out = String::new();
    for (what, names) in lines {
        let absent: Vec<&str> = names.iter().copied().filter(|n| !is_namespace(n)).collect();
        let _ = match absent.as_slice() {
            [] => writeln!(out, "- {what}."),
            [one] => writeln!(out, "- {what}: no {one}."),
            [init @ .., last] => writeln!(out, "- {what}: no {} or {last}.", init.join(", ")),
        };
    }
    let shadowed: Vec<String> = lines
        .iter()
        .flat_map(|(_, names)| names.iter())
        .filter(|n| is_namespace(n))
        .map(|n| n.to_string())
        .collect();
    for name in shadowed {
        let _ = writeln!(
            out,
            "- {name} below is a tool namespace declared here, not the Node.js or browser global of that name: use only the functions it declares."
        );
    }
    out.push_str(
        "- Only the ECMAScript built-ins, `console` and the tool namespaces below exist.\n",
    );
    out
}

/// `500 ms`, `5 s`, `2.5 s`.
fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{} s", ms as f64 / 1000.0)
    }
}

/// `64 MiB`, `1.5 KiB`, `100 bytes`.
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if n >= unit {
            return if n.is_multiple_of(unit) {
                format!("{} {name}", n / unit)
            } else {
                format!("{:.1} {name}", n as f64 / unit as f64)
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_written_for_people() {
        assert_eq!(duration(500), "500 ms");
        assert_eq!(duration(5000), "5 s");
        assert_eq!(duration(2500), "2.5 s");
        assert_eq!(bytes(64 * 1024 * 1024), "64 MiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(100), "100 bytes");
    }

    #[test]
    fn the_missing_globals_leave_out_declared_namespaces() {
        let plain = missing_globals(&[]);
        assert!(
            plain.contains("- No network, file or process access: no `fetch`, `XMLHttpRequest`, `process` or `fs`.\n"),
            "{plain}"
        );
        let with_fs = missing_globals(&["fs", "text"]);
        assert!(
            with_fs.contains("- No network, file or process access: no `fetch`, `XMLHttpRequest` or `process`.\n"),
            "{with_fs}"
        );
        assert!(!with_fs.contains("or `fs`"), "{with_fs}");
        assert!(
            with_fs.contains("- `fs` below is a tool namespace declared here"),
            "{with_fs}"
        );
    }

    #[test]
    fn without_tools_the_prompt_says_so() {
        let prompt = model_prompt(&ToolSet::empty(), &RuntimeOptions::default());
        assert!(
            prompt.contains("- Time: 5 s for the whole program"),
            "{prompt}"
        );
        assert!(prompt.contains("- Memory: 64 MiB"), "{prompt}");
        assert!(
            prompt.ends_with("## Tools\nThere are no tools.\n"),
            "{prompt}"
        );
    }
}
