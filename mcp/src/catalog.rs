//! Everything the MCP client can learn about the tools: the resolved [`ToolSet`], the compact
//! index in `execute_code`'s description, and `search_tools`.
//!
//! A catalog is immutable; a new one is built whenever an upstream's tools change.

use std::fmt::Write as _;
use std::sync::Arc;

use execbox_host::declarations::{
    name_remark, provider_declaration, requirement_remarks, ToolDeclaration,
};
use execbox_host::{CallGuard, Provider, Tool, ToolSet, ToolSetError};
use execbox_policy::ObservedResults;
use serde_json::{json, Value};

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
    /// It is an upstream MCP server (its results follow the MCP value mapping).
    pub upstream: bool,
}

/// One tool, as listed and searched.
#[derive(Debug, Clone)]
struct Entry {
    namespace: usize,
    safe_name: String,
    original_name: String,
    tool: Tool,
    /// What a search compares, read once.
    words: Arc<Words>,
}

/// The words of a tool a search compares with a query's, lower-case, stop words left out,
/// each once: its names' (as stems: `issues/create-comment` has `issue`, `creat`, `comment`),
/// its summary's (the first sentence of its description) and the rest of its description's.
#[derive(Debug, Default)]
struct Words {
    name: Vec<String>,
    summary: Vec<String>,
    rest: Vec<String>,
}

impl Words {
    fn of(safe_name: &str, original_name: &str, description: Option<&str>) -> Words {
        let names = format!("{safe_name} {original_name}").to_lowercase();
        let name = distinct(words(&names).iter().map(|w| stem(w)));
        let description = description.unwrap_or_default().to_lowercase();
        let first = summary_sentence(&description);
        let summary = distinct(words(first).into_iter());
        let rest = distinct(words(&description[first.len()..]).into_iter());
        Words {
            name,
            summary,
            rest,
        }
    }

    fn field(&self, field: usize) -> &[String] {
        match field {
            0 => &self.name,
            1 => &self.summary,
            _ => &self.rest,
        }
    }
}

/// `words` without stop words and repeats, in order.
fn distinct(words: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in words {
        if !STOP_WORDS.contains(&word.as_str()) && !out.contains(&word) {
            out.push(word);
        }
    }
    out
}

/// The tools at one moment.
#[derive(Clone)]
pub struct Catalog {
    tools: ToolSet,
    namespaces: Vec<(NamespaceStatus, Option<String>)>,
    entries: Vec<Entry>,
    /// The last result shape of each tool, read when declarations are written.
    observed: Arc<ObservedResults>,
}

