//! TypeScript guest code: type annotations erased in place, so JavaScript runs.
//!
//! Models primed with TypeScript declarations write TypeScript. swc's strip-only mode
//! replaces every annotation with whitespace of the same length, keeping each line and column
//! where it was, so errors still point at the code as written; what cannot be erased (`enum`,
//! `namespace`, parameter properties) is refused with its line. Plain JavaScript never comes
//! here unless it fails to compile, so it pays nothing.

/// Why code could not be stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StripError {
    /// TypeScript that needs code generated for it, which strip-only mode refuses; the
    /// message names the construct.
    #[cfg_attr(not(feature = "typescript"), allow(dead_code))]
    Unsupported {
        /// What is not supported, in swc's words, e.g. `TypeScript enum is not supported`.
        what: String,
        /// 1-based line in the code given.
        line: u32,
        /// 1-based column.
        column: u32,
    },
    /// Not valid TypeScript either: the parser's first error and where it is (1-based, in the
    /// code given). Shown instead of the JavaScript parser's when it is further in.
    #[cfg_attr(not(feature = "typescript"), allow(dead_code))]
    Syntax {
        /// The parser's words, e.g. `Expression expected`.
        message: String,
        /// 1-based line in the code given.
        line: u32,
        /// 1-based column.
        column: u32,
    },
    /// Not valid TypeScript either, with nothing known of why: the JavaScript error stands.
    Invalid,
}

/// Whether a fenced program says it is TypeScript (```` ```ts ````, `typescript`, `tsx`,
/// `mts`, `cts`).
pub(crate) fn is_typescript_fence(code: &str) -> bool {
    let Some(rest) = code.trim_start().strip_prefix("```") else {
        return false;
    };
    let tag = rest.split(['\n', ' ', '\r']).next().unwrap_or_default();
    matches!(
        tag.to_ascii_lowercase().as_str(),
        "ts" | "typescript" | "tsx" | "mts" | "cts"
    )
}

/// The prefix that makes a program body (top-level `await` and `return`) parse as script
/// code; it is JavaScript, so it comes out of the stripper unchanged and is cut off again.
#[cfg(feature = "typescript")]
const PREFIX: &str = "async function __execbox_body__() {";

/// The deepest nesting the stripper is given: swc parses recursively, and a hostile program
/// nested far deeper would overflow the engine thread's stack (an abort, not an error). Real
/// programs stay far below it; a deeper one is left to the JavaScript parser, which refuses it
/// with an error.
#[cfg(feature = "typescript")]
const MAX_NESTING: usize = 1_000;

/// The largest program the stripper is given. swc's recursion has no stack check: measured on
/// the engine thread's 64 MiB stack, 120,000 chained prefix operators (`!!!…`, one character
/// per level, the densest nesting there is) parse and 250,000 overflow, so 100,000 bytes can
/// never nest deep enough to abort the runner.
pub(crate) const MAX_TYPESCRIPT_BYTES: usize = 100_000;

/// A bound of how deep `code` nests: brackets, braces and parentheses, plus angle brackets
/// (which may open type arguments), counted without regard to strings or comments, so that it
/// never underestimates.
#[cfg(feature = "typescript")]
fn nesting_bound(code: &str) -> usize {
    let (mut depth, mut angles, mut deepest) = (0usize, 0usize, 0usize);
    for byte in code.bytes() {
        match byte {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'<' => angles += 1,
            b'>' => angles = angles.saturating_sub(1),
            _ => continue,
        }
        deepest = deepest.max(depth + angles);
    }
    deepest
}

