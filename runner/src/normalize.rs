//! Code normalisation: turns a guest program into the source of an async arrow function.
//!
//! Guest programs are written by language models and are treated as the *body* of an async
//! function, so top-level `await` and `return` are legal. To give programs an implicit result,
//! the value of a trailing expression statement is returned. Without a JavaScript parser we
//! use a small lexer plus a conservative top-level statement splitter; whenever the splitter
//! is unsure it falls back to the plain wrap, and the engine compile-checks the spliced form.

/// Result of [`normalize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// Preferred source: e.g. `async () => {\nconst x = 1;\nreturn (x + 1\n)\n}`.
    pub primary: String,
    /// Fallback if `primary` does not compile: the whole (fence-stripped) program wrapped
    /// as `async () => {\n<src>\n}`. `None` when primary already is that plain wrap.
    pub fallback: Option<String>,
}

/// Normalises guest code into the source text of an async arrow function.
pub fn normalize(code: &str) -> Normalized {
    let mut source = strip_code_fence(code.trim()).trim();
    if source.starts_with("#!") {
        source = source.split_once('\n').map_or("", |(_, rest)| rest).trim();
    }
    let Some(mut toks) = lex(source) else {
        return plain(source);
    };
    // `export default <x>` → normalise `<x>` (iteratively, so hostile input cannot recurse).
    let mut skip = 0;
    while skip + 2 < toks.len() && text(source, &toks, skip) == "export" && text(source, &toks, skip + 1) == "default" {
        skip += 2;
    }
    if skip > 0 {
        source = source[toks[skip].start..].trim();
        match lex(source) {
            Some(t) => toks = t,
            None => return plain(source),
        }
    }
    if source.is_empty() {
        return Normalized { primary: "async () => {}".to_owned(), fallback: None };
    }
    let Some(stmts) = split(source, &toks) else {
        return plain(source);
    };
    let Some(last) = stmts.last() else {
        return plain(source);
    };
    let wrap = plain(source).primary;
    let span = |a: usize, b: usize| &source[toks[a].start..toks[b].end];
    if stmts.len() == 1 {
        if last.kind == StmtKind::Expr && is_async_arrow(source, &toks, last.start, last.end) {
            return Normalized { primary: span(last.start, last.end).to_owned(), fallback: Some(wrap) };
        }
        if let Some(name) = function_decl_name(source, &toks, last) {
            let primary = format!("async () => {{\n{source}\nreturn {name}();\n}}");
            return Normalized { primary, fallback: Some(wrap) };
        }
    }
    if last.kind != StmtKind::Expr {
        return plain(source);
    }
    let before = &source[..toks[last.start].start];
    let expr = span(last.start, last.end);
    Normalized { primary: format!("async () => {{\n{before}return ({expr}\n)\n}}"), fallback: Some(wrap) }
}

/// Strips a surrounding Markdown code fence (with optional language tag), then trims.
pub fn strip_code_fence(code: &str) -> &str {
    let Some(rest) = code.strip_prefix("```") else {
        return code;
    };
    let body = rest.split_once('\n').map_or("", |(_, body)| body);
    let body = body.trim_end();
    body.strip_suffix("```").unwrap_or(body).trim()
}

/// The plain wrap `async () => {\n<source>\n}` (or `async () => {}` for empty source).
fn plain(source: &str) -> Normalized {
    let primary =
        if source.is_empty() { "async () => {}".to_owned() } else { format!("async () => {{\n{source}\n}}") };
    Normalized { primary, fallback: None }
}

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

/// Token categories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Num,
    Str,
    Regex,
    Punct,
    /// A whole template without substitutions (starts with `` ` ``) or a tail `` }...` ``.
    TemplateEnd,
    /// `` `...${ ``: opens a substitution.
    TemplateHead,
    /// `}...${`: closes one substitution and opens the next.
    TemplateMid,
}

/// One token: its kind, byte span, and whether a line terminator precedes it.
#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
    nl: bool,
}

/// An open bracket on the lexer stack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    /// `(`; `true` when it is the head of `if`/`while`/`for`/`with` (a regex may follow `)`).
    Paren(bool),
    Bracket,
    Brace,
    /// A template `${` substitution.
    Subst,
}

