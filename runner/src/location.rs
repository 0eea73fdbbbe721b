//! Error locations in the code as the user wrote it: line, column, the line itself and where the
//! caret goes, as the structured `location` of a wire error (see `ErrorLocation`).
//!
//! Hosts render it, for the same syntax errors and uncaught errors, as documented in
//! docs/errors.md:
//!
//! ```text
//! SyntaxError: unexpected token in expression: ';' (line 2, column 11)
//!   2 | const b = ;
//!     |           ^
//! ```

use execbox_protocol::{ErrorBody, ErrorLocation};

use crate::hints;
use crate::normalize::{fence_body, loops, Compiled};

/// The script name guest code is compiled under; stack frames of guest code name it.
pub(crate) const GUEST_FILENAME: &str = "sandbox-user-code.js";

/// Longest source line shown whole; longer ones are shown around the column.
const SHOWN_CHARS: usize = 120;

/// Maps the engine's positions in one compiled program back to the user's code.
#[derive(Debug, Clone)]
pub(crate) struct Locator {
    compiled: Compiled,
    /// The code after fence stripping: what line numbers count in.
    body: String,
    /// The provider namespaces of the execution and their tools' safe names.
    providers: Vec<(String, Vec<String>)>,
}

impl Locator {
    /// A locator for `compiled`, normalised from `code`.
    pub(crate) fn new(code: &str, compiled: Compiled) -> Locator {
        Locator {
            compiled,
            body: fence_body(code).to_owned(),
            providers: Vec::new(),
        }
    }

    /// The same, knowing the execution's namespaces, so a call of a tool that does not exist
    /// can be named (see [`Locator::locate`]).
    pub(crate) fn with_providers(mut self, providers: Vec<(String, Vec<String>)>) -> Locator {
        self.providers = providers;
        self
    }

    /// The execution's namespaces and their tools' safe names.
    pub(crate) fn namespaces(&self) -> &hints::Namespaces {
        &self.providers
    }

    /// `TypeError: not a function` at a call `ns.name(` where `ns` is a provider without a
    /// tool `name`: the message `ns.name is not a function; ns has: a, b`.
    fn missing_tool(&self, name: &str, message: &str, line: u32, column: u32) -> Option<String> {
        if name != "TypeError" || message != "not a function" {
            return None;
        }
        let text = self.body.lines().nth(line.saturating_sub(1) as usize)?;
        let column = column.saturating_sub(1) as usize;
        // The member call nearest the column, preferring one that spans it.
        let calls = member_calls(text);
        let (_, namespace, name) = calls
            .iter()
            .filter(|(span, namespace, name)| {
                let tools = self.providers.iter().find(|(n, _)| n == namespace);
                tools.is_some_and(|(_, tools)| !tools.iter().any(|t| t == name))
                    && span.end >= column
            })
            .min_by_key(|(span, _, _)| span.start.abs_diff(column))?;
        let tools = &self.providers.iter().find(|(n, _)| n == namespace)?.1;
        let has = if tools.is_empty() {
            "no tools".to_owned()
        } else {
            tools.join(", ")
        };
        Some(format!(
            "{namespace}.{name} is not a function; {namespace} has: {has}"
        ))
    }

    /// `error` located at the innermost guest frame of `stack` (a QuickJS stack or a syntax
    /// error's); unchanged when the stack names no guest frame. An error the engine raised for
    /// a common mistake says what to write instead (see [`hints`]).
    pub(crate) fn locate(&self, mut error: ErrorBody, stack: &str) -> ErrorBody {
        let name = error.name.as_deref().unwrap_or_default();
        let Some((line, column)) = innermost_guest_frame(stack) else {
            if name == "ReferenceError" {
                if let Some(better) = hints::dynamic_import(&error.message, &self.providers) {
                    error.message = better;
                }
            }
            return error;
        };
        let (line, column) = self.compiled.user_position(line, column);
        if let Some(better) = self.missing_tool(name, &error.message, line, column) {
            error.message = better;
        } else if name == "ReferenceError" {
            let source_at = self.source_from(line, column).unwrap_or_default();
            if let Some(better) = hints::not_defined(&error.message, &source_at, &self.providers) {
                error.message = better;
            }
        }
        error.with_location(self.at(line, column))
    }

