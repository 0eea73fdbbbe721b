//! Everything the MCP client can learn about the tools: the resolved [`ToolSet`], the compact
//! index in `execute_code`'s description, and `search_tools`.
//!
//! A catalog is immutable; a new one is built whenever an upstream's tools change.

use std::fmt::Write as _;
use std::sync::Arc;

use execbox_host::declarations::{provider_declaration, ToolDeclaration};
use execbox_host::{CallGuard, Provider, Tool, ToolSet, ToolSetError};

use super::content::one_line;

/// The longest summary of a tool in the index, in characters.
const SUMMARY_CHARS: usize = 100;

/// Where a namespace comes from, and whether it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceStatus {
    /// The guest namespace.
    pub namespace: String,
    /// `MCP server "github"` or `tools file`.
    pub source: String,
    /// `None` when it works; why not otherwise (its tools, if any, fail with that reason).
    pub unavailable: Option<String>,
    /// It is still starting (and `unavailable` says so).
    pub starting: bool,
}

/// One tool, as listed and searched.
#[derive(Debug, Clone)]
struct Entry {
    namespace: usize,
    safe_name: String,
    original_name: String,
    tool: Tool,
}

/// The tools at one moment.
#[derive(Clone)]
pub struct Catalog {
    tools: ToolSet,
    namespaces: Vec<(NamespaceStatus, Option<String>)>,
    entries: Vec<Entry>,
}

impl Catalog {
    /// Resolves `providers` (each with its status) and adds `unavailable` namespaces, which
    /// have no tools.
    pub fn build(
        providers: Vec<(Provider, NamespaceStatus)>,
        unavailable: Vec<NamespaceStatus>,
    ) -> Result<Catalog, ToolSetError> {
        let tools = ToolSet::new(providers.iter().map(|(p, _)| p.clone()).collect())?;
        let mut namespaces = Vec::new();
        let mut entries = Vec::new();
        for (provider, status) in providers {
            let index = namespaces.len();
            let names = tools.tool_names(provider.name()).unwrap_or_default();
            for (tool, (safe_name, original_name)) in provider.tools().iter().zip(names) {
                entries.push(Entry {
                    namespace: index,
                    safe_name,
                    original_name,
                    tool: tool.clone(),
                });
            }
            namespaces.push((status, provider.get_description().map(str::to_owned)));
        }
        for status in unavailable {
            namespaces.push((status, None));
        }
        Ok(Catalog {
            tools,
            namespaces,
            entries,
        })
    }