/// Keywords after which a `/` starts a regular expression.
const REGEX_AFTER: &[&str] = &[
    "return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void", "throw", "instanceof", "yield",
    "await",
];

/// Multi-character punctuators, longest first.
const PUNCTS: &[&str] = &[
    ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=", "=>", "==", "!=", "<=", ">=", "&&",
    "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "<<", ">>",
];

/// Source text of token `i` (empty when out of range).
fn text<'a>(src: &'a str, toks: &[Token], i: usize) -> &'a str {
    toks.get(i).and_then(|t| src.get(t.start..t.end)).unwrap_or("")
}

/// Length of the line terminator at `pos` (`\n`, `\r`, U+2028, U+2029), or 0.
fn line_term(b: &[u8], pos: usize) -> usize {
    match b.get(pos..).unwrap_or_default() {
        [b'\n' | b'\r', ..] => 1,
        [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
        _ => 0,
    }
}

/// Whether `c` may continue an identifier (non-ASCII characters are accepted liberally).
fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '$' || c == '_' || c == '\\' || (!c.is_ascii() && !c.is_whitespace())
}

/// Tokenises `src`; `None` on unterminated literals/comments or unbalanced brackets.
/// Runs in linear time: every step advances `pos`.
fn lex(src: &str) -> Option<Vec<Token>> {
    let b = src.as_bytes();
    let mut toks: Vec<Token> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut pos = 0;
    let mut ctrl_close = false;
    loop {
        // Whitespace and comments.
        let mut nl = false;
        while pos < b.len() {
            let lt = line_term(b, pos);
            if lt > 0 {
                nl = true;
                pos += lt;
            } else if b[pos..].starts_with(b"//") {
                while pos < b.len() && line_term(b, pos) == 0 {
                    pos += 1;
                }
            } else if b[pos..].starts_with(b"/*") {
                let len = src.get(pos + 2..)?.find("*/")?;
                nl |= (pos..pos + 2 + len).any(|p| line_term(b, p) > 0);
                pos += len + 4;
            } else {
                let c = src.get(pos..)?.chars().next()?;
                if !(c.is_whitespace() || c == '\u{feff}') {
                    break;
                }
                pos += c.len_utf8();
            }
        }
        if pos >= b.len() {
            break;
        }
        let start = pos;
        let c = src.get(pos..)?.chars().next()?;
        let prev = toks.last().map(|t| (t.kind, text(src, &toks, toks.len() - 1)));
        let prev_dot = toks.len() >= 2 && matches!(text(src, &toks, toks.len() - 2), "." | "?.");
        let regex_ok = match prev {
            None => true,
            Some((Kind::Num | Kind::Str | Kind::Regex | Kind::TemplateEnd, _)) => false,
            Some((Kind::TemplateHead | Kind::TemplateMid, _)) => true,
            Some((Kind::Ident, w)) => !prev_dot && REGEX_AFTER.contains(&w),
            Some((Kind::Punct, p)) => match p {
                ")" => ctrl_close,
                "]" | "++" | "--" => false,
                _ => true,
            },
        };
        let next = b.get(pos + 1).copied().unwrap_or(0);
        let kind = if c == '"' || c == '\'' {
            pos += 1;
            loop {
                match *b.get(pos)? {
                    q if q == c as u8 => break,
                    b'\\' => pos += if b.get(pos + 1..pos + 3) == Some(b"\r\n") { 3 } else { 2 },
                    b'\n' | b'\r' => return None,
                    _ => pos += 1,
                }
            }
            pos += 1;
            Kind::Str
        } else if c == '`' {
            pos += 1;
            scan_template(b, &mut pos, &mut stack, true)?
        } else if c.is_ascii_digit() || (c == '.' && next.is_ascii_digit()) {
            let radix = c == '0' && matches!(next | 0x20, b'x' | b'b' | b'o');
            while let Some(&d) = b.get(pos) {
                let exp_sign = !radix && matches!(d, b'+' | b'-') && matches!(b[pos - 1], b'e' | b'E');
                if !(d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || exp_sign) {
                    break;
                }
                pos += 1;
            }
            Kind::Num
        } else if c == '/' && regex_ok {
            pos += 1;
            let mut class = false;
            loop {
                if line_term(b, pos) > 0 {
                    return None;
                }
                match *b.get(pos)? {
                    b'\\' => pos += 1,
                    b'[' => class = true,
                    b']' => class = false,
                    b'/' if !class => break,
                    _ => {}
                }
                pos += 1;
            }
            pos += 1;
            while let Some(ch) = src.get(pos..).and_then(|s| s.chars().next()).filter(|&ch| ident_char(ch)) {
                pos += ch.len_utf8();
            }
            Kind::Regex
        } else if ident_char(c) || (c == '#' && (next.is_ascii_alphabetic() || matches!(next, b'_' | b'$' | 0x80..))) {
            pos += c.len_utf8();
            while let Some(ch) = src.get(pos..).and_then(|s| s.chars().next()).filter(|&ch| ident_char(ch)) {
                pos += ch.len_utf8();
                if ch == '\\' && b.get(pos..pos + 2) == Some(b"u{") {
                    pos += src.get(pos..)?.find('}')? + 1;
                }
            }
            Kind::Ident
        } else {
            let p = PUNCTS
                .iter()
                .find(|p| src[pos..].starts_with(**p) && !(**p == "?." && b.get(pos + 2).is_some_and(u8::is_ascii_digit)))
                .map_or(c.len_utf8(), |p| p.len());
            pos += p;
            match c {
                '(' => {
                    let ctrl = !prev_dot && matches!(prev, Some((Kind::Ident, "if" | "while" | "for" | "with")));
                    stack.push(Open::Paren(ctrl));
                }
                '[' => stack.push(Open::Bracket),
                '{' => stack.push(Open::Brace),
                ')' => match stack.pop()? {
                    Open::Paren(ctrl) => ctrl_close = ctrl,
                    _ => return None,
                },
                ']' => (stack.pop()? == Open::Bracket).then_some(())?,
                '}' => match stack.pop()? {
                    Open::Brace => {}
                    Open::Subst => {
                        pos = start + 1;
                        let kind = scan_template(b, &mut pos, &mut stack, false)?;
                        toks.push(Token { kind, start, end: pos, nl });
                        continue;
                    }
                    _ => return None,
                },
                _ => {}
            }
            Kind::Punct
        };
        toks.push(Token { kind, start, end: pos, nl });
    }
    stack.is_empty().then_some(toks)
}