impl Catalog {
    /// Resolves `providers` (each with its status) and adds `unavailable` namespaces, which
    /// have no tools.
    ///
    /// Every namespace that is unavailable (failed to start, died) goes to the runner so
    /// marked, with why and what to do: the namespace exists, and its calls fail saying so.
    pub fn build(
        providers: Vec<(Provider, NamespaceStatus)>,
        unavailable: Vec<NamespaceStatus>,
        observed: Arc<ObservedResults>,
    ) -> Result<Catalog, ToolSetError> {
        let marked = providers
            .iter()
            .map(|(_, s)| s)
            .chain(&unavailable)
            .filter(|s| !s.starting)
            .filter_map(|s| {
                let why = s.unavailable.as_ref()?;
                Some((
                    s.namespace.clone(),
                    format!(
                        "{}: {}. Do not retry: tell the user, who can fix it and restart execbox mcp",
                        s.source,
                        one_line(why, 500)
                    ),
                ))
            })
            .collect();
        let tools =
            ToolSet::with_unavailable(providers.iter().map(|(p, _)| p.clone()).collect(), marked)?;
        let mut namespaces = Vec::new();
        let mut entries = Vec::new();
        for (provider, status) in providers {
            let index = namespaces.len();
            let names = tools.tool_names(provider.name()).unwrap_or_default();
            for (tool, (safe_name, original_name)) in provider.tools().iter().zip(names) {
                let words = Words::of(&safe_name, &original_name, tool.get_description());
                entries.push(Entry {
                    namespace: index,
                    safe_name,
                    original_name,
                    tool: tool.clone(),
                    words: Arc::new(words),
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
            observed,
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
            observed: self.observed.clone(),
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

    /// `search_tools`' answer for `query`, at most `limit` declarations; see [`Search`].
    pub fn search(&self, query: &str, limit: usize) -> Search {
        let trimmed = query.trim();
        let lower = trimmed.to_lowercase();
        if lower.is_empty() || lower == "*" {
            let all: Vec<usize> = (0..self.entries.len()).collect();
            return self.found(query, all, limit);
        }
        // `ns.tool` (by either of its names): that tool only. A tool's name alone ranks
        // that tool first.
        let exact: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.names_of(i)[..3].contains(&lower))
            .collect();
        if !exact.is_empty() {
            return self.found(query, exact, limit);
        }
        // A namespace alone (or `ns.*`): its tools, by name.
        let bare = lower.strip_suffix(".*").unwrap_or(&lower);
        if let Some(ns) = self.namespace_named(bare) {
            return self.namespace_listing(query, ns);
        }
        // Words: each scored against the tool's names first, then its description. A word
        // that is a namespace's name keeps the search to that namespace.
        let mut within = None;
        let mut terms = Vec::new();
        for word in words(&lower) {
            match self.namespace_named(&word) {
                Some(ns) if within.is_none() => within = Some(ns),
                _ => terms.push(word),
            }
        }
        if terms.is_empty() {
            if let Some(ns) = within {
                return self.namespace_listing(query, ns);
            }
        }
        let hits = self.rank(&lower, &terms, within);
        if hits.is_empty() {
            return self.nothing_found(query);
        }
        self.found(query, hits, limit)
    }

    /// The tools `terms` find (within one namespace if given), best first: BM25F over three
    /// fields of each tool ([`Words`]) weighted 3 (names), 3 (summary) and 1 (the rest of its
    /// description), so that a term found in few tools counts more than one found in many,
    /// and a short name or summary that says all of it more than a long one that says it
    /// among other things. Stop words count only when the query has nothing else. A query
    /// that is a tool's whole name (`create-issue`) ranks that tool first.
    fn rank(&self, lower: &str, terms: &[String], within: Option<usize>) -> Vec<usize> {
        /// Each field's weight, and how much its length discounts a match (BM25's `b`).
        const FIELDS: [(f64, f64); 3] = [(3.0, 0.75), (3.0, 0.75), (1.0, 0.5)];
        /// Lengths are compared with an average of at least this many words, so that among
        /// one-word names a name of two is not taken for a long one.
        const MIN_AVERAGE: f64 = 3.0;
        /// BM25's saturation, on the scale of the weights: a term found in every field counts
        /// more than in one, but not three times more.
        const K1: f64 = 4.0;
        let meaningful: Vec<&String> = terms
            .iter()
            .filter(|t| !STOP_WORDS.contains(&t.as_str()))
            .collect();
        let terms: Vec<&String> = if meaningful.is_empty() {
            terms.iter().collect()
        } else {
            meaningful
        };
        let stems: Vec<String> = terms.iter().map(|t| stem(t)).collect();
        let candidates: Vec<usize> = (0..self.entries.len())
            .filter(|&i| within.is_none_or(|ns| ns == self.entries[i].namespace))
            .collect();
        let mut average = [0.0; 3];
        for &i in &candidates {
            for (field, total) in average.iter_mut().enumerate() {
                *total += self.entries[i].words.field(field).len() as f64;
            }
        }
        let count = candidates.len().max(1) as f64;
        // Per candidate, per term: its weighted, length-discounted frequency.
        let mut found: Vec<Vec<f64>> = Vec::with_capacity(candidates.len());
        let mut documents = vec![0usize; terms.len()];
        for &i in &candidates {
            let words = &self.entries[i].words;
            let row: Vec<f64> = terms
                .iter()
                .zip(&stems)
                .map(|(term, stem)| {
                    FIELDS
                        .iter()
                        .enumerate()
                        .map(|(field, (weight, b))| {
                            let list = words.field(field);
                            let presence = if field == 0 {
                                name_match(list, term, stem)
                            } else {
                                text_match(list, term)
                            };
                            let norm = 1.0 - b
                                + b * list.len().max(1) as f64
                                    / (average[field] / count).max(MIN_AVERAGE);
                            weight * presence / norm
                        })
                        .sum::<f64>()
                })
                .collect();
            for (t, &f) in row.iter().enumerate() {
                if f > 0.0 {
                    documents[t] += 1;
                }
            }
            found.push(row);
        }
        let idf: Vec<f64> = documents
            .iter()
            .map(|&n| (1.0 + (count - n as f64 + 0.5) / (n as f64 + 0.5)).ln())
            .collect();
        let mut scored: Vec<(f64, usize)> = Vec::new();
        for (&i, row) in candidates.iter().zip(&found) {
            let mut score: f64 = row
                .iter()
                .zip(&idf)
                .map(|(&f, idf)| idf * f * (K1 + 1.0) / (f + K1))
                .sum();
            if score <= 0.0 {
                continue;
            }
            if self.names_of(i)[3..].contains(&lower.to_string()) {
                score += 1000.0;
            }
            scored.push((score, i));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, i)| i).collect()
    }

    /// The names a query may give for a tool exactly: `tool`, `ns.tool`, by either name.
    fn names_of(&self, hit: usize) -> Vec<String> {
        let entry = &self.entries[hit];
        let ns = self.namespaces[entry.namespace].0.namespace.to_lowercase();
        let safe = entry.safe_name.to_lowercase();
        let original = entry.original_name.to_lowercase();
        vec![
            format!("{ns}.{safe}"),
            format!("{ns}.{original}"),
            format!("{ns}[\"{original}\"]"),
            safe,
            original,
        ]
    }

    fn namespace_named(&self, name: &str) -> Option<usize> {
        self.namespaces
            .iter()
            .position(|(s, _)| s.namespace.eq_ignore_ascii_case(name))
    }

    /// The answer listing the declarations of `hits` (ranked), as many as `limit` and the
    /// size bound allow, then the names of the rest.
    fn found(&self, query: &str, hits: Vec<usize>, limit: usize) -> Search {
        let mut shown = Vec::new();
        let mut size = 0;
        for &hit in &hits {
            if shown.len() >= limit {
                break;
            }
            let one = self.declarations(&[hit]).chars().count();
            if !shown.is_empty() && size + one > MAX_DECLARATION_CHARS {
                break;
            }
            size += one;
            shown.push(hit);
        }
        let rest = &hits[shown.len()..];
        let mut text = if rest.is_empty() {
            match hits.len() {
                1 => format!("1 tool matches {query:?}:\n"),
                n => format!("{n} tools match {query:?}, best first:\n"),
            }
        } else {
            format!(
                "{} tools match {query:?}, best first; the declarations of the first {}:\n",
                hits.len(),
                shown.len()
            )
        };
        let _ = write!(text, "\n```ts\n{}\n```\n", self.declarations(&shown));
        if !rest.is_empty() {
            let names: Vec<String> = rest
                .iter()
                .take(MAX_LISTED_MORE)
                .map(|&h| self.label(h))
                .collect();
            let _ = write!(
                text,
                "\n{} more match: {}{}. Search a tool's name (`{}`) for its declaration, or add words to narrow the search.\n",
                rest.len(),
                names.join(", "),
                if rest.len() > MAX_LISTED_MORE { ", …" } else { "" },
                self.label(rest[0]),
            );
        }
        self.append_unavailable(&mut text);
        let tools = shown
            .iter()
            .map(|&h| {
                let entry = &self.entries[h];
                json!({
                    "tool": self.label(h),
                    "name": entry.original_name,
                    "description": entry.tool.get_description(),
                    "declaration": self.declarations(&[h]),
                })
            })
            .collect();
        Search {
            text,
            tools,
            more: rest.len(),
        }
    }

    /// A namespace's tools by name (with their summaries), without declarations.
    fn namespace_listing(&self, query: &str, ns: usize) -> Search {
        let (status, description) = &self.namespaces[ns];
        let mut text = format!(
            "{query:?} is the namespace {} ({}",
            status.namespace, status.source
        );
        if let Some(why) = &status.unavailable {
            let _ = writeln!(text, "), which is unavailable: {}", one_line(why, 500));
            return Search {
                text,
                tools: Vec::new(),
                more: 0,
            };
        }
        let tools: Vec<&Entry> = self.entries.iter().filter(|e| e.namespace == ns).collect();
        let _ = writeln!(
            text,
            ", {} tool{}):",
            tools.len(),
            if tools.len() == 1 { "" } else { "s" }
        );
        if let Some(d) = description {
            let _ = writeln!(text, "{}", one_line(d, 300));
        }
        for entry in tools.iter().take(MAX_LISTED_TOOLS) {
            let _ = write!(text, "  {}", entry.safe_name);
            if let Some(summary) = summary(&entry.tool) {
                let _ = write!(text, ": {summary}");
            }
            text.push('\n');
        }
        if tools.len() > MAX_LISTED_TOOLS {
            let _ = writeln!(text, "  … and {} more", tools.len() - MAX_LISTED_TOOLS);
        }
        if let Some(first) = tools.first() {
            let _ = writeln!(
                text,
                "Search `{}.{}` (a tool's name) for its declaration, or words to find tools.",
                status.namespace, first.safe_name
            );
        }
        Search {
            text,
            tools: Vec::new(),
            more: tools.len(),
        }
    }

    /// The answer when nothing matches: says so, and lists the namespaces.
    fn nothing_found(&self, query: &str) -> Search {
        let mut text = format!(
            "No tool matches {query:?} (searched tool names and descriptions). The namespaces:\n"
        );
        for (i, (status, _)) in self.namespaces.iter().enumerate() {
            let names: Vec<&str> = self
                .entries
                .iter()
                .filter(|e| e.namespace == i)
                .map(|e| e.safe_name.as_str())
                .collect();
            let _ = write!(text, "  {} ({}", status.namespace, status.source);
            match &status.unavailable {
                Some(why) => {
                    let _ = write!(text, "; unavailable: {}", one_line(why, 200));
                }
                None => {
                    let listed: Vec<&str> = names.iter().copied().take(8).collect();
                    let _ = write!(text, "): {}", listed.join(", "));
                    if names.len() > listed.len() {
                        let _ = write!(text, ", … ({} tools)", names.len());
                    }
                    text.push('\n');
                    continue;
                }
            }
            text.push_str(")\n");
        }
        text.push_str(
            "Try other words, a namespace's name to list its tools, or \"*\" for every tool.\n",
        );
        Search {
            text,
            tools: Vec::new(),
            more: 0,
        }
    }

    /// Adds the unavailable namespaces, if any, to an answer.
    fn append_unavailable(&self, text: &mut String) {
        let unavailable: Vec<String> = self
            .statuses()
            .filter_map(|s| {
                s.unavailable
                    .as_ref()
                    .map(|why| format!("{} ({})", s.namespace, one_line(why, 200)))
            })
            .collect();
        if !unavailable.is_empty() {
            let _ = writeln!(text, "\nUnavailable: {}", unavailable.join("; "));
        }
    }

    /// `namespace.tool` of a search hit.
    pub fn label(&self, hit: usize) -> String {
        let entry = &self.entries[hit];
        format!(
            "{}.{}",
            self.namespaces[entry.namespace].0.namespace, entry.safe_name
        )
    }

    /// The TypeScript declarations of `hits`, grouped by namespace in the order of their
    /// first hit, each namespace's tools in the order of `hits`.
    pub fn declarations(&self, hits: &[usize]) -> String {
        let mut order: Vec<usize> = Vec::new();
        for &h in hits {
            let ns = self.entries[h].namespace;
            if !order.contains(&ns) {
                order.push(ns);
            }
        }
        let mut blocks = Vec::new();
        for ns in order {
            let (status, description) = &self.namespaces[ns];
            let chosen: Vec<&Entry> = hits
                .iter()
                .map(|&h| &self.entries[h])
                .filter(|e| e.namespace == ns)
                .collect();
            let remarks: Vec<Vec<String>> =
                chosen.iter().map(|e| self.remarks(e, status)).collect();
            let observed: Vec<Option<String>> = chosen
                .iter()
                .map(|e| {
                    let shown = status.upstream && e.tool.get_output_schema().is_none();
                    shown
                        .then(|| self.observed.get(&status.namespace, &e.original_name))
                        .flatten()
                })
                .collect();
            let decls: Vec<ToolDeclaration<'_>> = chosen
                .iter()
                .zip(&remarks)
                .zip(&observed)
                .map(|((e, remarks), observed)| ToolDeclaration {
                    safe_name: &e.safe_name,
                    description: e.tool.get_description(),
                    input_schema: e.tool.get_input_schema(),
                    output_schema: e.tool.get_output_schema(),
                    errors: &[],
                    remarks,
                    result_type: status.upstream.then_some(MCP_RESULT_TYPE),
                    observed: observed.as_deref(),
                })
                .collect();
            blocks.push(provider_declaration(
                &status.namespace,
                description.as_deref(),
                &decls,
            ));
        }
        blocks.join("\n\n")
    }

    /// The `@remarks` of a tool: its name upstream, approval, rate limit, unavailability.
    fn remarks(&self, entry: &Entry, status: &NamespaceStatus) -> Vec<String> {
        let mut remarks = Vec::new();
        if let Some(why) = &status.unavailable {
            remarks.push(format!(
                "unavailable: {}; every call fails with \"tool_error\"",
                one_line(why, 200)
            ));
        }
        let what = if status.upstream {
            "upstream name"
        } else {
            "original name"
        };
        // The original name reaches this tool too unless another tool is called so.
        let aliased = !self
            .entries
            .iter()
            .any(|e| e.namespace == entry.namespace && e.safe_name == entry.original_name);
        remarks.extend(name_remark(
            what,
            &status.namespace,
            &entry.safe_name,
            &entry.original_name,
            aliased,
        ));
        remarks.extend(requirement_remarks(entry.tool.requirements()));
        remarks
    }
}

/// `search_tools`' answer: the text the model reads, and per declared tool its structured entry.
pub struct Search {
    /// The answer's text: what matched and the declarations, or why nothing did.
    pub text: String,
    /// `{tool, name, description, declaration}` of each declared tool, best first.
    pub tools: Vec<Value>,
    /// How many more tools matched than were declared.
    pub more: usize,
}

/// What an upstream tool without an output schema promises: the MCP value mapping.
pub const MCP_RESULT_TYPE: &str =
    "unknown /* no output schema: JSON text → its value; other text → string; several blocks → array */";

/// The declarations of one `search_tools` answer stop growing past this many characters
/// (at least one is always given).
const MAX_DECLARATION_CHARS: usize = 6000;
/// At most this many more matches are named after the declarations.
const MAX_LISTED_MORE: usize = 15;
/// At most this many tools are listed for a namespace.
const MAX_LISTED_TOOLS: usize = 40;
/// Words that say nothing about a tool when found in its description.
const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "to", "of", "and", "or", "for", "in", "on", "with", "by", "is", "it", "from",
    "at", "as", "be", "this", "that", "all", "any", "me", "my", "do", "how", "what",
];

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

/// The first sentence of the first line of `text`, as a prefix of it (leading space included).
fn summary_sentence(text: &str) -> &str {
    let start = text.len() - text.trim_start().len();
    let body = &text[start..];
    let line = &body[..body.find('\n').unwrap_or(body.len())];
    let end = line.find(". ").map_or(line.len(), |end| end + 1);
    &text[..start + end]
}

/// A word's stem, so that a name's words and a query's meet whatever their endings:
/// `issues`, `issue` → `issu`; `repositories` → `repository`; `created`, `creating`,
/// `create` → `creat`. A few English suffixes, no dictionary.
fn stem(word: &str) -> String {
    let mut w = word.to_string();
    if w.len() > 4 && w.ends_with("ies") {
        w.truncate(w.len() - 3);
        w.push('y');
    } else if w.len() > 3
        && w.ends_with('s')
        && !w.ends_with("ss")
        && !w.ends_with("us")
        && !w.ends_with("is")
    {
        w.pop();
    }
    if w.len() > 5 && w.ends_with("ing") {
        w.truncate(w.len() - 3);
    } else if w.len() > 4 && w.ends_with("ed") {
        w.truncate(w.len() - 2);
    }
    if w.len() > 3 && w.ends_with('e') {
        w.pop();
    }
    w
}

/// How well a term (and its stem) is found among a name's stems: 1 for the same stem, ½ for
/// one a prefix of the other (`repo` and `repository`; the shorter has 3 characters or more).
fn name_match(stems: &[String], term: &str, stem: &str) -> f64 {
    let mut best = 0.0;
    for w in stems {
        if w == stem {
            return 1.0;
        }
        if (term.chars().count() >= 3 && w.starts_with(stem))
            || (w.chars().count() >= 4 && stem.starts_with(w.as_str()))
        {
            best = 0.5;
        }
    }
    best
}

/// How well a term is found among a text's words: 1 for the word itself, ½ for a word it
/// begins (a term of 4 characters or more).
fn text_match(words: &[String], term: &str) -> f64 {
    let mut best = 0.0;
    for w in words {
        if w == term {
            return 1.0;
        }
        if term.chars().count() >= 4 && w.starts_with(term) {
            best = 0.5;
        }
    }
    best
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
            upstream: true,
        }
    }

