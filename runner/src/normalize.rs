//! Code normalisation: turns a guest program into the source of an async arrow function.
//!
//! Guest programs are function *bodies* (top-level `await` and `return` are legal), and the
//! value of a trailing expression statement is returned. With no JavaScript parser at hand,
//! a small lexer feeds a conservative top-level statement splitter. Whenever the splitter is
//! unsure it produces the plain wrap; the engine also compile-checks the spliced form.

/// Result of [`normalize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Normalized {
    /// Preferred source: e.g. `async () => {const x = 1;\nreturn (x + 1\n)\n}`.
    pub(crate) primary: String,
    /// Fallback if `primary` does not compile: the whole (fence-stripped) program wrapped
    /// as `async () => {<src>\n}`. `None` when primary already is that plain wrap.
    pub(crate) fallback: Option<String>,
    /// Where the program starts in the code as the user wrote it (after the fence).
    pub(crate) origin: Origin,
    /// For `primary`: where `return (` was inserted before the last expression, as the
    /// (line, column) of the expression in the code as the user wrote it.
    pub(crate) splice: Option<(u32, u32)>,
}

/// Where a normalised program's text starts in the code the user wrote. Every wrapper keeps
/// the user's lines: line N of the user's code (after fence stripping) is line N of the
/// compiled text, and only columns on the first line and the spliced line move (see
/// [`Compiled::user_position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Origin {
    /// Lines of the user's code before the program text (blank lines, a shebang line).
    pub(crate) lines: u32,
    /// Characters before the program text on its first line.
    pub(crate) columns: u32,
}

/// A program as the engine compiles it, with what it takes to map positions back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compiled {
    /// The text to evaluate: `origin.lines` newlines, `(`, the function, `\n)`.
    pub(crate) text: String,
    origin: Origin,
    /// Characters of wrapper before the program's first character on its line.
    prefix: u32,
    splice: Option<(u32, u32)>,
}

/// Length of `return (`, inserted before the last expression.
const RETURN_OPEN: u32 = 8;

impl Normalized {
    /// `primary`, or with `fallback` the fallback (when there is one), ready to compile.
    pub(crate) fn compiled(&self, fallback: bool) -> Compiled {
        let use_fallback = fallback && self.fallback.is_some();
        let source = match (&self.fallback, use_fallback) {
            (Some(fallback), true) => fallback.as_str(),
            _ => self.primary.as_str(),
        };
        let wrapper = if source.starts_with(WRAP_OPEN) {
            WRAP_OPEN.len() as u32
        } else {
            0
        };
        let lines = self.origin.lines as usize;
        let mut text = String::with_capacity(lines + source.len() + 3);
        text.extend(std::iter::repeat_n('\n', lines));
        text.push('(');
        text.push_str(source);
        text.push_str("\n)");
        Compiled {
            text,
            origin: self.origin,
            prefix: wrapper + 1,
            splice: if use_fallback { None } else { self.splice },
        }
    }
}

impl Compiled {
    /// The (line, column) in the user's code of a 1-based line and column the engine
    /// reported for [`Compiled::text`].
    pub(crate) fn user_position(&self, line: u32, column: u32) -> (u32, u32) {
        let line = line.max(1);
        let first = self.origin.lines + 1;
        // Undo the wrapper on the first line: user column = text column - prefix + origin.
        let to_user = |l: u32, c: u32| {
            if l == first {
                (c + self.origin.columns).saturating_sub(self.prefix).max(1)
            } else {
                c.max(1)
            }
        };
        let mut column = to_user(line, column);
        if let Some((splice_line, splice_column)) = self.splice {
            // Columns right of the splice moved by `return (`; inside it they are the
            // expression's start.
            if line == splice_line && column >= splice_column {
                column = column.saturating_sub(RETURN_OPEN).max(splice_column);
            }
        }
        (line, column)
    }
}

/// Normalises guest code into the source text of an async arrow function.
pub(crate) fn normalize(code: &str) -> Normalized {
    let body = fence_body(code);
    let mut source = strip_code_fence(code.trim()).trim();
    if source.starts_with("#!") {
        source = source.split_once('\n').map_or("", |(_, rest)| rest).trim();
    }
    let plain = |source: &str| Normalized {
        primary: wrap(source),
        fallback: None,
        origin: origin(code, body, source),
        splice: None,
    };
    let Some(mut toks) = lex(source) else {
        return plain(source);
    };
    // `export default <x>` → normalise `<x>` (a loop, so hostile input cannot recurse deeply).
    let mut skip = 0;
    while skip + 2 < toks.len()
        && text(source, &toks, skip) == "export"
        && text(source, &toks, skip + 1) == "default"
        && text(source, &toks, skip + 2) != ";"
    {
        skip += 2;
    }
    if skip > 0 {
        source = source.get(toks[skip].start..).unwrap_or_default().trim();
        match lex(source) {
            Some(t) => toks = t,
            None => return plain(source),
        }
    }
    let Some(stmts) = split(source, &toks) else {
        return plain(source);
    };
    let Some(last) = stmts.last() else {
        return plain(source);
    };
    let origin = origin(code, body, source);
    let spliced = |primary: String, splice: Option<(u32, u32)>| Normalized {
        primary,
        fallback: Some(wrap(source)),
        origin,
        splice,
    };
    let span = |a: usize, b: usize| source.get(a..b).unwrap_or_default();
    let expr = span(toks[last.start].start, toks[last.end].end);
    if stmts.len() == 1 {
        if last.expr && is_async_arrow(source, &toks, last.start, last.end) {
            return spliced(expr.to_owned(), None);
        }
        if let Some(name) = function_decl_name(source, &toks, last) {
            return spliced(format!("{WRAP_OPEN}{source}\nreturn {name}();\n}}"), None);
        }
    }
    if !last.expr {
        return plain(source);
    }
    let before = span(0, toks[last.start].start);
    // Where the expression starts, in the user's lines and columns.
    let line = origin.lines + 1 + before.matches('\n').count() as u32;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let mut column = before[line_start..].chars().count() as u32 + 1;
    if line == origin.lines + 1 {
        column += origin.columns;
    }
    spliced(
        format!("{WRAP_OPEN}{before}return ({expr}\n)\n}}"),
        Some((line, column)),
    )
}