    /// Where the guest was running when an interrupt (its deadline) stopped it, from the
    /// interrupt's `stack`.
    ///
    /// When the guest was inside a call (a native like a regular expression's `exec`, or the
    /// bootstrap), its innermost frame is that call, exactly. When its own code was running,
    /// QuickJS only knows the last position it recorded: an interrupt is checked at jumps,
    /// and after a jump back to a loop's top the position is whatever was recorded before
    /// that top (a statement before the loop, the function's start, an `if` in the loop).
    /// So the loop it was in is found from there in the program's text: the first loop that
    /// starts after that position inside the innermost loop around it, else that loop, else
    /// the first loop after it. `None` when there is no such loop or the program cannot be
    /// read (the message then names no line).
    pub(crate) fn running_at(&self, stack: &str) -> Option<ErrorLocation> {
        let (line, column) = innermost_guest_frame(stack)?;
        let (line, column) = self.compiled.user_position(line, column);
        let in_a_call = !stack
            .lines()
            .next()
            .is_some_and(|top| top.contains(&format!("({GUEST_FILENAME}:")));
        if in_a_call {
            return Some(self.at(line, column));
        }
        let at = (line, column);
        let Some(loops) = loops(&self.body) else {
            // Unreadable: the recorded line, when it is a loop's.
            let location = self.at(line, column);
            return location
                .source
                .as_deref()
                .is_some_and(crate::timeout::names_a_loop)
                .then_some(location);
        };
        let around = loops
            .iter()
            .filter(|l| l.start <= at && at <= l.end)
            .max_by_key(|l| l.start);
        let bound = around.map_or((u32::MAX, u32::MAX), |l| l.end);
        let next = loops.iter().find(|l| l.start > at && l.start <= bound);
        let found = next.or(around)?;
        Some(self.at(found.start.0, found.start.1))
    }

    /// The text of line `line` from column `column` on (both 1-based, in characters).
    fn source_from(&self, line: u32, column: u32) -> Option<String> {
        let text = self.body.lines().nth(line.checked_sub(1)? as usize)?;
        Some(
            text.chars()
                .skip(column.saturating_sub(1) as usize)
                .collect(),
        )
    }

    /// The location `line`, `column` with the line's text (a window of it around the column
    /// when it is long) and the caret's place in that text.
    pub(crate) fn at(&self, line: u32, column: u32) -> ErrorLocation {
        let mut location = ErrorLocation {
            line,
            column,
            source: None,
            caret: None,
        };
        let Some(text) = self.body.lines().nth(line.saturating_sub(1) as usize) else {
            return location;
        };
        let chars: Vec<char> = text.chars().collect();
        let col = (column.max(1) - 1) as usize;
        // A window of the line around the column when it is long.
        let start = if chars.len() > SHOWN_CHARS {
            col.saturating_sub(SHOWN_CHARS / 2)
                .min(chars.len().saturating_sub(SHOWN_CHARS))
        } else {
            0
        };
        let end = (start + SHOWN_CHARS).min(chars.len());
        let mut shown: String = chars[start..end]
            .iter()
            .map(|&c| if c == '\t' { ' ' } else { c })
            .collect();
        if start > 0 {
            shown.insert(0, '…');
        }
        if end < chars.len() {
            shown.push('…');
        }
        let caret = col - start + usize::from(start > 0) + 1;
        location.source = Some(shown);
        location.caret = Some(u32::try_from(caret).unwrap_or(u32::MAX));
        location
    }
}