    fn catalog() -> Catalog {
        Catalog::build(
            vec![
                (
                    Provider::new("github")
                        .tool(tool("create-issue", "Create an issue. Needs a repo."))
                        .tool(tool("search_repos", "Search repositories by keyword"))
                        .tool(tool("get-thing", "Get one thing by its id")),
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
                upstream: true,
            }],
            Arc::new(ObservedResults::in_memory()),
        )
        .unwrap()
    }

    fn labels(c: &Catalog, query: &str) -> Vec<String> {
        c.search(query, 10)
            .tools
            .iter()
            .map(|t| t["tool"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_index_has_a_line_per_namespace_and_per_tool() {
        assert_eq!(
            catalog().index(),
            "github (MCP server \"github\", 3 tools)\n\
             \x20 create_issue: Create an issue.\n\
             \x20 search_repos: Search repositories by keyword\n\
             \x20 get_thing: Get one thing by its id\n\
             docs (MCP server \"docs\", 1 tool)\n\
             \x20 search: Full-text search of the docs\n\
             jira (MCP server \"jira\"; UNAVAILABLE: failed to start: command \"jira-mcp\" not found)\n"
        );
    }

    #[test]
    fn a_tool_named_exactly_is_the_only_answer() {
        let c = catalog();
        for query in [
            "github.create_issue",
            "github.create-issue",
            "GITHUB.Create_Issue",
            "github[\"create-issue\"]",
        ] {
            assert_eq!(labels(&c, query), ["github.create_issue"], "{query}");
        }
        let text = c.search("github.create-issue", 10).text;
        assert!(
            text.starts_with("1 tool matches \"github.create-issue\":\n"),
            "{text}"
        );
        assert!(
            text.contains("@remarks upstream name: \"create-issue\"; also callable as github[\"create-issue\"]"),
            "{text}"
        );
    }

    #[test]
    fn search_ranks_names_over_descriptions_and_ignores_namespace_parts() {
        let c = catalog();
        assert_eq!(labels(&c, "search"), ["docs.search", "github.search_repos"]);
        assert_eq!(
            labels(&c, "repos search"),
            ["github.search_repos", "docs.search"]
        );
        assert_eq!(labels(&c, "issue"), ["github.create_issue"]);
        assert_eq!(labels(&c, "keyword"), ["github.search_repos"]);
        // A tool's name alone ranks it first.
        assert_eq!(labels(&c, "create-issue"), ["github.create_issue"]);
        assert_eq!(labels(&c, "get-thing")[0], "github.get_thing");
        // "hub" is part of the namespace "github" only: it finds nothing.
        assert!(labels(&c, "hub").is_empty());
        // A namespace's name keeps the search to it.
        assert_eq!(labels(&c, "github search"), ["github.search_repos"]);
        assert_eq!(labels(&c, "*").len(), 4);
        assert_eq!(c.search("*", 1).tools.len(), 1);
        assert_eq!(c.search("*", 1).more, 3);
    }

    #[test]
    fn nothing_found_says_so_and_lists_the_namespaces() {
        let c = catalog();
        let found = c.search("nonexistent gizmo", 10);
        assert!(found.tools.is_empty());
        assert_eq!(
            found.text,
            "No tool matches \"nonexistent gizmo\" (searched tool names and descriptions). The namespaces:\n\
             \x20 github (MCP server \"github\"): create_issue, search_repos, get_thing\n\
             \x20 docs (MCP server \"docs\"): search\n\
             \x20 jira (MCP server \"jira\"; unavailable: failed to start: command \"jira-mcp\" not found)\n\
             Try other words, a namespace's name to list its tools, or \"*\" for every tool.\n"
        );
    }

    #[test]
    fn a_namespace_alone_lists_its_tools_by_name() {
        let c = catalog();
        let found = c.search("github", 10);
        assert!(found.tools.is_empty());
        assert!(
            found.text.starts_with("\"github\" is the namespace github (MCP server \"github\", 3 tools):\n  create_issue: Create an issue.\n"),
            "{}",
            found.text
        );
        assert!(!found.text.contains("declare"), "{}", found.text);
    }

    #[test]
    fn declarations_cover_only_the_hits_with_the_mcp_result_type() {
        let c = catalog();
        let text = c.declarations(&[0]);
        assert!(text.contains("declare namespace github {"), "{text}");
        assert!(text.contains("function create_issue(input: {"), "{text}");
        assert!(
            text.contains(&format!("}}): Promise<{MCP_RESULT_TYPE}>;")),
            "{text}"
        );
        assert!(!text.contains("search_repos"), "{text}");
        c.observed
            .record("github", "create-issue", "{ id: number }")
            .unwrap();
        let text = c.declarations(&[0]);
        assert!(
            text.contains("  // observed result: { id: number }\n  function create_issue("),
            "{text}"
        );
    }

    #[test]
    fn unavailable_namespaces_go_to_the_runner_marked() {
        let c = catalog();
        let jira = c
            .tools()
            .manifests()
            .iter()
            .find(|m| m.name == "jira")
            .unwrap();
        assert_eq!(
            jira.unavailable.as_deref(),
            Some("MCP server \"jira\": failed to start: command \"jira-mcp\" not found. Do not retry: tell the user, who can fix it and restart execbox mcp")
        );
        assert!(jira.tools.is_empty());
        let github = &c.tools().manifests()[0];
        assert_eq!(github.unavailable, None);
        assert_eq!(
            github.tools[0].original_name.as_deref(),
            Some("create-issue")
        );
        assert_eq!(github.tools[0].safe_name, "create_issue");
    }

    /// A few of GitHub's operations, as an OpenAPI provider makes them.
    fn github_like() -> Catalog {
        let tools = [
            ("reactions/create-for-issue-comment", "Create reaction for an issue comment\n\nCreate a reaction to an issue comment."),
            ("issues/create", "Create an issue\n\nAny user with pull access to a repository can create an issue."),
            ("issues/create-comment", "Create an issue comment\n\nYou can use the REST API to create comments on issues and pull requests."),
            ("repos/list-pull-requests-associated-with-commit", "List pull requests associated with a commit\n\nLists the merged pull request that introduced the commit to the repository."),
            ("pull-request-stacks/list", "List pull request stacks\n\nLists the stacks of pull requests in a repository."),
            ("pulls/list", "List pull requests\n\nLists pull requests in a specified repository."),
            ("activity/get-thread-subscription-for-authenticated-user", "Get a thread subscription for the authenticated user"),
            ("codespaces/get-secret-for-authenticated-user", "Get a secret for the authenticated user"),
            ("users/get-authenticated", "Get the authenticated user\n\nOAuth app tokens and personal access tokens (classic) need the user scope."),
            ("repos/delete-admin-branch-protection", "Delete admin branch protection"),
            ("repos/delete-branch-protection", "Delete branch protection"),
        ];
        let mut github = Provider::new("github");
        for (name, description) in tools {
            github = github.tool(tool(name, description));
        }
        Catalog::build(
            vec![(github, status("github"))],
            Vec::new(),
            Arc::new(ObservedResults::in_memory()),
        )
        .unwrap()
    }

    fn ranked(c: &Catalog, query: &str) -> Vec<String> {
        let lower = query.to_lowercase();
        c.rank(&lower, &words(&lower), None)
            .into_iter()
            .map(|hit| c.entries[hit].original_name.clone())
            .collect()
    }

    #[test]
    fn plain_words_find_an_operation_by_stems_summary_and_rare_words() {
        let c = github_like();
        // `issues` in the name is the query's `issue`; the shorter name saying it all wins.
        assert_eq!(
            ranked(&c, "create a comment on an issue")[0],
            "issues/create-comment"
        );
        assert_eq!(
            ranked(&c, "get the authenticated user")[0],
            "users/get-authenticated"
        );
        assert_eq!(
            ranked(&c, "delete a branch protection")[0],
            "repos/delete-branch-protection"
        );
        let pulls = ranked(&c, "list pull requests of a repository");
        assert!(pulls[..2].contains(&"pulls/list".to_string()), "{pulls:?}");
        // The answer declares the best first.
        assert_eq!(
            labels(&c, "create a comment on an issue")[0],
            "github.issues_create_comment"
        );
    }

    /// `search_tools` over a large provider written by execbox-openapi's
    /// `a_large_document_loads` (`EXECBOX_TOOLS_DUMP=FILE`): the time of each query, first
    /// and again, and where the operation it means ranks (docs/benchmarks.md).
    #[test]
    #[ignore = "needs EXECBOX_TOOLS_DUMP, tools written by execbox-openapi's a_large_document_loads"]
    fn search_over_a_large_provider() {
        let path = std::env::var("EXECBOX_TOOLS_DUMP").expect("EXECBOX_TOOLS_DUMP names a file");
        let dump: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut provider = Provider::new("github");
        if let Some(description) = dump["description"].as_str() {
            provider = provider.description(description);
        }
        for t in dump["tools"].as_array().unwrap() {
            let mut tool = Tool::new(t["name"].as_str().unwrap(), |_, _| async {
                Ok(json!(null))
            });
            if let Some(description) = t["description"].as_str() {
                tool = tool.description(description);
            }
            let schema = |s: &str| execbox_host::ToolSchema::deferred(s).unwrap();
            if let Some(s) = t["input"].as_str() {
                tool = tool.input_schema(schema(s));
            }
            if let Some(s) = t["output"].as_str() {
                tool = tool.output_schema(schema(s));
            }
            provider = provider.tool(tool);
        }
        let started = std::time::Instant::now();
        let c = Catalog::build(
            vec![(provider, status("github"))],
            Vec::new(),
            Arc::new(ObservedResults::in_memory()),
        )
        .unwrap();
        println!(
            "catalog of {} tools in {:?}",
            c.entries.len(),
            started.elapsed()
        );
        for (query, wanted) in [
            ("create a comment on an issue", "issues/create-comment"),
            ("list pull requests of a repository", "pulls/list"),
            (
                "delete a branch protection",
                "repos/delete-branch-protection",
            ),
            ("get the authenticated user", "users/get-authenticated"),
            ("merge a pull request", "pulls/merge"),
            ("add labels to an issue", "issues/add-labels"),
            ("get the contents of a file", "repos/get-content"),
            ("list workflow runs", "actions/list-workflow-runs"),
        ] {
            let started = std::time::Instant::now();
            c.search(query, 10);
            let first = started.elapsed();
            let started = std::time::Instant::now();
            c.search(query, 10);
            let again = started.elapsed();
            let ranked = ranked(&c, query);
            let rank = ranked.iter().position(|n| n == wanted).map(|r| r + 1);
            println!("{query:?}: {first:?}, again {again:?}; {wanted} ranks {rank:?}");
        }
    }
}