/// The opening of every wrap; the user's first line follows on the same line.
const WRAP_OPEN: &str = "async () => {";

/// The code as the user wrote it, after a fence: what line numbers count from.
pub(crate) fn fence_body(code: &str) -> &str {
    let trimmed = code.trim_start();
    match trimmed.strip_prefix("```") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, body)| body),
        None => code,
    }
}

/// [`fence_body`] without a closing fence (and what trails it): the program as written, with
/// its lines where they were.
pub(crate) fn fenced_program(code: &str) -> &str {
    let body = fence_body(code);
    if body.len() == code.len() {
        return body;
    }
    let trimmed = body.trim_end();
    trimmed.strip_suffix("```").unwrap_or(trimmed)
}

/// Where `source`, a slice of `code`, starts in `body`, the slice of `code` lines count from.
fn origin(code: &str, body: &str, source: &str) -> Origin {
    let offset = |inner: &str| (inner.as_ptr() as usize).saturating_sub(code.as_ptr() as usize);
    let (from, to) = (offset(body), offset(source));
    let Some(lead) = code.get(from..to.max(from)) else {
        return Origin::default();
    };
    let lines = lead.matches('\n').count() as u32;
    let columns = lead[lead.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count() as u32;
    Origin { lines, columns }
}

/// Strips a surrounding Markdown code fence (with optional language tag), then trims.
pub(crate) fn strip_code_fence(code: &str) -> &str {
    let Some(rest) = code.strip_prefix("```") else {
        return code;
    };
    let body = rest
        .split_once('\n')
        .map_or("", |(_, body)| body)
        .trim_end();
    body.strip_suffix("```").unwrap_or(body).trim()
}

/// The plain wrap `async () => {<source>\n}`, or `async () => {}` for empty source.
fn wrap(source: &str) -> String {
    if source.is_empty() {
        "async () => {}".to_owned()
    } else {
        format!("{WRAP_OPEN}{source}\n}}")
    }
}

/// Whether `word` is one of the space-separated words in `list`.
fn is_in(list: &str, word: &str) -> bool {
    !word.is_empty() && list.split(' ').any(|w| w == word)
}

// ----- Lexer -----

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

/// One token: kind, byte span, whether a line terminator precedes it, and for openers
/// (`(`, `[`, `{`, template head) the index of the matching closer.
#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
    nl: bool,
    pair: Option<usize>,
}

/// An open bracket on the lexer stack: its closing byte (`` ` `` for a template
/// substitution), its opening token's index, and whether it is a control head such as
/// `if (...)`, after which `/` starts a regex.
type Open = (u8, usize, bool);

/// Keywords after which a `/` starts a regular expression.
const REGEX_AFTER: &str =
    "return typeof case do else in of new delete void throw instanceof yield await";

/// Multi-character punctuators, longest first.
const PUNCTS: &[&str] = &[
    ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=", "=>", "==", "!=",
    "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
    "**", "<<", ">>",
];

/// Source text of token `i` (empty when out of range).
fn text<'a>(src: &'a str, toks: &[Token], i: usize) -> &'a str {
    toks.get(i)
        .and_then(|t| src.get(t.start..t.end))
        .unwrap_or("")
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
    c.is_alphanumeric() || matches!(c, '$' | '_' | '\\') || !(c.is_ascii() || c.is_whitespace())
}

/// The character at byte `pos`, if `pos` is a character boundary inside `src`.
fn char_at(src: &str, pos: usize) -> Option<char> {
    src.get(pos..).and_then(|s| s.chars().next())
}