/// Scans template characters from `pos` up to and including the closing `` ` `` or `${`.
fn scan_template(b: &[u8], pos: &mut usize, stack: &mut Vec<Open>, head: bool) -> Option<Kind> {
    loop {
        match *b.get(*pos)? {
            b'`' => {
                *pos += 1;
                return Some(Kind::TemplateEnd);
            }
            b'$' if b.get(*pos + 1) == Some(&b'{') => {
                *pos += 2;
                stack.push(Open::Subst);
                return Some(if head { Kind::TemplateHead } else { Kind::TemplateMid });
            }
            b'\\' => *pos += 2,
            _ => *pos += 1,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statement splitter
// ---------------------------------------------------------------------------------------------

/// Whether a top-level statement is an expression statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StmtKind {
    Expr,
    Other,
}

/// A top-level statement: first token, last token (excluding a terminating `;`), kind.
#[derive(Clone, Copy, Debug)]
struct Stmt {
    start: usize,
    end: usize,
    kind: StmtKind,
}

/// Where the splitter is within the current top-level statement (at bracket depth 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No statement in progress; the next token starts one (or continues via `else` etc.).
    Between,
    /// A (sub-)statement is about to begin: after `if (...)`, `else`, `do`, a label, ...
    Head,
    /// After `if`/`while`/`for`/`with`/`switch`/`catch`: the next `(` is its head.
    /// `true` for the `while` of a do-while, whose head ends the statement.
    AwaitParen(bool),
    /// In a simple statement, ended by `;` or automatic semicolon insertion.
    Simple,
    /// In a function/class declaration before its body.
    DeclBody,
}

/// Role of a bracket opened at depth 0, applied when it closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Plain,
    /// Control head followed by a sub-statement.
    HeadSub,
    /// Control head ending the statement (do-while).
    HeadEnd,
    /// Block statement or declaration body: closing it ends the statement.
    Block,
}

