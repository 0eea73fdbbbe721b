//! Messages that tell a model what to write instead, for the mistakes code written for Node
//! makes in the sandbox: modules (`import`, `require`, `import()`) and globals that do not exist;
//! and the original-name aliases of tools.
//!
//! Only errors the engine raised are reworded (a guest's own `throw` keeps its message): the
//! callers check that the error is where the engine puts it.

use execbox_protocol::ProviderManifest;

/// The namespaces of an execution and their tools' safe names.
pub(crate) type Namespaces = [(String, Vec<String>)];

/// The alias of each tool of `provider` (in order): its original name, when it differs from
/// its safe name and clashes with no safe name of the provider nor an earlier alias.
pub(crate) fn aliases(provider: &ProviderManifest) -> Vec<Option<String>> {
    let mut taken: Vec<&str> = provider
        .tools
        .iter()
        .map(|t| t.safe_name.as_str())
        .collect();
    let mut aliases = Vec::with_capacity(provider.tools.len());
    for tool in &provider.tools {
        let alias = tool
            .original_name
            .as_deref()
            .filter(|o| !o.is_empty() && !taken.contains(o));
        if let Some(alias) = alias {
            taken.push(alias);
        }
        aliases.push(alias.map(str::to_owned));
    }
    aliases
}

/// The message for a module construct (`what`, e.g. "`import`"): there are none, and the tools
/// are globals, e.g. "there are no modules here: `import` is not available. Tools are globals:
/// math, store — call them as `await math.add({...})`".
pub(crate) fn no_modules(what: &str, namespaces: &Namespaces) -> String {
    let head = format!("there are no modules here: {what} is not available");
    if namespaces.is_empty() {
        return format!("{head}, and this execution has no tools: use the JavaScript built-ins");
    }
    let names: Vec<&str> = namespaces.iter().map(|(n, _)| n.as_str()).collect();
    let example = namespaces
        .iter()
        .find_map(|(n, tools)| tools.first().map(|t| format!("{n}.{t}")))
        .unwrap_or_else(|| format!("{}.<tool>", names[0]));
    format!(
        "{head}. Tools are globals: {} — call them as `await {example}({{...}})`",
        names.join(", ")
    )
}

/// The first line of `body` that is a module statement (`import … from`, `import "x"`,
/// `export …`): its line, the column of the keyword (both 1-based), and the keyword.
pub(crate) fn module_statement(body: &str) -> Option<(u32, u32, &'static str)> {
    body.lines().enumerate().find_map(|(i, text)| {
        let rest = text.trim_start();
        let column = text.chars().count() - rest.chars().count() + 1;
        let keyword = ["import", "export"]
            .into_iter()
            .find(|k| rest.starts_with(k))?;
        let after = rest[keyword.len()..].chars().next()?;
        let statement = match keyword {
            // Not `import(…)` nor `import.meta`: those are expressions.
            "import" => after.is_whitespace() || matches!(after, '{' | '*' | '"' | '\''),
            _ => after.is_whitespace() || matches!(after, '{' | '*'),
        };
        statement.then(|| {
            (
                u32::try_from(i + 1).unwrap_or(u32::MAX),
                u32::try_from(column).unwrap_or(u32::MAX),
                keyword,
            )
        })
    })
}

/// The message for a module statement `keyword` (`import` or `export`).
pub(crate) fn module_statement_message(keyword: &str, namespaces: &Namespaces) -> String {
    if keyword == "export" {
        return "there are no modules here: `export` is not available; the program's result \
                is the value it returns (`return value`) or its last expression"
            .into();
    }
    no_modules("`import`", namespaces)
}