/// Tokenises `src`; `None` on unterminated literals/comments or unbalanced brackets.
/// Linear time: every step advances `pos`.
fn lex(src: &str) -> Option<Vec<Token>> {
    let b = src.as_bytes();
    let mut toks: Vec<Token> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let (mut pos, mut ctrl_close) = (0, false);
    loop {
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
                match char_at(src, pos)? {
                    c if c.is_whitespace() || c == '\u{feff}' => pos += c.len_utf8(),
                    _ => break,
                }
            }
        }
        let (start, i) = (pos, toks.len());
        let Some(c) = char_at(src, pos) else {
            break;
        };
        let prev = toks.last().map(|t| (t.kind, text(src, &toks, i - 1)));
        let prev_dot = i >= 2 && matches!(text(src, &toks, i - 2), "." | "?.");
        let regex_ok = match prev {
            None | Some((Kind::TemplateHead | Kind::TemplateMid, _)) => true,
            Some((Kind::Ident, w)) => !prev_dot && is_in(REGEX_AFTER, w),
            Some((Kind::Punct, ")")) => ctrl_close,
            Some((Kind::Punct, p)) => !matches!(p, "]" | "++" | "--"),
            Some(_) => false,
        };
        let next = b.get(pos + 1).copied().unwrap_or(0);
        pos += c.len_utf8();
        let kind = if c == '"' || c == '\'' {
            loop {
                match *b.get(pos)? {
                    q if q == c as u8 => break,
                    b'\\' if b.get(pos + 1..pos + 3) == Some(b"\r\n") => pos += 3,
                    b'\\' => pos += 2,
                    b'\n' | b'\r' => return None,
                    _ => pos += 1,
                }
            }
            pos += 1;
            Kind::Str
        } else if c == '`' {
            if scan_template(b, &mut pos)? {
                stack.push((b'`', i, false));
                Kind::TemplateHead
            } else {
                Kind::TemplateEnd
            }
        } else if c.is_ascii_digit() || (c == '.' && next.is_ascii_digit()) {
            let radix = c == '0' && matches!(next | 0x20, b'x' | b'b' | b'o');
            while let Some(&d) = b.get(pos) {
                let sign = !radix && matches!(d, b'+' | b'-') && matches!(b[pos - 1], b'e' | b'E');
                if !(d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || sign) {
                    break;
                }
                pos += 1;
            }
            Kind::Num
        } else if c == '/' && regex_ok {
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
            while let Some(f) = char_at(src, pos).filter(|&f| ident_char(f)) {
                pos += f.len_utf8();
            }
            Kind::Regex
        } else if ident_char(c) || (c == '#' && char_at(src, pos).is_some_and(ident_char)) {
            let mut ch = c;
            loop {
                if ch == '\\' && b.get(pos..pos + 2) == Some(b"u{") {
                    pos += src.get(pos..)?.find('}')? + 1;
                }
                match char_at(src, pos).filter(|&n| ident_char(n)) {
                    Some(n) => (ch, pos) = (n, pos + n.len_utf8()),
                    None => break,
                }
            }
            Kind::Ident
        } else {
            let digit_after = b.get(start + 2).is_some_and(u8::is_ascii_digit);
            pos = start
                + PUNCTS
                    .iter()
                    .find(|p| b[start..].starts_with(p.as_bytes()) && !(**p == "?." && digit_after))
                    .map_or(c.len_utf8(), |p| p.len());
            match c {
                '(' | '[' | '{' => {
                    let close = match c {
                        '(' => b')',
                        '[' => b']',
                        _ => b'}',
                    };
                    let ctrl = !prev_dot
                        && matches!(prev, Some((Kind::Ident, "if" | "while" | "for" | "with")));
                    stack.push((close, i, c == '(' && ctrl));
                    Kind::Punct
                }
                ')' | ']' | '}' => {
                    let (close, open, ctrl) = stack.pop()?;
                    if close == b'`' && c == '}' {
                        if scan_template(b, &mut pos)? {
                            stack.push((b'`', open, false));
                            Kind::TemplateMid
                        } else {
                            toks[open].pair = Some(i);
                            Kind::TemplateEnd
                        }
                    } else {
                        (close == c as u8).then_some(())?;
                        ctrl_close = ctrl;
                        toks[open].pair = Some(i);
                        Kind::Punct
                    }
                }
                _ => Kind::Punct,
            }
        };
        toks.push(Token {
            kind,
            start,
            end: pos,
            nl,
            pair: None,
        });
    }
    stack.is_empty().then_some(toks)
}

/// Scans template characters from `pos` through the closing `` ` `` (returns `false`)
/// or the `${` opening a substitution (returns `true`).
fn scan_template(b: &[u8], pos: &mut usize) -> Option<bool> {
    loop {
        match *b.get(*pos)? {
            b'`' => {
                *pos += 1;
                return Some(false);
            }
            b'$' if b.get(*pos + 1) == Some(&b'{') => {
                *pos += 2;
                return Some(true);
            }
            b'\\' => *pos += 2,
            _ => *pos += 1,
        }
    }
}

// ----- Statement splitter -----

/// A top-level statement: first and last token (excluding a terminating `;`), and whether
/// it is an expression statement.
#[derive(Clone, Copy, Debug)]
struct Stmt {
    start: usize,
    end: usize,
    expr: bool,
}

/// Where the splitter is within the current top-level statement.
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