/// Reserved words (identifiers that cannot end an expression).
const RESERVED: &[&str] = &[
    "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do", "else",
    "enum", "export", "extends", "finally", "for", "function", "if", "import", "in", "instanceof", "let", "new",
    "return", "switch", "throw", "try", "typeof", "var", "void", "while", "with", "yield",
];

/// Keywords starting a statement that is not an expression statement.
const NON_EXPR: &[&str] = &[
    "const", "let", "var", "function", "class", "if", "for", "while", "do", "try", "switch", "return", "throw",
    "break", "continue", "export", "with", "debugger", "else", "catch", "finally", "case", "default",
];

/// Token inspection helpers for the splitter.
struct Toks<'a> {
    src: &'a str,
    toks: &'a [Token],
}

impl Toks<'_> {
    fn text(&self, i: usize) -> &str {
        text(self.src, self.toks, i)
    }
    fn is_punct(&self, i: usize, p: &str) -> bool {
        self.toks.get(i).is_some_and(|t| t.kind == Kind::Punct) && self.text(i) == p
    }
    /// Token `i` as a keyword/identifier word, or `""` (also for property names after `.`).
    fn word(&self, i: usize) -> &str {
        let property = i > 0 && (self.is_punct(i - 1, ".") || self.is_punct(i - 1, "?."));
        match self.toks.get(i) {
            Some(t) if t.kind == Kind::Ident && !property => self.text(i),
            _ => "",
        }
    }
    fn is_opener(&self, i: usize) -> bool {
        self.toks[i].kind == Kind::TemplateHead || ["(", "[", "{"].iter().any(|p| self.is_punct(i, p))
    }
    fn is_closer(&self, i: usize) -> bool {
        (self.toks[i].kind == Kind::TemplateEnd && self.text(i).starts_with('}'))
            || [")", "]", "}"].iter().any(|p| self.is_punct(i, p))
    }
    /// Whether token `i` can be the last token of an expression.
    fn can_end(&self, i: usize, allow_postfix: bool) -> bool {
        let t = self.toks[i];
        match t.kind {
            Kind::Num | Kind::Str | Kind::Regex | Kind::TemplateEnd => true,
            Kind::TemplateHead | Kind::TemplateMid => false,
            Kind::Ident => !RESERVED.contains(&self.word(i)),
            Kind::Punct => match self.text(i) {
                ")" | "]" | "}" => true,
                "++" | "--" => allow_postfix && i > 0 && !t.nl && self.can_end(i - 1, false),
                _ => false,
            },
        }
    }
    /// Whether token `i`, at the start of a line, may continue the previous expression.
    /// Errs towards `true`: not splitting is always safe (it fails to compile instead).
    fn continues(&self, i: usize) -> bool {
        match self.toks[i].kind {
            Kind::Punct => !matches!(self.text(i), "{" | "!" | "~" | "++" | "--"),
            Kind::TemplateEnd | Kind::TemplateHead => true,
            Kind::Ident => matches!(self.word(i), "in" | "instanceof"),
            _ => false,
        }
    }
    /// Whether a line break before token `i` ends the current simple statement.
    fn asi(&self, i: usize) -> bool {
        matches!(self.word(i - 1), "return" | "break" | "continue" | "throw")
            || (self.can_end(i - 1, true) && !self.continues(i))
    }
    fn classify(&self, i: usize) -> StmtKind {
        let w = self.word(i);
        let other = self.is_punct(i, "{")
            || self.is_punct(i, ";")
            || NON_EXPR.contains(&w)
            || (w == "import" && !(self.is_punct(i + 1, "(") || self.is_punct(i + 1, ".")))
            || (w == "async" && self.word(i + 1) == "function" && !self.toks.get(i + 1).is_some_and(|t| t.nl))
            || (!w.is_empty() && !RESERVED.contains(&w) && self.is_punct(i + 1, ":"));
        if other {
            StmtKind::Other
        } else {
            StmtKind::Expr
        }
    }
}