/// A better message for the engine's `ReferenceError: NAME is not defined`, thrown at
/// `source_at` (the program's text from the error's column on): modules for `require`, and the
/// namespaces for any other name when the execution has some. `None` leaves it as it is.
pub(crate) fn not_defined(
    message: &str,
    source_at: &str,
    namespaces: &Namespaces,
) -> Option<String> {
    let name = message.strip_suffix(" is not defined")?;
    // The engine points at the name itself; a guest's `throw new ReferenceError(…)` does not.
    let named_here = source_at.strip_prefix(name).is_some_and(|rest| {
        !rest
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
    });
    if name.is_empty() || !named_here {
        return None;
    }
    if matches!(name, "require" | "module" | "exports") {
        return Some(no_modules(&format!("`{name}`"), namespaces));
    }
    if namespaces.is_empty() || namespaces.iter().any(|(n, _)| n == name) {
        return None;
    }
    let names: Vec<&str> = namespaces.iter().map(|(n, _)| n.as_str()).collect();
    Some(format!(
        "{message}; the namespaces are: {}",
        names.join(", ")
    ))
}

/// A better message for the engine's rejection of a dynamic `import("x")` (QuickJS says
/// `could not load module 'x'`, with no frame of the program).
pub(crate) fn dynamic_import(message: &str, namespaces: &Namespaces) -> Option<String> {
    message
        .starts_with("could not load module '")
        .then(|| no_modules("`import()`", namespaces))
}

#[cfg(test)]
mod tests {
    use super::*;
    use execbox_protocol::ToolManifest;

    fn namespaces() -> Vec<(String, Vec<String>)> {
        vec![
            ("math".into(), vec!["add".into()]),
            ("store".into(), vec!["get".into()]),
        ]
    }

    #[test]
    fn modules_say_the_tools_are_globals() {
        assert_eq!(
            no_modules("`import`", &namespaces()),
            "there are no modules here: `import` is not available. Tools are globals: math, \
             store — call them as `await math.add({...})`"
        );
        assert_eq!(
            no_modules("`require`", &[]),
            "there are no modules here: `require` is not available, and this execution has no \
             tools: use the JavaScript built-ins"
        );
    }

    #[test]
    fn module_statements_are_found_but_not_import_expressions() {
        assert_eq!(
            module_statement("const a = 1;\n  import { x } from \"fs\";"),
            Some((2, 3, "import"))
        );
        assert_eq!(
            module_statement("import fs from 'fs'"),
            Some((1, 1, "import"))
        );
        assert_eq!(module_statement("export default 1"), Some((1, 1, "export")));
        assert_eq!(module_statement("await import(\"fs\")\nimport.meta"), None);
        assert_eq!(module_statement("const imported = 1; exported"), None);
    }

    #[test]
    fn only_the_engines_reference_errors_are_reworded() {
        let ns = namespaces();
        assert_eq!(
            not_defined("stats is not defined", "stats.mean;", &ns).unwrap(),
            "stats is not defined; the namespaces are: math, store"
        );
        assert!(
            not_defined("require is not defined", "require(\"fs\")", &ns)
                .unwrap()
                .starts_with("there are no modules here: `require` is not available")
        );
        // A guest's own throw is located at `new`, not at the name.
        assert_eq!(
            not_defined("stats is not defined", "ReferenceError(\"stats\")", &ns),
            None
        );
        assert_eq!(not_defined("stats is not defined", "statsx", &ns), None);
        // Without namespaces there is nothing to add.
        assert_eq!(not_defined("stats is not defined", "stats", &[]), None);
    }

    #[test]
    fn an_alias_is_an_original_name_that_clashes_with_nothing() {
        let mut provider = ProviderManifest {
            name: "math".into(),
            tools: vec![
                ToolManifest::named("get_sum"),
                ToolManifest::named("add"),
                ToolManifest::named("plus"),
                ToolManifest::named("minus"),
            ],
            types: None,
            unavailable: None,
        };
        provider.tools[0].original_name = Some("get-sum".into());
        // `plus` was `add` before sanitising: it clashes with the tool `add`.
        provider.tools[2].original_name = Some("add".into());
        provider.tools[3].original_name = Some("get-sum".into());
        assert_eq!(
            aliases(&provider),
            [Some("get-sum".into()), None, None, None]
        );
    }
}