/// What closing a bracket opened at depth 0 means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Plain,
    /// Control head followed by a sub-statement.
    HeadSub,
    /// Control head ending the statement (do-while).
    HeadEnd,
    /// Block statement or declaration body: closing it ends the statement.
    Block,
    /// Block body of an arrow function.
    Arrow,
}

/// Reserved words: identifiers that cannot end an expression or be labels.
const RESERVED: &str = "await break case catch class const continue default delete do else enum \
    export extends finally for function if import in instanceof let new return switch throw try \
    typeof var void while with yield";

/// Keywords that only start statements. Met inside a simple statement, they mean the
/// splitter lost track (e.g. it did not split before them), so it gives up.
const STMT_ONLY: &str =
    "if for while do try switch with const let var return throw break continue debugger case default";

/// Keywords starting a statement that is not an expression statement.
const NON_EXPR: &str = "const let var function class if for while do try switch return throw \
    break continue export with debugger else catch finally case default";

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
    fn pair(&self, i: usize) -> Option<usize> {
        self.toks.get(i).and_then(|t| t.pair)
    }
    /// Token `i` as a keyword/identifier word, or `""` (also for property names after `.`).
    fn word(&self, i: usize) -> &str {
        let property = i > 0 && (self.is_punct(i - 1, ".") || self.is_punct(i - 1, "?."));
        match self.toks.get(i) {
            Some(t) if t.kind == Kind::Ident && !property => self.text(i),
            _ => "",
        }
    }
    /// Whether token `i` can be the last token of an expression.
    fn can_end(&self, i: usize, allow_postfix: bool) -> bool {
        let t = self.toks[i];
        match (t.kind, self.text(i)) {
            (Kind::Num | Kind::Str | Kind::Regex | Kind::TemplateEnd, _) => true,
            (Kind::Ident, _) => !is_in(RESERVED, self.word(i)),
            (Kind::Punct, ")" | "]" | "}") => true,
            (Kind::Punct, "++" | "--") => {
                allow_postfix && i > 0 && !t.nl && self.can_end(i - 1, false)
            }
            _ => false,
        }
    }
    /// Whether token `i`, first on its line, may continue the expression before it. After
    /// an arrow function's block body (`arrow`) only `,` `:` `;` may. Errs towards `true`:
    /// not splitting makes the spliced form fail to compile rather than change meaning.
    fn continues(&self, i: usize, arrow: bool) -> bool {
        let s = self.text(i);
        // A postfix update cannot be called, indexed or tagged.
        let postfix = matches!(self.text(i - 1), "++" | "--");
        match self.toks[i].kind {
            Kind::Punct if arrow => matches!(s, "," | ":" | ";"),
            Kind::Punct if postfix && matches!(s, "(" | "[" | "." | "?.") => false,
            Kind::Punct => !matches!(s, "{" | "!" | "~" | "++" | "--"),
            Kind::TemplateEnd | Kind::TemplateHead => !postfix && !arrow,
            Kind::Ident => !arrow && matches!(self.word(i), "in" | "instanceof"),
            _ => false,
        }
    }
    /// Whether a line break before token `i` ends the current simple statement.
    fn asi(&self, i: usize, arrow: bool) -> bool {
        is_in("return break continue throw debugger", self.word(i - 1))
            || (self.can_end(i - 1, true) && !self.continues(i, arrow))
    }
    /// Whether token `i` starts a label (`name:`).
    fn label(&self, i: usize) -> bool {
        let w = self.word(i);
        !w.is_empty() && !is_in(RESERVED, w) && self.is_punct(i + 1, ":")
    }
    /// Whether the top-level statement starting at token `i` is an expression statement.
    fn is_expr(&self, i: usize) -> bool {
        let w = self.word(i);
        !(self.is_punct(i, "{")
            || self.is_punct(i, ";")
            || is_in(NON_EXPR, w)
            || (w == "import" && !(self.is_punct(i + 1, "(") || self.is_punct(i + 1, ".")))
            || (w == "async" && self.async_function(i))
            || self.label(i))
    }
    /// Whether `async` at `i` starts `async function`.
    fn async_function(&self, i: usize) -> bool {
        self.word(i + 1) == "function" && !self.toks[i + 1].nl
    }
}