/// `body` with its type annotations replaced by spaces: same length, same lines and columns.
#[cfg(feature = "typescript")]
pub(crate) fn strip(body: &str) -> Result<String, StripError> {
    if body.len() > MAX_TYPESCRIPT_BYTES {
        return Err(StripError::Unsupported {
            what: format!(
                "a TypeScript program over {MAX_TYPESCRIPT_BYTES} bytes ({} bytes) is not erased",
                body.len()
            ),
            line: 1,
            column: 1,
        });
    }
    if nesting_bound(body) > MAX_NESTING {
        return Err(StripError::Invalid);
    }
    use std::sync::{Arc, Mutex};

    use swc_common::errors::{DiagnosticBuilder, Emitter, Handler};
    use swc_common::sync::Lrc;
    use swc_common::{BytePos, SourceMap};

    type Found = Arc<Mutex<Vec<(String, Option<BytePos>)>>>;
    struct Collect(Found);
    impl Emitter for Collect {
        fn emit(&mut self, diagnostic: &mut DiagnosticBuilder<'_>) {
            let at = diagnostic.span.primary_span().map(|span| span.lo);
            if let Ok(mut found) = self.0.lock() {
                found.push((diagnostic.message(), at));
            }
        }
    }

    let source = format!("{PREFIX}{body}\n}}");
    let map: Lrc<SourceMap> = Default::default();
    let found: Found = Default::default();
    let handler = Handler::with_emitter(true, false, Box::new(Collect(found.clone())));
    let options = swc_ts_fast_strip::Options {
        module: Some(false),
        mode: swc_ts_fast_strip::Mode::StripOnly,
        ..Default::default()
    };
    match swc_ts_fast_strip::operate(&map, &handler, source, options) {
        Ok(output) => {
            let code = output.code;
            let stripped = code
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.strip_suffix("\n}"))
                .ok_or(StripError::Invalid)?;
            Ok(stripped.to_owned())
        }
        Err(error) => {
            let unsupported = matches!(error.code, swc_ts_fast_strip::ErrorCode::UnsupportedSyntax);
            let found = found.lock().map(|f| f.clone()).unwrap_or_default();
            let Some((what, at)) = found.into_iter().next() else {
                return Err(StripError::Invalid);
            };
            let (line, column) = match at {
                Some(at) => {
                    let loc = map.lookup_char_pos(at);
                    let column = loc.col_display as u32 + 1;
                    let column = if loc.line == 1 {
                        column.saturating_sub(PREFIX.len() as u32).max(1)
                    } else {
                        column
                    };
                    (loc.line as u32, column)
                }
                None => (1, 1),
            };
            if !unsupported {
                // Past the body: the parser reached the closing brace of the prefix's function.
                let lines = body.lines().count().max(1) as u32;
                if line > lines || at.is_none() {
                    return Err(StripError::Invalid);
                }
                let message = what.trim_end_matches('.').to_owned();
                return Err(StripError::Syntax {
                    message,
                    line,
                    column,
                });
            }
            let what = what
                .trim_end_matches(" in strip-only mode")
                .trim_end_matches('.')
                .to_owned();
            Err(StripError::Unsupported { what, line, column })
        }
    }
}

/// Without the `typescript` feature, TypeScript is not recognised: the JavaScript error stands.
#[cfg(not(feature = "typescript"))]
pub(crate) fn strip(_body: &str) -> Result<String, StripError> {
    Err(StripError::Invalid)
}

#[cfg(all(test, feature = "typescript"))]
mod tests {
    use super::*;

    #[test]
    fn annotations_become_spaces_and_positions_stay() {
        let code = "const r: { total: number } = await f();\nconst x = r as any;\nreturn x.total";
        let js = strip(code).unwrap();
        assert_eq!(js.len(), code.len());
        assert_eq!(js.lines().count(), code.lines().count());
        assert!(
            js.starts_with("const r                    = await f();"),
            "{js}"
        );
        assert!(js.contains("const x = r       ;"), "{js}");
        assert!(js.ends_with("return x.total"), "{js}");
    }

    #[test]
    fn what_cannot_be_erased_is_refused_with_its_line() {
        let err = strip("let a = 1;\nenum Color { Red }").unwrap_err();
        assert_eq!(
            err,
            StripError::Unsupported {
                what: "TypeScript enum is not supported".into(),
                line: 2,
                column: 1,
            }
        );
        assert!(matches!(
            strip("class A { constructor(private x: number) {} }"),
            Err(StripError::Unsupported { line: 1, .. })
        ));
        assert!(matches!(
            strip("const a = ;"),
            Err(StripError::Syntax { line: 1, .. })
        ));
    }

    #[test]
    fn a_syntax_error_is_reported_where_the_typescript_parser_found_it() {
        let code = "const total: number = 1;\nconst label: string = \"a\";\nconst broken = ;\nreturn total;";
        match strip(code) {
            Err(StripError::Syntax {
                message,
                line,
                column,
            }) => {
                assert_eq!((line, column), (3, 16), "{message}");
                assert!(!message.is_empty());
            }
            other => panic!("expected a syntax error on line 3, got {other:?}"),
        }
    }

    #[test]
    fn hostile_nesting_is_left_to_the_javascript_parser() {
        let deep = format!(
            "const a: number = {}1{};",
            "(".repeat(20_000),
            ")".repeat(20_000)
        );
        assert_eq!(strip(&deep), Err(StripError::Invalid));
        let generic = format!(
            "let x: {}number{} = 1;",
            "A<".repeat(5_000),
            ">".repeat(5_000)
        );
        assert_eq!(strip(&generic), Err(StripError::Invalid));
        let long = format!("let x: number = {}1;", "!".repeat(250_000));
        assert!(matches!(
            strip(&long),
            Err(StripError::Unsupported { line: 1, .. })
        ));
        // Real nesting still strips.
        let fine = format!("const a: number = {}1{};", "(".repeat(200), ")".repeat(200));
        assert!(strip(&fine).is_ok());
    }

    #[test]
    fn fences_that_say_typescript() {
        assert!(is_typescript_fence("```ts\nx"));
        assert!(is_typescript_fence("  ```TypeScript\nx"));
        assert!(!is_typescript_fence("```js\nx"));
        assert!(!is_typescript_fence("x"));
    }
}