/// Splits a token stream into top-level statements; `None` when unsure.
fn split(src: &str, toks: &[Token]) -> Option<Vec<Stmt>> {
    let tk = Toks { src, toks };
    let mut stmts: Vec<Stmt> = Vec::new();
    let mut stack: Vec<Role> = Vec::new();
    let mut phase = Phase::Between;
    let mut do_pending = 0usize;
    let mut fn_pending = false;
    let mut block_close = None;
    let mut i = 0;
    while i < toks.len() {
        // The lexer guesses "regex" after `}`; that is only right after a block.
        if toks[i].kind == Kind::Regex && i > 0 && tk.is_punct(i - 1, "}") && block_close != Some(i - 1) {
            return None;
        }
        if !stack.is_empty() {
            if let Some(s) = stmts.last_mut() {
                s.end = i;
            }
            if tk.is_opener(i) {
                stack.push(Role::Plain);
            } else if tk.is_closer(i) {
                let role = stack.pop()?;
                if stack.is_empty() {
                    match role {
                        Role::HeadSub => phase = Phase::Head,
                        Role::HeadEnd => phase = Phase::Between,
                        Role::Block => {
                            phase = Phase::Between;
                            block_close = Some(i);
                        }
                        Role::Plain => {}
                    }
                }
            }
            i += 1;
            continue;
        }
        let w = tk.word(i);
        if matches!(phase, Phase::Between | Phase::Simple) && !stmts.is_empty() {
            let cont = match w {
                "else" | "finally" => Some(Phase::Head),
                "catch" => Some(Phase::AwaitParen(false)),
                "while" if do_pending > 0 => {
                    do_pending -= 1;
                    Some(Phase::AwaitParen(true))
                }
                _ => None,
            };
            if let Some(p) = cont {
                phase = p;
                if let Some(s) = stmts.last_mut() {
                    s.end = i;
                }
                i += 1;
                continue;
            }
        }
        if phase == Phase::Simple && toks[i].nl && !fn_pending && tk.asi(i) {
            phase = Phase::Between;
        }
        if phase == Phase::Between {
            fn_pending = false;
            do_pending = 0;
            stmts.push(Stmt { start: i, end: i, kind: tk.classify(i) });
            phase = Phase::Head;
        }
        let semi = tk.is_punct(i, ";");
        if let Some(s) = stmts.last_mut() {
            if !(semi && phase == Phase::Simple) {
                s.end = i;
            }
        }
        if phase == Phase::Head {
            match w {
                _ if tk.is_punct(i, "{") => stack.push(Role::Block),
                _ if semi => phase = Phase::Between,
                "if" | "for" | "while" | "with" | "switch" | "catch" => phase = Phase::AwaitParen(false),
                "do" => do_pending += 1,
                "else" | "try" | "finally" => {}
                "function" | "class" => phase = Phase::DeclBody,
                "async" if tk.word(i + 1) == "function" && !toks[i + 1].nl => phase = Phase::DeclBody,
                _ if !w.is_empty() && !RESERVED.contains(&w) && tk.is_punct(i + 1, ":") => {
                    i += 1;
                    if let Some(s) = stmts.last_mut() {
                        s.end = i;
                    }
                }
                _ => phase = Phase::Simple,
            }
        } else if let Phase::AwaitParen(end) = phase {
            if tk.is_punct(i, "(") {
                stack.push(if end { Role::HeadEnd } else { Role::HeadSub });
            } else if tk.is_punct(i, "{") {
                stack.push(Role::Block);
            } else if w != "await" {
                phase = Phase::Simple;
            }
        } else if phase == Phase::DeclBody && tk.is_opener(i) {
            stack.push(if tk.is_punct(i, "{") { Role::Block } else { Role::Plain });
        }
        if phase == Phase::Simple {
            if semi {
                phase = Phase::Between;
            } else if matches!(w, "function" | "class") {
                fn_pending = true;
            } else if tk.is_opener(i) {
                fn_pending &= !tk.is_punct(i, "{");
                stack.push(Role::Plain);
            }
        }
        i += 1;
    }
    matches!(phase, Phase::Between | Phase::Simple).then_some(stmts)
}