    /// What executions under `guard` see: the tools it refuses are left out of the tool set,
    /// the index and the search, as if they did not exist, and so is a namespace left without
    /// tools (one that is unavailable stays: its tools are not known).
    /// The same catalog, not a copy, when nothing is hidden.
    pub fn visible_to(self: &Arc<Self>, guard: &dyn CallGuard) -> Arc<Catalog> {
        let visible: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| guard.may_call(e.tool.requirements()))
            .collect();
        if visible.len() == self.entries.len() {
            return self.clone();
        }
        let mut renumbered = vec![None; self.namespaces.len()];
        let mut namespaces = Vec::new();
        for (i, namespace) in self.namespaces.iter().enumerate() {
            let had_tools = self.entries.iter().any(|e| e.namespace == i);
            let keeps_tools = visible.iter().any(|e| e.namespace == i);
            if keeps_tools || !had_tools {
                renumbered[i] = Some(namespaces.len());
                namespaces.push(namespace.clone());
            }
        }
        let entries = visible
            .into_iter()
            .filter_map(|e| {
                Some(Entry {
                    namespace: renumbered[e.namespace]?,
                    ..e.clone()
                })
            })
            .collect();
        Arc::new(Catalog {
            tools: self.tools.visible_to(guard),
            namespaces,
            entries,
        })
    }

    /// The tool set the sandbox runs against.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// Every namespace with its status, in order.
    pub fn statuses(&self) -> impl Iterator<Item = &NamespaceStatus> {
        self.namespaces.iter().map(|(s, _)| s)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The index: one line per namespace, then one line per tool (`name: summary`).
    pub fn index(&self) -> String {
        let mut out = String::new();
        for (i, (status, _)) in self.namespaces.iter().enumerate() {
            let count = self.entries.iter().filter(|e| e.namespace == i).count();
            let _ = write!(out, "{} ({}", status.namespace, status.source);
            match &status.unavailable {
                Some(_) if status.starting => out.push_str("; still starting"),
                Some(why) => {
                    let _ = write!(out, "; UNAVAILABLE: {}", one_line(why, 200));
                }
                None => {
                    let _ = write!(out, ", {count} tool{}", if count == 1 { "" } else { "s" });
                }
            }
            out.push_str(")\n");
            if status.unavailable.is_some() {
                continue;
            }
            for entry in self.entries.iter().filter(|e| e.namespace == i) {
                let _ = write!(out, "  {}", entry.safe_name);
                if let Some(summary) = summary(&entry.tool) {
                    let _ = write!(out, ": {summary}");
                }
                out.push('\n');
            }
        }
        if out.is_empty() {
            out.push_str("(no tools)\n");
        }
        out
    }

    /// The tools matching `query`, best first, at most `limit`: each word of the query is
    /// looked for in the namespace, the tool's names and its description (a name counts
    /// most). An empty query (or `*`) lists tools in order. `namespace.tool` finds that tool.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let query = query.trim().to_lowercase();
        if query.is_empty() || query == "*" {
            return (0..self.entries.len()).take(limit).collect();
        }
        let query_words: Vec<String> = words(&query);
        let mut scored: Vec<(u32, usize)> = Vec::new();
        for (i, entry) in self.entries.iter().enumerate() {
            let namespace = self.namespaces[entry.namespace].0.namespace.to_lowercase();
            let full = format!("{namespace}.{}", entry.safe_name.to_lowercase());
            let names = format!(
                "{} {}",
                entry.safe_name.to_lowercase(),
                entry.original_name.to_lowercase()
            );
            let name_words = words(&names);
            let description = entry
                .tool
                .get_description()
                .unwrap_or_default()
                .to_lowercase();
            let mut score = 0;
            if query == full || query == entry.safe_name.to_lowercase() {
                score += 100;
            }
            for word in &query_words {
                // Parts of words count from three letters on ("it" is in too many).
                let part = word.chars().count() >= 3;
                if name_words.iter().any(|w| w == word) {
                    score += 6;
                } else if part && names.contains(word.as_str()) {
                    score += 4;
                }
                if namespace == *word {
                    score += 3;
                } else if part && namespace.contains(word.as_str()) {
                    score += 1;
                }
                if words(&description).iter().any(|w| w == word) {
                    score += 2;
                } else if part && description.contains(word.as_str()) {
                    score += 1;
                }
            }
            if score > 0 {
                scored.push((score, i));
            }
        }
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(limit).map(|(_, i)| i).collect()
    }

    /// `namespace.tool` of a search hit.
    pub fn label(&self, hit: usize) -> String {
        let entry = &self.entries[hit];
        format!(
            "{}.{}",
            self.namespaces[entry.namespace].0.namespace, entry.safe_name
        )
    }

    /// The original (upstream) name and description of a search hit.
    pub fn describe(&self, hit: usize) -> (&str, Option<&str>) {
        let entry = &self.entries[hit];
        (&entry.original_name, entry.tool.get_description())
    }

    /// The TypeScript declarations of `hits`, grouped by namespace in catalog order.
    pub fn declarations(&self, hits: &[usize]) -> String {
        let mut blocks = Vec::new();
        for (i, (status, description)) in self.namespaces.iter().enumerate() {
            let decls: Vec<ToolDeclaration<'_>> = hits
                .iter()
                .map(|&h| &self.entries[h])
                .filter(|e| e.namespace == i)
                .map(|e| ToolDeclaration {
                    safe_name: &e.safe_name,
                    description: e.tool.get_description(),
                    input_schema: e.tool.get_input_schema(),
                    output_schema: e.tool.get_output_schema(),
                    errors: &[],
                })
                .collect();
            if !decls.is_empty() {
                blocks.push(provider_declaration(
                    &status.namespace,
                    description.as_deref(),
                    &decls,
                ));
            }
        }
        blocks.join("\n\n")
    }
}

