//! The names a provider namespace may take, shared by the host (which refuses them when tools
//! are declared) and the runner (which refuses them in an `execute`).
//!
//! A provider becomes a global of the guest, so its name must be an ASCII JavaScript
//! identifier that is neither a reserved word nor a global of the guest's surface (which it
//! would shadow, or, for `undefined`, `NaN` and `Infinity`, fail to replace).

/// Reserved words of JavaScript (strict mode included), the literals and `await`, and
/// `arguments`, which a function body cannot rebind.
pub const RESERVED_WORDS: &[&str] = &[
    "arguments",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

/// The globals of the guest's surface: the ECMAScript intrinsics of the sandbox and `console`
/// (ARCHITECTURE.md lists them, and a runner test pins the list).
pub const GUEST_GLOBALS: &[&str] = &[
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "AsyncDisposableStack",
    "Atomics",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DOMException",
    "DataView",
    "Date",
    "DisposableStack",
    "Error",
    "EvalError",
    "FinalizationRegistry",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "Function",
    "Infinity",
    "Int16Array",
    "Int32Array",
    "Int8Array",
    "InternalError",
    "Iterator",
    "JSON",
    "Map",
    "Math",
    "NaN",
    "Number",
    "Object",
    "Promise",
    "Proxy",
    "RangeError",
    "ReferenceError",
    "Reflect",
    "RegExp",
    "Set",
    "SharedArrayBuffer",
    "String",
    "SuppressedError",
    "Symbol",
    "SyntaxError",
    "TypeError",
    "URIError",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakRef",
    "WeakSet",
    "atob",
    "btoa",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "eval",
    "globalThis",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "performance",
    "queueMicrotask",
    "undefined",
    "unescape",
    "console",
];

/// Whether `word` is in [`RESERVED_WORDS`].
pub fn is_reserved_word(word: &str) -> bool {
    RESERVED_WORDS.contains(&word)
}

/// Whether `c` may continue an ASCII identifier.
pub fn is_identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Whether `name` is an ASCII JavaScript identifier: letters, digits, `_` and `$`, not
/// starting with a digit, not empty. Reserved words pass this check; see
/// [`is_reserved_word`].
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(is_identifier_char)
}

/// Checks that `name` can be a provider namespace; `Err` says why not and what to do.
pub fn check_provider_name(name: &str) -> Result<(), String> {
    const RULE: &str = "must be a JavaScript identifier (letters, digits, _ and $, not starting \
                        with a digit)";
    if name.is_empty() {
        return Err(format!("{RULE}, got an empty name"));
    }
    if let Some(bad) = name.chars().find(|c| !is_identifier_char(*c)) {
        return Err(format!("{RULE}: {bad:?} is not allowed in {name:?}"));
    }
    if !is_identifier(name) {
        return Err(format!("{RULE}: {name:?} starts with a digit"));
    }
    if is_reserved_word(name) || GUEST_GLOBALS.contains(&name) {
        return Err(format!(
            "{name:?} is a global or reserved word the guest needs; give the provider another \
             name"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names() {
        for ok in ["tools", "docs", "_x", "$", "github2"] {
            assert_eq!(check_provider_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a b", "1x", "a-b", "é"] {
            let why = check_provider_name(bad).unwrap_err();
            assert!(
                why.starts_with("must be a JavaScript identifier"),
                "{bad}: {why}"
            );
        }
        for bad in [
            "console",
            "Object",
            "undefined",
            "NaN",
            "class",
            "arguments",
            "globalThis",
        ] {
            let why = check_provider_name(bad).unwrap_err();
            assert!(why.contains("is a global or reserved word"), "{bad}: {why}");
        }
    }
}