/// The member calls `a.b(` of a line, by character positions: (span of `a.b`, `a`, `b`).
fn member_calls(text: &str) -> Vec<(std::ops::Range<usize>, String, String)> {
    let chars: Vec<char> = text.chars().collect();
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == '$';
    let ident_part = |c: char| ident_start(c) || c.is_ascii_digit();
    let mut calls = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !ident_start(chars[i]) || (i > 0 && (ident_part(chars[i - 1]) || chars[i - 1] == '.')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && ident_part(chars[i]) {
            i += 1;
        }
        let namespace: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if j >= chars.len() || chars[j] != '.' {
            continue;
        }
        j += 1;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        let name_start = j;
        while j < chars.len() && ident_part(chars[j]) {
            j += 1;
        }
        if name_start == j {
            continue;
        }
        let name: String = chars[name_start..j].iter().collect();
        let mut k = j;
        while k < chars.len() && chars[k] == ' ' {
            k += 1;
        }
        if k < chars.len() && chars[k] == '(' {
            calls.push((start..j, namespace, name));
        }
    }
    calls
}

/// The (line, column) of the first frame of guest code in a QuickJS stack text.
pub(crate) fn innermost_guest_frame(stack: &str) -> Option<(u32, u32)> {
    let marker = format!("{GUEST_FILENAME}:");
    stack.match_indices(&marker).find_map(|(at, _)| {
        let rest = &stack[at + marker.len()..];
        let (line, rest) = rest.split_once(':')?;
        let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((line.parse().ok()?, column.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::normalize;

    #[test]
    fn frames_are_read_from_quickjs_stacks() {
        let stack = "    at f (execbox-bootstrap.js:3:4)\n    at g (sandbox-user-code.js:12:7)\n    at sandbox-user-code.js:1:1\n";
        assert_eq!(innermost_guest_frame(stack), Some((12, 7)));
        assert_eq!(
            innermost_guest_frame("    at sandbox-user-code.js:4:20\n"),
            Some((4, 20))
        );
        assert_eq!(innermost_guest_frame("no frames"), None);
        assert_eq!(innermost_guest_frame("sandbox-user-code.js:x:1"), None);
    }

    #[test]
    fn the_location_has_the_line_and_the_caret() {
        let code = "```js\nconst a = 1;\nconst b = ;\n```";
        let locator = Locator::new(code, normalize(code).compiled(true));
        assert_eq!(
            locator.at(2, 11),
            ErrorLocation {
                line: 2,
                column: 11,
                source: Some("const b = ;".into()),
                caret: Some(11)
            }
        );
        // A line past the code has no source.
        assert_eq!(locator.at(9, 1).source, None);
    }

    #[test]
    fn long_lines_are_shown_around_the_column() {
        let code = format!("{}boom{}", "a".repeat(300), "b".repeat(300));
        let locator = Locator::new(&code, normalize(&code).compiled(true));
        let location = locator.at(1, 301);
        let source = location.source.clone().unwrap();
        assert!(
            source.contains("boom") && source.chars().count() < 140,
            "{location:?}"
        );
        let caret = location.caret.unwrap() as usize - 1;
        let under: String = source.chars().skip(caret).take(4).collect();
        assert_eq!(under, "boom", "{location:?}");
        // The rendering puts the caret under the same character.
        let text = ErrorBody::new(execbox_protocol::ErrorCode::RuntimeError, "m")
            .with_location(location)
            .text();
        let lines: Vec<&str> = text.lines().collect();
        let at = lines[2].chars().position(|c| c == '^').unwrap();
        let under: String = lines[1].chars().skip(at).take(4).collect();
        assert_eq!(under, "boom", "{text}");
    }

    #[test]
    fn a_call_of_a_missing_tool_names_it_and_lists_the_namespace() {
        let code =
            "const a = await docs.search({ q: 1 });\nconst b = await docs.searchDocs({ q: 2 });";
        let locator = Locator::new(code, normalize(code).compiled(true)).with_providers(vec![(
            "docs".into(),
            vec!["search".into(), "read_file".into()],
        )]);
        assert_eq!(
            locator
                .missing_tool("TypeError", "not a function", 2, 21)
                .unwrap(),
            "docs.searchDocs is not a function; docs has: search, read_file"
        );
        // Calls of existing tools and of other objects are left alone.
        assert_eq!(
            locator.missing_tool("TypeError", "not a function", 1, 21),
            None
        );
        assert_eq!(
            locator.missing_tool("TypeError", "cannot read property", 2, 21),
            None
        );
        assert_eq!(member_calls("x.y (1); a.b.c(2)").len(), 1);
    }
}