/// The first sentence or line of a tool's description (or its title), cut.
fn summary(tool: &Tool) -> Option<String> {
    let description = tool.get_description()?.trim();
    let first_line = description.lines().next().unwrap_or_default();
    let sentence = match first_line.find(". ") {
        Some(end) => &first_line[..=end],
        None => first_line,
    };
    let sentence = sentence.trim();
    (!sentence.is_empty()).then(|| one_line(sentence, SUMMARY_CHARS))
}

/// Lowercase words: runs of letters and digits; `snake_case` and `kebab-case` split.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Tool {
        Tool::new(name, |_, _| async { Ok(json!(null)) })
            .description(description)
            .input_schema(json!({"type": "object", "properties": {"q": {"type": "string"}}}))
    }

    fn status(namespace: &str) -> NamespaceStatus {
        NamespaceStatus {
            namespace: namespace.into(),
            source: format!("MCP server {namespace:?}"),
            unavailable: None,
            starting: false,
        }
    }

    fn catalog() -> Catalog {
        Catalog::build(
            vec![
                (
                    Provider::new("github")
                        .tool(tool("create-issue", "Create an issue. Needs a repo."))
                        .tool(tool("search_repos", "Search repositories by keyword")),
                    status("github"),
                ),
                (
                    Provider::new("docs").tool(tool("search", "Full-text search of the docs")),
                    status("docs"),
                ),
            ],
            vec![NamespaceStatus {
                namespace: "jira".into(),
                source: "MCP server \"jira\"".into(),
                unavailable: Some("failed to start: command \"jira-mcp\" not found".into()),
                starting: false,
            }],
        )
        .unwrap()
    }

    #[test]
    fn the_index_has_a_line_per_namespace_and_per_tool() {
        assert_eq!(
            catalog().index(),
            "github (MCP server \"github\", 2 tools)\n\
             \x20 create_issue: Create an issue.\n\
             \x20 search_repos: Search repositories by keyword\n\
             docs (MCP server \"docs\", 1 tool)\n\
             \x20 search: Full-text search of the docs\n\
             jira (MCP server \"jira\"; UNAVAILABLE: failed to start: command \"jira-mcp\" not found)\n"
        );
    }

    #[test]
    fn search_ranks_names_over_descriptions() {
        let c = catalog();
        let labels =
            |q: &str| -> Vec<String> { c.search(q, 10).into_iter().map(|h| c.label(h)).collect() };
        // A tool named exactly as the query comes first.
        assert_eq!(labels("search"), ["docs.search", "github.search_repos"]);
        assert_eq!(
            labels("repos search"),
            ["github.search_repos", "docs.search"]
        );
        assert_eq!(labels("issue"), ["github.create_issue"]);
        assert_eq!(labels("docs.search")[0], "docs.search");
        assert_eq!(labels("keyword"), ["github.search_repos"]);
        assert!(labels("nothing-like-it").is_empty());
        assert_eq!(labels("").len(), 3);
        assert_eq!(c.search("*", 1).len(), 1);
    }

    #[test]
    fn declarations_cover_only_the_hits() {
        let c = catalog();
        let hits = c.search("issue", 10);
        let text = c.declarations(&hits);
        assert!(text.contains("declare namespace github {"), "{text}");
        assert!(text.contains("function create_issue(input: {"), "{text}");
        assert!(!text.contains("search_repos"), "{text}");
    }
}