/// Whether tokens `start..=end` form exactly one async arrow function (maybe parenthesised).
fn is_async_arrow(src: &str, toks: &[Token], mut start: usize, mut end: usize) -> bool {
    let tk = Toks { src, toks };
    let pairs = pair_indices(&tk, start, end);
    let partner = |i: usize| pairs.binary_search_by_key(&i, |p| p.0).ok().map(|k| pairs[k].1);
    while tk.is_punct(start, "(") && partner(start) == Some(end) && start + 1 < end {
        start += 1;
        end -= 1;
    }
    if tk.word(start) != "async" {
        return false;
    }
    let arrow = match toks.get(start + 1) {
        Some(t) if t.kind == Kind::Ident && tk.is_punct(start + 2, "=>") => start + 2,
        Some(_) if tk.is_punct(start + 1, "(") => match partner(start + 1) {
            Some(close) if tk.is_punct(close + 1, "=>") => close + 1,
            _ => return false,
        },
        _ => return false,
    };
    if tk.is_punct(arrow + 1, "{") {
        return partner(arrow + 1) == Some(end);
    }
    // An expression body extends to the end unless a top-level comma follows it.
    let mut j = arrow + 1;
    while j <= end {
        if tk.is_punct(j, ",") {
            return false;
        }
        j = if tk.is_opener(j) { partner(j).unwrap_or(end) + 1 } else { j + 1 };
    }
    j == end + 1
}