/// Splits a token stream into top-level statements; `None` when unsure.
fn split(src: &str, toks: &[Token]) -> Option<Vec<Stmt>> {
    let tk = Toks { src, toks };
    // The lexer guesses "regex" after `}`; that is only right after a block or arrow body.
    let after_brace = |i: usize| toks[i].kind == Kind::Regex && i > 0 && tk.is_punct(i - 1, "}");
    let suspicious = (0..toks.len()).filter(|&i| after_brace(i)).count();
    let mut stmts: Vec<Stmt> = Vec::new();
    let mut phase = Phase::Between;
    let (mut do_pending, mut ternary, mut simple_start, mut vetted) = (0usize, 0usize, 0, 0);
    let (mut fn_pending, mut block_close, mut arrow_close) = (false, None, None);
    let mut i = 0;
    while i < toks.len() {
        let (t, prev, w) = (toks[i], i.checked_sub(1), tk.word(i));
        if after_brace(i) {
            (block_close == prev || arrow_close == prev).then_some(())?;
            vetted += 1;
        }
        if matches!(phase, Phase::Between | Phase::Simple) && !stmts.is_empty() {
            let cont = match w {
                "else" | "finally" => Some(Phase::Head),
                "catch" => Some(Phase::AwaitParen(false)),
                "while" if do_pending > 0 => Some(Phase::AwaitParen(true)),
                _ => None,
            };
            if let (Some(p), Some(s)) = (cont, stmts.last_mut()) {
                do_pending -= usize::from(w == "while");
                (phase, s.end, i) = (p, i, i + 1);
                continue;
            }
        }
        if phase == Phase::Simple && t.nl && !fn_pending && tk.asi(i, arrow_close == prev) {
            phase = Phase::Between;
        }
        if phase == Phase::Between {
            (fn_pending, do_pending, phase) = (false, 0, Phase::Head);
            stmts.push(Stmt {
                start: i,
                end: i,
                expr: tk.is_expr(i),
            });
        }
        let semi = tk.is_punct(i, ";");
        let terminator = semi && phase == Phase::Simple;
        let mut role = Role::Plain;
        match phase {
            Phase::Head => match w {
                _ if tk.is_punct(i, "{") => role = Role::Block,
                _ if semi => phase = Phase::Between,
                "if" | "for" | "while" | "with" | "switch" | "catch" => {
                    phase = Phase::AwaitParen(false)
                }
                "do" => do_pending += 1,
                "else" | "try" | "finally" => {}
                "function" | "class" => phase = Phase::DeclBody,
                "async" if tk.async_function(i) => phase = Phase::DeclBody,
                _ if tk.label(i) => i += 1,
                _ => (phase, simple_start, ternary) = (Phase::Simple, i, 0),
            },
            Phase::AwaitParen(end) if tk.is_punct(i, "(") => {
                role = if end { Role::HeadEnd } else { Role::HeadSub };
            }
            Phase::AwaitParen(_) if tk.is_punct(i, "{") => role = Role::Block,
            Phase::AwaitParen(_) if w != "await" => (phase, simple_start) = (Phase::Simple, i),
            Phase::DeclBody if tk.is_punct(i, "{") => role = Role::Block,
            _ => {}
        }
        if phase == Phase::Simple {
            if semi {
                phase = Phase::Between;
            } else if i != simple_start && is_in(STMT_ONLY, w) {
                return None;
            } else if matches!(w, "function" | "class") {
                fn_pending = true;
            } else if tk.is_punct(i, "?") {
                ternary += 1;
            } else if tk.is_punct(i, ":") {
                // Without a pending `?`, this is a label or `case` we did not see coming.
                ternary = ternary.checked_sub(1)?;
            } else if tk.is_punct(i, "{") {
                fn_pending = false;
                if prev.is_some_and(|p| tk.is_punct(p, "=>")) {
                    role = Role::Arrow;
                }
            }
        }
        // Skip over a bracketed group, then apply what closing it means.
        if let Some(close) = t.pair {
            match role {
                Role::HeadSub => phase = Phase::Head,
                Role::HeadEnd => phase = Phase::Between,
                Role::Block => (phase, block_close) = (Phase::Between, Some(close)),
                Role::Arrow => arrow_close = Some(close),
                Role::Plain => {}
            }
            i = close;
        }
        if let Some(s) = stmts.last_mut().filter(|_| !terminator) {
            s.end = i;
        }
        i += 1;
    }
    (matches!(phase, Phase::Between | Phase::Simple) && vetted == suspicious).then_some(stmts)
}

/// Whether tokens `start..=end` form exactly one async arrow function (maybe parenthesised).
fn is_async_arrow(src: &str, toks: &[Token], mut start: usize, mut end: usize) -> bool {
    let tk = Toks { src, toks };
    while tk.is_punct(start, "(") && tk.pair(start) == Some(end) && start + 1 < end {
        (start, end) = (start + 1, end - 1);
    }
    let arrow = match tk.pair(start + 1) {
        Some(close) if tk.is_punct(start + 1, "(") => close + 1,
        _ if tk
            .toks
            .get(start + 1)
            .is_some_and(|t| t.kind == Kind::Ident) =>
        {
            start + 2
        }
        _ => return false,
    };
    if tk.word(start) != "async" || !tk.is_punct(arrow, "=>") || arrow >= end {
        return false;
    }
    if tk.is_punct(arrow + 1, "{") {
        return tk.pair(arrow + 1) == Some(end);
    }
    // An expression body extends to the end unless a top-level comma follows it.
    let mut j = arrow + 1;
    while j <= end {
        if tk.is_punct(j, ",") {
            return false;
        }
        j = tk.pair(j).unwrap_or(j) + 1;
    }
    true
}

