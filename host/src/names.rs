//! JavaScript names for providers and tools: identifier checks, tool-name sanitising and collisions.
//!
//! A provider becomes a global binding in the guest (`text.word_count(...)`), so its name must
//! already be a usable identifier: [`check_provider_name`] refuses anything else rather than
//! silently renaming a namespace the caller will write prompts about.
//!
//! Tool names come from many places (MCP servers, tools files, OpenAPI operation ids) and are
//! sanitised instead: [`sanitize_tool_name`] maps one name to an identifier and
//! [`assign_safe_names`] makes the names of one provider unique, deterministically, in
//! declaration order. The original name is always kept next to the safe one.

use std::collections::HashSet;

use execbox_protocol::names::is_identifier_char;
pub use execbox_protocol::names::{check_provider_name, is_identifier, is_reserved_word};

/// Maps a tool name to an identifier: every character outside `[A-Za-z0-9_$]` becomes `_`,
/// a leading digit gets a `_` prefix, a reserved word gets a `_` suffix, and an empty name
/// becomes `_`.
///
/// ```text
/// search-docs → search_docs      1tool → _1tool      default → default_
/// ```
pub fn sanitize_tool_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if is_identifier_char(c) { c } else { '_' })
        .collect();
    if out.is_empty() {
        return "_".into();
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if is_reserved_word(&out) {
        out.push('_');
    }
    out
}

/// Sanitises the tool names of one provider and makes them unique, in declaration order.
///
/// The first tool to claim a safe name keeps it; later ones get `__2`, `__3`, ... appended
/// (the first free suffix). The result is parallel to the input.
///
/// ```text
/// [search-docs, search_docs] → [search_docs, search_docs__2]
/// ```
pub fn assign_safe_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut taken = HashSet::new();
    let mut out = Vec::new();
    for name in names {
        let base = sanitize_tool_name(name);
        let mut candidate = base.clone();
        let mut n = 2u64;
        while taken.contains(&candidate) {
            candidate = format!("{base}__{n}");
            n += 1;
        }
        taken.insert(candidate.clone());
        out.push(candidate);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitising_replaces_prefixes_and_suffixes() {
        let cases = [
            ("search-docs", "search_docs"),
            ("search docs!", "search_docs_"),
            ("1tool", "_1tool"),
            ("default", "default_"),
            ("class", "class_"),
            ("", "_"),
            ("$ok_1", "$ok_1"),
            ("héllo", "h_llo"),
            ("a.b/c", "a_b_c"),
            ("-", "_"),
            ("constructor", "constructor"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_tool_name(input), want, "{input:?}");
            assert!(is_identifier(&sanitize_tool_name(input)), "{input:?}");
        }
    }

    #[test]
    fn collisions_get_numbered_suffixes_in_declaration_order() {
        assert_eq!(
            assign_safe_names(["search-docs", "search_docs"]),
            ["search_docs", "search_docs__2"]
        );
        assert_eq!(
            assign_safe_names(["a-b", "a.b", "a b", "a_b"]),
            ["a_b", "a_b__2", "a_b__3", "a_b__4"]
        );
        // A literal name that equals a generated one is itself suffixed.
        assert_eq!(
            assign_safe_names(["x-y", "x_y", "x_y__2"]),
            ["x_y", "x_y__2", "x_y__2__2"]
        );
        assert_eq!(assign_safe_names(["", "!"]), ["_", "___2"]);
    }

    #[test]
    fn identifiers_are_ascii_and_do_not_start_with_a_digit() {
        for good in ["a", "_", "$", "a1", "$a_b", "default"] {
            assert!(is_identifier(good), "{good}");
        }
        for bad in ["", "1a", "a-b", "a b", "é", "a.b"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn provider_names_are_checked_with_a_reason() {
        assert_eq!(check_provider_name("text"), Ok(()));
        assert_eq!(check_provider_name("$db_2"), Ok(()));
        let reason = |n: &str| check_provider_name(n).unwrap_err();
        assert!(reason("my-tools").contains("'-' is not allowed"));
        assert!(reason("2fa").contains("starts with a digit"));
        assert!(reason("default").contains("reserved word"));
        assert!(reason("console").contains("global"));
        assert!(reason("undefined").contains("global"));
        assert!(reason("").contains("empty"));
    }
}