/// Sorted (opener, closer) token index pairs within `start..=end`.
fn pair_indices(tk: &Toks<'_>, start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut open = Vec::new();
    let mut pairs = Vec::new();
    for i in start..=end.min(tk.toks.len().saturating_sub(1)) {
        if tk.is_opener(i) {
            open.push(i);
        } else if tk.is_closer(i) {
            if let Some(o) = open.pop() {
                pairs.push((o, i));
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

/// The name of a single named function declaration spanning the whole statement.
fn function_decl_name<'a>(src: &'a str, toks: &[Token], stmt: &Stmt) -> Option<&'a str> {
    let tk = Toks { src, toks };
    let mut i = stmt.start;
    if tk.word(i) == "async" {
        i += 1;
    }
    if tk.word(i) != "function" || !tk.is_punct(stmt.end, "}") || stmt.end + 1 != toks.len() {
        return None;
    }
    i += 1;
    if tk.is_punct(i, "*") {
        i += 1;
    }
    (toks.get(i)?.kind == Kind::Ident).then(|| text(src, toks, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spliced form for `before` + `return (expr\n)`.
    fn spliced(before: &str, expr: &str) -> String {
        format!("async () => {{\n{before}return ({expr}\n)\n}}")
    }

    fn wrap(src: &str) -> String {
        format!("async () => {{\n{src}\n}}")
    }

    /// Asserts that `code` splices into `before` + `return (expr)` with the plain fallback.
    fn assert_splice(code: &str, before: &str, expr: &str) {
        let n = normalize(code);
        assert_eq!(n.primary, spliced(before, expr), "code: {code:?}");
        assert_eq!(n.fallback, Some(wrap(code.trim())), "code: {code:?}");
    }

    /// Asserts that `code` gets the plain wrap only.
    fn assert_plain(code: &str) {
        let n = normalize(code);
        assert_eq!(n.primary, wrap(code.trim()), "code: {code:?}");
        assert_eq!(n.fallback, None, "code: {code:?}");
    }

    #[test]
    fn reference_suite() {
        assert!(normalize("```js\n1 + 1\n```").primary.contains("return (1 + 1"));
        assert!(normalize("1 + 1").primary.contains("return (1 + 1"));
        assert_eq!(normalize("async () => 1").primary, "async () => 1");
        let n = normalize("const x = 1;\nx + 1").primary;
        assert!(n.contains("const x = 1;") && n.contains("return (x + 1"));
        assert_eq!(n, "async () => {\nconst x = 1;\nreturn (x + 1\n)\n}");
        let n = normalize("function run() { return 1; }").primary;
        assert!(n.contains("function run() { return 1; }") && n.contains("return run();"));
    }

    #[test]
    fn fences() {
        assert_eq!(strip_code_fence("```js\n1 + 1\n```"), "1 + 1");
        assert_eq!(strip_code_fence("```javascript\nx\n```"), "x");
        assert_eq!(strip_code_fence("```\nx"), "x");
        assert_eq!(strip_code_fence("1 + 1"), "1 + 1");
        assert_eq!(normalize("  ```ts\nfoo()\n```  ").fallback, Some(wrap("foo()")));
    }

    #[test]
    fn empty_programs() {
        for code in ["", "   \n\t ", "```js\n```"] {
            assert_eq!(normalize(code), Normalized { primary: "async () => {}".into(), fallback: None });
        }
        assert_plain("// only a comment");
    }

    #[test]
    fn async_arrows_pass_through() {
        for code in ["async x => x", "async (a, b) => { return a + b; }", "(async () => 1)", "async () => 1;"] {
            let n = normalize(code);
            assert_eq!(n.primary, code.trim_end_matches(';'));
            assert_eq!(n.fallback, Some(wrap(code)));
        }
        assert_splice("async () => 1, 2", "", "async () => 1, 2");
        assert_splice("async () => {}\n.x", "", "async () => {}\n.x");
        assert_eq!(normalize("export default async () => 1").primary, "async () => 1");
    }

    #[test]
    fn sync_arrows_are_values() {
        assert_splice("(() => 1)", "", "(() => 1)");
        assert_splice("() => 1", "", "() => 1");
    }

    #[test]
    fn function_declarations() {
        let n = normalize("async function main() {\n  return await f();\n}");
        assert_eq!(n.primary, "async () => {\nasync function main() {\n  return await f();\n}\nreturn main();\n}");
        assert!(normalize("function* gen() { yield 1 }").primary.ends_with("return gen();\n}"));
        assert!(normalize("export default function go() {}").primary.ends_with("return go();\n}"));
        assert_splice("function f() {}\nf()", "function f() {}\n", "f()");
        assert_plain("function f() {};");
        assert_plain("class A {}");
    }

    #[test]
    fn expressions() {
        assert_splice("(await mcp.add({ x: 2 })).sum", "", "(await mcp.add({ x: 2 })).sum");
        assert_splice("({ a: typeof Buffer })", "", "({ a: typeof Buffer })");
        assert_splice("\"use strict\"; 1", "\"use strict\"; ", "1");
        assert_splice("a / b / c", "", "a / b / c");
        assert_splice("x = 1\n++y", "x = 1\n", "++y");
        assert_splice("await Promise.all([a(), b()]);", "", "await Promise.all([a(), b()])");
        assert_splice("x?.y ?? z", "", "x?.y ?? z");
        assert_splice("import('x')", "", "import('x')");
    }

    #[test]
    fn asi() {
        assert_splice("let a = 1\nlet b = 2\na + b", "let a = 1\nlet b = 2\n", "a + b");
        assert_splice("fetch(u)\n  .then(r => r.json())", "", "fetch(u)\n  .then(r => r.json())");
        assert_splice("const a = 1\nconst b = a\n  + 2\nb", "const a = 1\nconst b = a\n  + 2\n", "b");
        assert_splice("a\n(b)", "", "a\n(b)");
        assert_splice("a\n[0]", "", "a\n[0]");
        assert_splice("a\n`t`", "", "a\n`t`");
        assert_splice("const f = function () { return 1 }\nf()", "const f = function () { return 1 }\n", "f()");
        assert_splice("const f = function ()\n{ return 1 }\nf()", "const f = function ()\n{ return 1 }\n", "f()");
        assert_splice("x = {a:1}\nx.a", "x = {a:1}\n", "x.a");
        assert_splice("const g = () => {\n  return 2\n}\ng()", "const g = () => {\n  return 2\n}\n", "g()");
        assert_splice("let\nx = 1\nx", "let\nx = 1\n", "x");
        assert_splice("a.return\n(b)", "", "a.return\n(b)");
    }

    #[test]
    fn literals_hide_delimiters() {
        assert_splice("`a;b}\n${ {a:1}.a }c`", "", "`a;b}\n${ {a:1}.a }c`");
        assert_splice("`x${`y${1}`}`;\n`${'}'}`", "`x${`y${1}`}`;\n", "`${'}'}`");
        assert_splice("const s = 'a // b; c'\ns + \"//;\"", "const s = 'a // b; c'\n", "s + \"//;\"");
        let code = "const r = /[/;}]+/g; \"a;b\".split(r).length";
        assert_splice(code, "const r = /[/;}]+/g; ", "\"a;b\".split(r).length");
        assert_splice("if (x) /;/.test(s)\n1", "if (x) /;/.test(s)\n", "1");
        assert_splice("const n = [1_000, 0x1F, 1e5, .5, 10n, 1e-3]\nn", "const n = [1_000, 0x1F, 1e5, .5, 10n, 1e-3]\n", "n");
        assert_splice("const ü = '😀'; ü + `é`", "const ü = '😀'; ", "ü + `é`");
        assert_splice("class A { #p = 1; get p() { return this.#p } }\nnew A().p", "class A { #p = 1; get p() { return this.#p } }\n", "new A().p");
    }

    #[test]
    fn comments() {
        assert_splice("x + 1 // trailing", "", "x + 1");
        assert_splice("x + 1 /* c */", "", "x + 1");
        assert_splice("a(); // c\n/* d */ b() // e", "a(); // c\n/* d */ ", "b()");
        let n = normalize("#!/usr/bin/env node\n1");
        assert_eq!((n.primary, n.fallback), (spliced("", "1"), Some(wrap("1"))));
        assert_splice("a\n// c\n.b", "", "a\n// c\n.b");
    }

    #[test]
    fn statements_are_plain() {
        assert_plain("if (a) {\n  b()\n} else {\n  c()\n}");
        assert_plain("if (a) b(); else if (c) d(); else e()");
        assert_plain("for (let i = 0; i < 3; i++) { s += i }");
        assert_plain("for await (const x of xs) log(x)");
        assert_plain("while (x)\n  x--");
        assert_plain("do { x++ } while (x < 3)");
        assert_plain("try { a() } catch (e) { b() } finally { c() }");
        assert_plain("try { a() } catch { b() }");
        assert_plain("return 5");
        assert_plain("const x = 1");
        assert_plain("outer: for (;;) { break outer }");
        assert_plain("{ a: 1 }");
        assert_plain("1;;");
        assert_plain("if (x)\n  foo()");
        assert_plain("switch (x) { case 1: y() }");
    }

    #[test]
    fn statements_then_expression() {
        assert_splice("if (a) return 1; 2", "if (a) return 1; ", "2");
        assert_splice("if (a) { b() }\nc", "if (a) { b() }\n", "c");
        assert_splice("if (a) b()\nelse c()\nd", "if (a) b()\nelse c()\n", "d");
        assert_splice("try { a() } catch (e) {}\nb", "try { a() } catch (e) {}\n", "b");
        assert_splice("do x++; while (x < 3)\nx", "do x++; while (x < 3)\n", "x");
        assert_splice("lbl: { break lbl }\n1", "lbl: { break lbl }\n", "1");
        assert_splice("for (;;) break\nx", "for (;;) break\n", "x");
        assert_splice("x = 1\nreturn\nx", "x = 1\nreturn\n", "x");
        assert_splice("{ a() }\n+1", "{ a() }\n", "+1");
    }

    #[test]
    fn unsure_or_invalid_is_plain() {
        for code in [
            "}); process.exit(1); (async () => {",
            "'unterminated",
            "`unterminated ${",
            "/* open",
            "x = /open",
            "(((",
            "x = {a: 1}\n/re/g.test(s)",
            "if (x)",
            "export default",
        ] {
            assert_plain(code);
        }
    }

    #[test]
    fn fuzz_never_panics() {
        let alphabet: Vec<char> = "abc xyz(){}[];,.:?=+-*/%!<>&|^~`'\"\\$#@\n\r\t0123456789_ eé😀\u{2028}"
            .chars()
            .chain(["if", "else", "return", "function", "async", "=>", "${", "//", "/*", "*/"].concat().chars())
            .collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..10_000 {
            let len = (next() % 40) as usize;
            let s: String = (0..len)
                .map(|_| match next() % 8 {
                    0 => char::from_u32((next() % 0x3000) as u32).unwrap_or('x'),
                    _ => alphabet[(next() % alphabet.len() as u64) as usize],
                })
                .collect();
            let n = normalize(&s);
            assert!(n.primary.starts_with("async"), "{s:?}");
        }
    }

    #[test]
    fn adversarial_inputs_are_fast() {
        let n = 100_000;
        for code in [
            "(".repeat(n) + "async () => 1" + &")".repeat(n),
            "`${".repeat(n) + &"}`".repeat(n),
            "export default ".repeat(n) + "1",
            "{".repeat(n),
            "a\n".repeat(n),
            "/".repeat(n),
        ] {
            let start = std::time::Instant::now();
            assert!(!normalize(&code).primary.is_empty());
            assert!(start.elapsed().as_secs() < 2, "slow on {:?}...", &code[..20]);
        }
    }
}