/// The name of a single named function declaration spanning the whole statement.
fn function_decl_name<'a>(src: &'a str, toks: &[Token], stmt: &Stmt) -> Option<&'a str> {
    let tk = Toks { src, toks };
    let mut i = stmt.start + usize::from(tk.word(stmt.start) == "async");
    if tk.word(i) != "function" || !tk.is_punct(stmt.end, "}") || stmt.end + 1 != toks.len() {
        return None;
    }
    i += 1 + usize::from(tk.is_punct(i + 1, "*"));
    (toks.get(i)?.kind == Kind::Ident).then(|| text(src, toks, i))
}

/// A loop of the program (`for`, `while`, `do ... while`): where its keyword is and where
/// its body ends, as 1-based lines and character columns of the source it was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoopSpan {
    /// The keyword (`for`, `while`, `do`).
    pub(crate) start: (u32, u32),
    /// The start of the last token of its body (of the `while (...)` of a `do` loop).
    pub(crate) end: (u32, u32),
}

/// The loops of `src`, in source order; `None` when it cannot be tokenised (an unterminated
/// string, unbalanced brackets). A keyword used as a property name (`x.for`, `{ do: 1 }`) is
/// no loop, nor is the `while` that ends a `do` loop.
pub(crate) fn loops(src: &str) -> Option<Vec<LoopSpan>> {
    let toks = lex(src)?;
    let word = |i: usize| -> &str {
        match toks.get(i) {
            Some(t) if t.kind == Kind::Ident || t.kind == Kind::Punct => text(src, &toks, i),
            _ => "",
        }
    };
    // The index of the last token of the statement starting at `i`: a block, or everything
    // up to its `;` (brackets skipped whole), or the last token.
    let statement_end = |i: usize| -> usize {
        if word(i) == "{" {
            return toks[i].pair.unwrap_or(toks.len() - 1);
        }
        let mut j = i;
        while j < toks.len() {
            if word(j) == ";" {
                return j;
            }
            j = toks[j].pair.map_or(j + 1, |close| close + 1);
        }
        toks.len().saturating_sub(1)
    };
    let position = |byte: usize| -> (u32, u32) {
        let before = &src[..byte];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        let column = src[line_start..byte].chars().count() + 1;
        (
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(column).unwrap_or(u32::MAX),
        )
    };
    let mut spans = Vec::new();
    // The token after which a `while` ends a `do` loop rather than starting one.
    let mut do_ends: Vec<usize> = Vec::new();
    for i in 0..toks.len() {
        let keyword = word(i);
        if !matches!(keyword, "for" | "while" | "do") || toks[i].kind != Kind::Ident {
            continue;
        }
        let property = i > 0 && matches!(word(i - 1), "." | "?.") || word(i + 1) == ":";
        if property || (keyword == "while" && i > 0 && do_ends.contains(&(i - 1))) {
            continue;
        }
        let last = if keyword == "do" {
            let body_end = statement_end(i + 1);
            do_ends.push(body_end);
            // `do body while (cond)`: the loop runs to the end of its condition.
            let head = if word(body_end + 1) == "while" {
                body_end + 2
            } else {
                body_end + 1
            };
            match toks.get(head) {
                Some(t) if word(head) == "(" => t.pair.unwrap_or(head),
                _ => body_end,
            }
        } else {
            let open = if word(i + 1) == "await" { i + 2 } else { i + 1 };
            match toks.get(open).and_then(|t| t.pair) {
                Some(close) if word(open) == "(" && close + 1 < toks.len() => {
                    statement_end(close + 1)
                }
                Some(close) => close,
                None => continue,
            }
        };
        let last = last.min(toks.len() - 1);
        spans.push(LoopSpan {
            start: position(toks[i].start),
            end: position(toks[last].start),
        });
    }
    Some(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_found_with_their_bodies_and_not_in_names_strings_or_comments() {
        let src = "let s = 'for while';\n// do this\nfor (;;) {\n  x.while = { do: 1 };\n}\n\
                   do {\n  i++;\n} while (i < 3);\nwhile (a) b();\nfor await (const x of y) f(x);";
        let found: Vec<((u32, u32), (u32, u32))> = loops(src)
            .unwrap()
            .into_iter()
            .map(|l| (l.start, l.end))
            .collect();
        assert_eq!(
            found,
            [
                ((3, 1), (5, 1)),
                ((6, 1), (8, 15)),
                ((9, 1), (9, 14)),
                ((10, 1), (10, 30)),
            ]
        );
        assert_eq!(loops("let s = 'unterminated"), None);
        assert_eq!(loops("é; while (1) {}").unwrap()[0].start, (1, 4));
    }

    /// Programs whose last statement is spliced into `return (...)`; `«` and `»` mark the
    /// expected expression, everything before `«` is the expected verbatim prefix.
    const SPLICED: &[&str] = &[
        "«1 + 1»",
        "const x = 1;\n«x + 1»",
        "«(() => 1)»",
        "«() => 1»",
        "«(await mcp.add({ x: 2 })).sum»",
        "«({ a: typeof Buffer })»",
        "\"use strict\"; «1»",
        "«a / b / c»",
        "«x?.y ?? z»",
        "«import('x')»",
        "«await Promise.all([a(), b()])»;",
        "«1»;",
        "async () => {}\n«(1)»",
        "«async () => 1, 2»",
        "x++\n«(1)»",
        "x = 1\n«++y»",
        "function f() {}\n«f()»",
        // Automatic semicolon insertion.
        "let a = 1\nlet b = 2\n«a + b»",
        "«fetch(u)\n  .then(r => r.json())»",
        "const a = 1\nconst b = a\n  + 2\n«b»",
        "«a\n(b)»",
        "«a\n[0]»",
        "«a\n`t`»",
        "«a.return\n(b)»",
        "let\nx = 1\n«x»",
        "x = 1\nreturn\n«x»",
        "const f = function () { return 1 }\n«f()»",
        "const f = function ()\n{ return 1 }\n«f()»",
        "x = {a:1}\n«x.a»",
        "const g = () => {\n  return 2\n}\n«g()»",
        "const h = () => {}\n«/re/.test(s)»",
        "debugger\n«(1)»",
        // Literals and comments hide delimiters.
        "«`a;b}\n${ {a:1}.a }c`»",
        "`x${`y${1}`}`;\n«`${'}'}`»",
        "const s = 'a // b; c'\n«s + \"//;\"»",
        "const r = /[/;}]+/g; «\"a;b\".split(r).length»",
        "if (x) /;/.test(s)\n«1»",
        "const n = [1_000, 0x1F, 1e5, 1e-3, .5, 10n]\n«n»",
        "const ü = '😀'; «ü + `é`»",
        "class A { #p = 1; get p() { return this.#p } }\n«new A().p»",
        "«x + 1» // trailing",
        "«x + 1» /* c */",
        "a(); // c\n/* d */ «b()» // e",
        "«a\n// c\n.b»",
        // Statements before the last expression.
        "if (a) return 1; «2»",
        "if (a) { b() }\n«c»",
        "if (a) b()\nelse c()\n«d»",
        "try { a() } catch (e) {}\n«b»",
        "do x++; while (x < 3)\n«x»",
        "do { x++ } while (x < 3) «x»",
        "lbl: { break lbl }\n«1»",
        "for (;;) break\n«x»",
        "{ a() }\n«+1»",
    ];

    /// Programs that get the plain wrap only.
    const PLAIN: &[&str] = &[
        "// only a comment",
        "if (a) {\n  b()\n} else {\n  c()\n}",
        "if (a) b(); else if (c) d(); else e()",
        "for (let i = 0; i < 3; i++) { s += i }",
        "for await (const x of xs) log(x)",
        "while (x)\n  x--",
        "do { x++ } while (x < 3)",
        "try { a() } catch (e) { b() } finally { c() }",
        "try { a() } catch { b() }",
        "switch (x) { case 1: y() }",
        "return 5",
        "const x = 1",
        "outer: for (;;) { break outer }",
        "{ a: 1 }",
        "1;;",
        "if (x)\n  foo()",
        "class A {}",
        "function f() {};",
        "debugger\nif (x)\n  y = 1",
        // Invalid, unterminated or ambiguous input.
        "}); process.exit(1); (async () => {",
        "'unterminated",
        "`unterminated ${",
        "/* open",
        "x = /open",
        "(((",
        "x = {a: 1}\n/re/g.test(s)",
        "if (x)",
        "export default",
        "export default; 1",
    ];

    fn wrap(src: &str) -> String {
        format!("async () => {{{src}\n}}")
    }

    #[test]
    fn reference_suite() {
        assert!(normalize("```js\n1 + 1\n```")
            .primary
            .contains("return (1 + 1"));
        assert!(normalize("1 + 1").primary.contains("return (1 + 1"));
        assert_eq!(normalize("async () => 1").primary, "async () => 1");
        let n = normalize("const x = 1;\nx + 1").primary;
        assert!(n.contains("const x = 1;") && n.contains("return (x + 1"));
        assert_eq!(n, "async () => {const x = 1;\nreturn (x + 1\n)\n}");
        let n = normalize("function run() { return 1; }").primary;
        assert!(n.contains("function run() { return 1; }") && n.contains("return run();"));
    }

    #[test]
    fn splices_last_expression() {
        for case in SPLICED {
            let code = case.replace(['«', '»'], "");
            let (before, rest) = case.split_once('«').unwrap();
            let expr = rest.split_once('»').unwrap().0;
            let n = normalize(&code);
            let want = format!("async () => {{{before}return ({expr}\n)\n}}");
            assert_eq!(n.primary, want, "code: {code:?}");
            assert_eq!(n.fallback, Some(wrap(&code)), "code: {code:?}");
        }
    }

    #[test]
    fn plain_wrap() {
        for code in PLAIN {
            let n = normalize(code);
            assert_eq!((n.primary, n.fallback), (wrap(code), None));
        }
    }

    #[test]
    fn fences_and_empty_programs() {
        assert_eq!(strip_code_fence("```js\n1 + 1\n```"), "1 + 1");
        assert_eq!(strip_code_fence("```javascript\nx\n```"), "x");
        assert_eq!(strip_code_fence("```\nx"), "x");
        assert_eq!(strip_code_fence("1 + 1"), "1 + 1");
        assert_eq!(
            normalize("  ```ts\nfoo()\n```  ").fallback,
            Some(wrap("foo()"))
        );
        for code in ["", "   \n\t ", "```js\n```"] {
            let n = normalize(code);
            assert_eq!((n.primary.as_str(), n.fallback), ("async () => {}", None));
        }
        let n = normalize("#!/usr/bin/env node\n1");
        assert_eq!(n.primary, "async () => {return (1\n)\n}");
    }

    #[test]
    fn async_arrows_pass_through() {
        for code in [
            "async x => x",
            "async (a, b) => { return a + b; }",
            "(async () => 1)",
        ] {
            let n = normalize(code);
            assert_eq!((n.primary.as_str(), n.fallback), (code, Some(wrap(code))));
        }
        assert_eq!(normalize("async () => 1;").primary, "async () => 1");
        assert_eq!(
            normalize("export default async () => 1").primary,
            "async () => 1"
        );
    }

    #[test]
    fn function_declarations() {
        let n = normalize("async function main() {\n  return await f();\n}");
        let want =
            "async () => {async function main() {\n  return await f();\n}\nreturn main();\n}";
        assert_eq!(n.primary, want);
        assert!(normalize("function* gen() { yield 1 }")
            .primary
            .ends_with("return gen();\n}"));
        assert!(normalize("export default function go() {}")
            .primary
            .ends_with("return go();\n}"));
    }

    #[test]
    fn fuzz_never_panics() {
        let alphabet: Vec<char> =
            "abc xyz(){}[];,.:?=+-*/%!<>&|^~`'\"\\$#@\n\r\t0123456789_ eé😀\u{2028}"
                .chars()
                .chain("if else return function async => ${ // /* */ do while".chars())
                .collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..10_000 {
            let len = next() % 40;
            let s: String = (0..len)
                .map(|_| match next() % 8 {
                    0 => char::from_u32((next() % 0x3000) as u32).unwrap_or('x'),
                    _ => alphabet[(next() % alphabet.len() as u64) as usize],
                })
                .collect();
            assert!(!normalize(&s).primary.is_empty(), "{s:?}");
        }
    }

    #[test]
    fn adversarial_inputs_are_linear() {
        let n = 100_000;
        for code in [
            "(".repeat(n) + "async () => 1" + &")".repeat(n),
            "`${".repeat(n) + &"}`".repeat(n),
            "export default ".repeat(n) + "1",
            "{".repeat(n),
            "a\n".repeat(n),
            "/".repeat(n),
            "x = `${".repeat(n),
        ] {
            let start = std::time::Instant::now();
            assert!(!normalize(&code).primary.is_empty());
            assert!(
                start.elapsed().as_secs() < 2,
                "slow on {:?}...",
                &code[..20]
            );
        }
    }

    /// Where the engine would report `needle` (its first occurrence in the compiled text),
    /// mapped back to the user's code.
    fn position_of(code: &str, fallback: bool, needle: &str) -> (u32, u32) {
        let compiled = normalize(code).compiled(fallback);
        let at = compiled
            .text
            .find(needle)
            .expect("needle in the compiled text");
        let before = &compiled.text[..at];
        let line = before.matches('\n').count() as u32 + 1;
        let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
            .chars()
            .count() as u32
            + 1;
        compiled.user_position(line, column)
    }

    #[test]
    fn positions_map_back_to_the_code_as_written() {
        // Plain wrap, a later line: unchanged.
        assert_eq!(
            position_of("const a = 1;\nif (a) {\n  boom()\n}", false, "boom"),
            (3, 3)
        );
        // The first line: the wrapper's columns are taken off.
        assert_eq!(position_of("boom(); const a = 1;", false, "boom"), (1, 1));
        assert_eq!(position_of("let a = 1; boom()", false, "boom"), (1, 12));
        // Leading blank lines and indentation are the user's.
        assert_eq!(position_of("\n\n   boom()\nx", false, "boom"), (3, 4));
        // After a fence, lines count from the line after it.
        assert_eq!(
            position_of("```js\nconst a = 1;\nboom(a)\n```", false, "boom"),
            (2, 1)
        );
        // The spliced last expression: `return (` is not the user's.
        assert_eq!(position_of("const a = 1;\na.b.boom", false, "boom"), (2, 5));
        assert_eq!(
            position_of("const a = 1;\n  a.b.boom", false, "a.b"),
            (2, 3)
        );
        assert_eq!(position_of("a.b.boom", false, "boom"), (1, 5));
        assert_eq!(position_of("x; a.b.boom", false, "boom"), (1, 8));
        assert_eq!(position_of("const a = 1;\na.b.boom", true, "boom"), (2, 5));
        // An async arrow passes through: only the opening parenthesis is added.
        assert_eq!(
            position_of("async () => {\n  boom()\n}", false, "boom"),
            (2, 3)
        );
        assert_eq!(position_of("async () => boom()", false, "boom"), (1, 13));
        // Lines past the program map to themselves.
        let n = normalize("1 +\n2");
        assert!(n
            .compiled(false)
            .text
            .starts_with("(async () => {return (1 +\n2"));
    }
}
