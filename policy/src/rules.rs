//! Rules on a call's arguments (`rules:` in the policy file): each names tools by a glob,
//! may have a condition in the Common Expression Language (`when`), and says what happens to
//! a call it matches (`allow`, `approve`, `block`). The first rule that matches a call decides
//! it; a call no rule matches is decided by its tool's own `requires_approval`.
//!
//! ```yaml
//! rules:
//!   - tool: "pay.send"                    # a tool, or a glob over "provider.tool"
//!     when: "input.amount > 100 || !(input.to in ['bob', 'carol'])"
//!     action: approve                     # allow | approve | block
//!     approvers: [finance]                # roles or principals; default: the approve permission
//!     reason: "payments over 100 or to new payees"
//! ```
//!
//! A condition sees `input` (the call's input), `tool` (`provider`, `name`), `principal`
//! (`name`, or `null`; `roles`) and `now` (a timestamp). At load a condition that does not
//! parse, uses another variable or a function CEL does not have is refused, naming the file,
//! the line and column of the rule, and the column in the expression. At run time a
//! condition that fails (a missing field, a value of the wrong type) or would cost more than
//! [`MAX_RULE_COST`] on the call's input decides `block`, saying which rule and why: a rule
//! that cannot be evaluated never lets a call through.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::Key;
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use execbox_host::json::{with_deep_stack, SHALLOW_DEPTH};
use execbox_host::yaml::{did_you_mean, Spanned, YamlError};
use execbox_host::{MayAsk, ToolRequirements};
use serde::Deserialize;
use serde_json::Value;

use super::{PolicyError, Principal};

/// The longest condition, in characters.
pub const MAX_WHEN_CHARS: usize = 4_096;

/// How deep brackets may nest in a condition (the parser recurses).
const MAX_WHEN_NESTING: usize = 32;

/// The most a condition may cost on one call's input: about the number of steps the
/// evaluator takes, each macro (`all`, `exists`, `map`, `filter`) counting its body once per
/// element of the largest list or map in the input, and every step weighted by the largest
/// string of the input in KiB. Past it, the call is blocked.
pub const MAX_RULE_COST: u64 = 1_000_000;

/// The variables a condition may use.
const VARIABLES: [&str; 4] = ["input", "tool", "principal", "now"];

/// What a rule does to a call it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    /// The call runs without asking anyone, even if its tool requires approval.
    Allow,
    /// The call waits for an approver (the rule's `approvers`, else the policy's).
    Approve,
    /// The call is refused: `tool_error`, reason `blocked`.
    Block,
}

impl RuleAction {
    /// `allow`, `approve` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Allow => "allow",
            RuleAction::Approve => "approve",
            RuleAction::Block => "block",
        }
    }
}

/// A rule as the policy file writes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleDef {
    #[serde(default)]
    pub(super) name: Option<String>,
    pub(super) tool: String,
    #[serde(default)]
    pub(super) when: Option<Spanned<String>>,
    pub(super) action: RuleAction,
    #[serde(default)]
    pub(super) approvers: Vec<String>,
    #[serde(default)]
    pub(super) reason: Option<String>,
}

/// The rules of a policy, compiled, in their order.
#[derive(Default)]
pub(crate) struct Rules(Vec<Rule>);

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|r| &r.label))
            .finish()
    }
}

struct Rule {
    /// `rules[N]`, or `rules[N] (name)`.
    label: String,
    tool: Glob,
    when: Option<Condition>,
    action: RuleAction,
    approvers: Vec<String>,
    reason: Option<String>,
}

struct Condition {
    program: Program,
    /// The cost, a polynomial in the largest collection's length: coefficient `k` of `n^k`.
    cost: Vec<u64>,
    /// The largest list literal of the expression.
    literal_len: u64,
}

/// What the first matching rule decided about a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleDecision {
    /// The rule: `rules[N]`, with its `name` when it has one.
    pub rule: String,
    /// What it decided: [`RuleAction::Block`] as well when its condition failed.
    pub action: RuleAction,
    /// Why, in the rule's words (`reason`), or why its condition could not be evaluated.
    pub reason: Option<String>,
    /// Who may approve, for [`RuleAction::Approve`]: roles or principals (empty: whoever
    /// holds the policy's approve permission).
    pub approvers: Vec<String>,
}

/// A call as rules see it.
pub(crate) struct RuledCall<'a> {
    /// `provider.tool` as the guest called it.
    pub(crate) tool: &'a str,
    /// The tool's own name.
    pub(crate) original_name: &'a str,
    pub(crate) input: &'a Value,
    pub(crate) principal: &'a Principal,
}

impl Rules {
    /// Compiles the rules of a policy file; `roles` and `principals` are the names an
    /// approver may be.
    pub(super) fn compile(
        defs: &[Spanned<RuleDef>],
        path: &Path,
        roles: &HashSet<&str>,
        principals: &HashSet<&str>,
    ) -> Result<Rules, PolicyError> {
        let mut rules = Vec::with_capacity(defs.len());
        let mut names = HashSet::new();
        for (i, spanned) in defs.iter().enumerate() {
            let def = &spanned.value;
            let at = format!("rules[{i}]");
            let (line, column) = (spanned.referenced.line(), spanned.referenced.column());
            let invalid = |field: &str, message: String| {
                PolicyError::File(YamlError::Invalid {
                    path: path.to_path_buf(),
                    line: (line > 0).then_some(line),
                    column: (column > 0).then_some(column),
                    at: format!("{at}.{field}"),
                    message,
                })
            };
            let label = match &def.name {
                Some(name) if name.trim().is_empty() => {
                    return Err(invalid("name", "must not be empty".into()))
                }
                Some(name) if !names.insert(name.as_str()) => {
                    return Err(invalid(
                        "name",
                        format!("`{name}` names an earlier rule too; a name tells one rule"),
                    ))
                }
                Some(name) => format!("{at} ({name})"),
                None => at.clone(),
            };
            let tool = Glob::parse(&def.tool).map_err(|m| invalid("tool", m))?;
            if def.action != RuleAction::Approve && !def.approvers.is_empty() {
                return Err(invalid(
                    "approvers",
                    format!(
                        "apply to `action: approve` only; this rule's action is `{}`",
                        def.action.as_str()
                    ),
                ));
            }
            for approver in &def.approvers {
                if roles.contains(approver.as_str()) && principals.contains(approver.as_str()) {
                    return Err(invalid(
                        "approvers",
                        format!(
                            "`{approver}` is both a role and a principal of this policy, and \
                             approvers name either; rename one of them"
                        ),
                    ));
                }
                if !roles.contains(approver.as_str()) && !principals.contains(approver.as_str()) {
                    let known = roles.iter().chain(principals.iter()).copied();
                    let suggestion = did_you_mean(approver, known)
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    return Err(invalid(
                        "approvers",
                        format!(
                            "`{approver}` is neither a role nor a principal of this policy{suggestion}"
                        ),
                    ));
                }
            }
            let when = match &def.when {
                Some(when) => Some(Condition::compile(when, path, &format!("{at}.when"))?),
                None => None,
            };
            rules.push(Rule {
                label,
                tool,
                when,
                action: def.action,
                approvers: def.approvers.clone(),
                reason: def.reason.clone(),
            });
        }
        Ok(Rules(rules))
    }

    /// Whether there are no rules.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Who may have to approve a call of `tool` (`provider.tool`, `original_name` its own
    /// name), whatever its input: each rule that names it and may ask counts (an
    /// over-estimate: a rule before it might decide first), and so does the tool's own
    /// `requires_approval` unless a rule without a condition decides every call before.
    pub(crate) fn may_ask(
        &self,
        tool: &str,
        original_name: &str,
        requirements: &ToolRequirements,
    ) -> MayAsk {
        let mut most = MayAsk::No;
        for rule in &self.0 {
            let names = rule.tool.matches(tool)
                || tool
                    .split_once('.')
                    .is_some_and(|(p, _)| rule.tool.matches(&format!("{p}.{original_name}")));
            if !names {
                continue;
            }
            if rule.action == RuleAction::Approve {
                most = most.max(match rule.approvers.is_empty() {
                    true => MayAsk::Anyone,
                    false => MayAsk::Named,
                });
            }
            if rule.when.is_none() {
                return most;
            }
        }
        most.max(MayAsk::of(requirements))
    }

    /// The most evaluating the conditions that match `call` may cost (see
    /// [`MAX_RULE_COST`]): what tells a caller on an async runtime whether to evaluate them
    /// where it is or on a thread that may block.
    pub(crate) fn estimated_cost(&self, call: &RuledCall<'_>) -> u64 {
        let mut bound: Option<Bound> = None;
        let mut most = 0;
        for rule in &self.0 {
            if !rule.tool.matches(call.tool) && !rule.tool.matches_original(call) {
                continue;
            }
            let Some(when) = &rule.when else {
                break;
            };
            let bound = bound.get_or_insert_with(|| Bound::new(call));
            most = most.max(when.cost_on(bound));
        }
        most
    }

    /// The decision of the first rule that matches `call`, if one does.
    pub(crate) fn decide(&self, call: &RuledCall<'_>) -> Option<RuleDecision> {
        self.decide_from(0, call, None)
    }

    /// [`Rules::decide`] from rule `start` on, with the input's bounds when measured. An
    /// input nested deeper than [`SHALLOW_DEPTH`] is converted, evaluated and dropped on a
    /// thread with a deep stack (each step recurses once per level).
    fn decide_from(
        &self,
        start: usize,
        call: &RuledCall<'_>,
        mut bound: Option<Bound>,
    ) -> Option<RuleDecision> {
        for (i, rule) in self.0.iter().enumerate().skip(start) {
            if !rule.tool.matches(call.tool) && !rule.tool.matches_original(call) {
                continue;
            }
            let Some(when) = &rule.when else {
                return Some(rule.decision());
            };
            if bound.is_none() {
                let measured = Bound::new(call);
                if measured.depth > SHALLOW_DEPTH {
                    return with_deep_stack(|| self.decide_from(i, call, Some(measured)));
                }
                bound = Some(measured);
            }
            let bound = bound.as_mut().expect("measured above");
            match when.evaluate(call, bound) {
                Ok(true) => return Some(rule.decision()),
                Ok(false) => continue,
                Err(why) => {
                    return Some(RuleDecision {
                        rule: rule.label.clone(),
                        action: RuleAction::Block,
                        reason: Some(format!(
                            "the condition of policy rule {} could not be evaluated, so the \
                             call is blocked: {why}",
                            rule.label
                        )),
                        approvers: Vec::new(),
                    })
                }
            }
        }
        None
    }
}

impl Rule {
    fn decision(&self) -> RuleDecision {
        RuleDecision {
            rule: self.label.clone(),
            action: self.action,
            reason: self.reason.clone(),
            approvers: self.approvers.clone(),
        }
    }
}

/// The standard CEL environment, built once.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

impl Condition {
    fn compile(when: &Spanned<String>, path: &Path, at: &str) -> Result<Condition, PolicyError> {
        let text = when.value.as_str();
        let line = when.referenced.line();
        let column = when.referenced.column();
        let invalid = |message: String| {
            PolicyError::File(YamlError::Invalid {
                path: path.to_path_buf(),
                line: (line > 0).then_some(line),
                column: (column > 0).then_some(column),
                at: at.to_string(),
                message,
            })
        };
        if text.trim().is_empty() {
            return Err(invalid(
                "must not be empty (leave `when` out for a rule that matches every call of its tools)"
                    .into(),
            ));
        }
        let chars = text.chars().count();
        if chars > MAX_WHEN_CHARS {
            return Err(invalid(format!(
                "is {chars} characters, above the {MAX_WHEN_CHARS} a condition may have; split \
                 it into several rules"
            )));
        }
        if nesting(text) > MAX_WHEN_NESTING {
            return Err(invalid(format!(
                "brackets nest deeper than {MAX_WHEN_NESTING} levels; write it flatter"
            )));
        }
        let program = parse(text).map_err(invalid)?;
        let mut walk = Walk {
            program: &program,
            scope: Vec::new(),
            unknown: None,
            literal_len: 0,
        };
        let cost = walk.cost(program.expression());
        if let Some(message) = walk.unknown {
            return Err(invalid(message));
        }
        Ok(Condition {
            literal_len: walk.literal_len,
            program,
            cost,
        })
    }

    /// What evaluating it on an input of these bounds may cost.
    fn cost_on(&self, bound: &Bound) -> u64 {
        let n = bound.largest_collection.max(self.literal_len);
        weighted(&self.cost, n, bound.largest_string)
    }

    /// `Ok(true)` when the condition holds for the call; `Err` says why it cannot be told.
    fn evaluate(&self, call: &RuledCall<'_>, bound: &mut Bound) -> Result<bool, String> {
        let cost = self.cost_on(bound);
        if cost > MAX_RULE_COST {
            return Err(format!(
                "it would cost {} on this input (its largest list or map has {} elements, its \
                 longest string {} bytes), above the bound of {MAX_RULE_COST}; make the input \
                 smaller or the condition simpler",
                if cost == u64::MAX {
                    "more than can be counted".to_string()
                } else {
                    cost.to_string()
                },
                bound.largest_collection,
                bound.largest_string
            ));
        }
        let context = bound.context(call);
        match self.program.execute(context) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "it gave {} where true or false was expected",
                type_name(&other)
            )),
            Err(e) => Err(runtime_error(&e)),
        }
    }
}

/// Parses a condition on a thread of its own with a stack deep enough for the longest
/// condition (the parser recurses once per operator: 4,096 `!` in a row need about 20 MiB),
/// and refuses one whose tree is deeper than [`MAX_WHEN_DEPTH`], which evaluating it
/// (recursive too) could not take on a caller's stack; such a tree is dropped there as well.
fn parse(text: &str) -> Result<Program, String> {
    let text = text.to_string();
    let parsed = std::thread::Builder::new()
        .name("execbox-rule-parse".into())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(move || {
            let program = env()
                .compile(&text)
                .map_err(|errors| match errors.errors.first() {
                    Some(e) => format!(
                        "is not a CEL expression: {} (line {}, column {} of the expression)",
                        e.msg, e.pos.0, e.pos.1
                    ),
                    None => "is not a CEL expression".to_string(),
                })?;
            let depth = depth(program.expression());
            if depth > MAX_WHEN_DEPTH {
                return Err(format!(
                    "nests {depth} operations deep, above the {MAX_WHEN_DEPTH} a condition may; \
                     write it flatter (several rules, or `in` over a list)"
                ));
            }
            Ok(program)
        })
        .map_err(|e| format!("cannot be parsed now: no thread for the parser ({e})"))?;
    parsed
        .join()
        .unwrap_or_else(|_| Err("could not be parsed: the parser failed".to_string()))
}

/// The stack of the parser's thread.
const PARSE_STACK_BYTES: usize = 64 << 20;

/// How deep a condition's tree may be: evaluation recurses once per level.
const MAX_WHEN_DEPTH: usize = 100;

/// The depth of an expression tree, without recursion.
fn depth(root: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((node, d)) = stack.pop() {
        deepest = deepest.max(d);
        match &node.expr {
            Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => {}
            Expr::Call(call) => {
                stack.extend(call.target.iter().map(|t| (&**t, d + 1)));
                stack.extend(call.args.iter().map(|a| (a, d + 1)));
            }
            Expr::Select(select) => stack.push((&select.operand, d + 1)),
            Expr::List(list) => stack.extend(list.elements.iter().map(|e| (e, d + 1))),
            Expr::Map(map) => {
                for entry in &map.entries {
                    entry_children(&entry.expr, d + 1, &mut stack);
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    entry_children(&entry.expr, d + 1, &mut stack);
                }
            }
            Expr::Comprehension(c) => {
                for child in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    stack.push((child, d + 1));
                }
            }
        }
    }
    deepest
}

fn entry_children<'a>(entry: &'a EntryExpr, d: usize, stack: &mut Vec<(&'a IdedExpr, usize)>) {
    match entry {
        EntryExpr::StructField(field) => stack.push((&field.value, d)),
        EntryExpr::MapEntry(e) => {
            stack.push((&e.key, d));
            stack.push((&e.value, d));
        }
    }
}

/// The largest bracket nesting of `text`, outside string literals.
fn nesting(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Walks a compiled condition: its cost polynomial, its largest list literal, and the first
/// unknown variable or function.
struct Walk<'a> {
    program: &'a Program,
    scope: Vec<&'a str>,
    unknown: Option<String>,
    literal_len: u64,
}

impl<'a> Walk<'a> {
    fn column(&self, id: u64) -> String {
        let Some((start, _)) = self.program.source_info().offset_for(id) else {
            return String::new();
        };
        let source = &self.program.source_info().source;
        let before = source.get(..start as usize).unwrap_or(source);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        format!(" (line {line}, column {column} of the expression)")
    }

    fn unknown(&mut self, message: String) {
        if self.unknown.is_none() {
            self.unknown = Some(message);
        }
    }

    /// The cost of `node` as a polynomial in the largest collection's length.
    fn cost(&mut self, node: &'a IdedExpr) -> Vec<u64> {
        let mut cost = vec![1];
        match &node.expr {
            Expr::Unspecified | Expr::Literal(_) => {}
            Expr::Ident(name) => {
                if !name.starts_with('@')
                    && !VARIABLES.contains(&name.as_str())
                    && !self.scope.contains(&name.as_str())
                {
                    let suggestion = did_you_mean(name, VARIABLES.iter().copied())
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    let at = self.column(node.id);
                    self.unknown(format!(
                        "uses `{name}`{at}, which is not a variable{suggestion} (a condition \
                         sees `input`, `tool`, `principal` and `now`)"
                    ));
                }
            }
            Expr::Call(call) => {
                if !known_function(&call.func_name) {
                    let at = self.column(node.id);
                    self.unknown(format!(
                        "calls `{}`{at}, which is not a function of CEL's standard library",
                        call.func_name
                    ));
                }
                if let Some(target) = &call.target {
                    add(&mut cost, &self.cost(target));
                }
                for arg in &call.args {
                    add(&mut cost, &self.cost(arg));
                }
            }
            Expr::Select(select) => add(&mut cost, &self.cost(&select.operand)),
            Expr::List(list) => {
                self.literal_len = self.literal_len.max(list.elements.len() as u64);
                for element in &list.elements {
                    add(&mut cost, &self.cost(element));
                }
            }
            Expr::Map(map) => {
                self.literal_len = self.literal_len.max(map.entries.len() as u64);
                for entry in &map.entries {
                    self.entry(&mut cost, &entry.expr);
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    self.entry(&mut cost, &entry.expr);
                }
            }
            Expr::Comprehension(c) => {
                add(&mut cost, &self.cost(&c.iter_range));
                add(&mut cost, &self.cost(&c.accu_init));
                let depth = self.scope.len();
                self.scope.push(&c.iter_var);
                if let Some(v) = &c.iter_var2 {
                    self.scope.push(v);
                }
                self.scope.push(&c.accu_var);
                let mut body = self.cost(&c.loop_cond);
                add(&mut body, &self.cost(&c.loop_step));
                // Once per element, and once more: `(n + 1) * body`.
                let mut times = vec![0];
                times.extend_from_slice(&body);
                add(&mut times, &body);
                add(&mut cost, &times);
                add(&mut cost, &self.cost(&c.result));
                self.scope.truncate(depth);
            }
        }
        cost
    }

    fn entry(&mut self, cost: &mut Vec<u64>, entry: &'a EntryExpr) {
        match entry {
            EntryExpr::StructField(field) => add(cost, &self.cost(&field.value)),
            EntryExpr::MapEntry(e) => {
                add(cost, &self.cost(&e.key));
                add(cost, &self.cost(&e.value));
            }
        }
    }
}

/// `a += b`, coefficient by coefficient, saturating.
fn add(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

/// The cost polynomial at `n`, weighted by the longest string in KiB; saturating.
fn weighted(cost: &[u64], n: u64, longest_string: u64) -> u64 {
    let mut total: u64 = 0;
    let mut power: u64 = 1;
    for &c in cost {
        total = total.saturating_add(c.saturating_mul(power));
        power = power.saturating_mul(n.max(1));
    }
    total.saturating_mul(1 + longest_string / 1024)
}

/// Whether CEL's standard library has a function (or operator) of this name: operators are
/// spelled `_+_`, `!_`, `@in`; a name it does not know fails as an undeclared reference both
/// as a function and as a method.
fn known_function(name: &str) -> bool {
    if name.starts_with(['_', '@', '!', '-']) {
        return true;
    }
    static KNOWN: OnceLock<std::sync::Mutex<std::collections::HashMap<String, bool>>> =
        OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(&k) = known.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
        return k;
    }
    let undeclared = |source: String| -> bool {
        let Ok(program) = env().compile(&source) else {
            return false;
        };
        let context = Context::with_env(env().clone());
        matches!(program.execute(&context), Err(ExecutionError::UndeclaredReference(n)) if n.as_str() == name)
    };
    let is_known = !(undeclared(format!("{name}()")) && undeclared(format!("null.{name}()")));
    known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), is_known);
    is_known
}

/// The variables of one call, converted once for all the rules that evaluate it.
struct Bound {
    depth: usize,
    largest_collection: u64,
    largest_string: u64,
    context: Option<Context<'static, 'static>>,
}

impl Bound {
    fn new(call: &RuledCall<'_>) -> Bound {
        let (mut largest_collection, mut largest_string, mut depth) = (0u64, 0u64, 0usize);
        let mut stack = vec![(call.input, 1usize)];
        while let Some((value, d)) = stack.pop() {
            depth = depth.max(d);
            match value {
                Value::Array(items) => {
                    largest_collection = largest_collection.max(items.len() as u64);
                    stack.extend(items.iter().map(|v| (v, d + 1)));
                }
                Value::Object(map) => {
                    largest_collection = largest_collection.max(map.len() as u64);
                    for (k, v) in map {
                        largest_string = largest_string.max(k.len() as u64);
                        stack.push((v, d + 1));
                    }
                }
                Value::String(s) => largest_string = largest_string.max(s.len() as u64),
                _ => {}
            }
        }
        Bound {
            depth,
            largest_collection,
            largest_string,
            context: None,
        }
    }

    fn context(&mut self, call: &RuledCall<'_>) -> &Context<'static, 'static> {
        self.context.get_or_insert_with(|| make_context(call))
    }
}

fn make_context(call: &RuledCall<'_>) -> Context<'static, 'static> {
    let mut context = Context::with_env(env().clone());
    context.add_variable_from_value("input", cel_value(call.input));
    let provider = call.tool.split_once('.').map_or("", |(p, _)| p);
    let tool = HashMap::from([("provider", provider), ("name", call.original_name)]);
    context.add_variable_from_value("tool", tool);
    let name = call
        .principal
        .name()
        .map_or(CelValue::Null, |n| CelValue::from(n.to_string()));
    let roles: Vec<CelValue> = call
        .principal
        .roles()
        .iter()
        .map(|r| CelValue::from(r.clone()))
        .collect();
    let principal = HashMap::from([("name", name), ("roles", CelValue::List(Arc::new(roles)))]);
    context.add_variable_from_value("principal", principal);
    let now = chrono::Utc::now().fixed_offset();
    context.add_variable_from_value("now", CelValue::Timestamp(now));
    context
}

/// A JSON value as CEL sees it: an integer that fits is an `int` (so that `input.n + 1`
/// works, where CEL refuses to add a `uint` and an `int`), any other number a `double`.
fn cel_value(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::from(s.clone()),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(cel_value).collect())),
        Value::Object(map) => {
            let map: HashMap<Key, CelValue> = map
                .iter()
                .map(|(k, v)| (Key::from(k.clone()), cel_value(v)))
                .collect();
            CelValue::from(map)
        }
    }
}

/// A runtime failure in plain words (never the library's type names).
fn runtime_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(key) => {
            format!(
                "the input has no field `{key}` (write `has(input.{key}) && ...` to test for it)"
            )
        }
        ExecutionError::UndeclaredReference(name) => format!("`{name}` is not defined"),
        ExecutionError::UnsupportedBinaryOperator(op, a, b) => {
            format!("`{op}` cannot take {} and {}", type_name(a), type_name(b))
        }
        other => other.to_string(),
    }
}

/// A CEL value's type, as CEL names it.
fn type_name(value: &CelValue) -> &'static str {
    match value {
        CelValue::List(_) => "a list",
        CelValue::Map(_) => "a map",
        CelValue::Function(..) => "a function",
        CelValue::Int(_) => "an int",
        CelValue::UInt(_) => "a uint",
        CelValue::Float(_) => "a double",
        CelValue::String(_) => "a string",
        CelValue::Bytes(_) => "bytes",
        CelValue::Bool(_) => "a bool",
        CelValue::Duration(_) => "a duration",
        CelValue::Timestamp(_) => "a timestamp",
        CelValue::Opaque(_) | CelValue::Struct(_) => "an object",
        CelValue::Null => "null",
    }
}

/// A tool glob: `*` any run of characters (dots too), `?` one character, the rest literal.
#[derive(Clone, Debug)]
struct Glob(String);

impl Glob {
    fn parse(text: &str) -> Result<Glob, String> {
        if text.is_empty() {
            return Err("must name a tool (`provider.tool`) or a glob over them (`pay.*`)".into());
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "`{text}` has a space or control character; a tool is `provider.tool`"
            ));
        }
        if text != "*" && !text.contains('.') && !text.contains('*') {
            return Err(format!(
                "`{text}` names no provider; write `provider.tool` (for example `pay.send`), \
                 or a glob (`{text}.*`)"
            ));
        }
        Ok(Glob(text.to_string()))
    }

    fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }

    /// Matches `provider.original_name` (the tool's own name) when it differs.
    fn matches_original(&self, call: &RuledCall<'_>) -> bool {
        let Some((provider, name)) = call.tool.split_once('.') else {
            return false;
        };
        name != call.original_name && self.matches(&format!("{provider}.{}", call.original_name))
    }
}

/// Iterative glob matching with backtracking to the last `*`: linear in practice, never
/// exponential.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;
    use serde_json::json;

    fn policy(rules: &str) -> Result<Policy, PolicyError> {
        let text = format!(
            "version: 1\nroles:\n  finance: {{ permissions: [\"pay:*\"] }}\nprincipals:\n  alice: {{ roles: [finance] }}\n  bob: {{}}\nrules:\n{rules}"
        );
        Policy::parse(&text, Path::new("policy.yaml"), Path::new("/etc"))
    }

    fn decide(policy: &Policy, tool: &str, input: Value) -> Option<RuleDecision> {
        let principal = policy.principal(Some("bob")).unwrap();
        policy.rules().decide(&RuledCall {
            tool,
            original_name: tool.split_once('.').unwrap().1,
            input: &input,
            principal: &principal,
        })
    }

    const ISSUE: &str = r#"  - tool: "pay.send"
    when: "input.amount > 100 || !(input.to in ['bob', 'carol'])"
    action: approve
    approvers: [finance]
    reason: "payments over 100 or to new payees"
"#;

    #[test]
    fn the_issue_rule_pauses_large_payments_and_lets_small_ones_run() {
        let policy = policy(ISSUE).unwrap();
        assert_eq!(
            decide(&policy, "pay.send", json!({"amount": 1, "to": "bob"})),
            None
        );
        let large = decide(&policy, "pay.send", json!({"amount": 1000000, "to": "bob"})).unwrap();
        assert_eq!(large.action, RuleAction::Approve);
        assert_eq!(large.rule, "rules[0]");
        assert_eq!(large.approvers, ["finance"]);
        assert_eq!(
            large.reason.as_deref(),
            Some("payments over 100 or to new payees")
        );
        let new_payee = decide(&policy, "pay.send", json!({"amount": 5, "to": "mallory"}));
        assert_eq!(new_payee.unwrap().action, RuleAction::Approve);
        assert_eq!(decide(&policy, "pay.refund", json!({"amount": 1000})), None);
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = policy(
            r#"  - { name: small, tool: "pay.*", when: "input.amount <= 10", action: allow }
  - { tool: "pay.*", when: "input.amount > 10000", action: block, reason: too much }
  - { tool: "*", action: approve }
"#,
        )
        .unwrap();
        let d = decide(&policy, "pay.send", json!({"amount": 5})).unwrap();
        assert_eq!(
            (d.rule.as_str(), d.action),
            ("rules[0] (small)", RuleAction::Allow)
        );
        let d = decide(&policy, "pay.send", json!({"amount": 50000})).unwrap();
        assert_eq!(
            (d.action, d.reason.as_deref()),
            (RuleAction::Block, Some("too much"))
        );
        let d = decide(&policy, "pay.send", json!({"amount": 50})).unwrap();
        assert_eq!(
            (d.rule.as_str(), d.action),
            ("rules[2]", RuleAction::Approve)
        );
        let d = decide(&policy, "mail.send", json!({})).unwrap();
        assert_eq!(d.action, RuleAction::Approve);
    }

    #[test]
    fn conditions_see_the_tool_the_principal_and_now() {
        let policy = policy(
            r#"  - tool: "*"
    when: "tool.provider == 'pay' && tool.name == 'send' && principal.name == 'bob' && size(principal.roles) == 0 && now > timestamp('2020-01-01T00:00:00Z')"
    action: block
"#,
        )
        .unwrap();
        assert_eq!(
            decide(&policy, "pay.send", json!({})).unwrap().action,
            RuleAction::Block
        );
        assert_eq!(decide(&policy, "pay.refund", json!({})), None);
    }

    #[test]
    fn the_functions_the_docs_show_work() {
        let policy = policy(
            r#"  - tool: "*"
    when: "now.getHours('Europe/Paris') >= 0 && !('finance' in principal.roles) && input.to.matches('^b') && input.items.exists_one(i, i > 2) && has(input.to) && !has(input.cc) && duration('1h') > duration('1m') && now > timestamp('2027-01-01T00:00:00Z') - duration('87600h') && input.n + 1 == 3 && input.x * 2.0 == 3.0"
    action: block
"#,
        )
        .unwrap();
        let input = json!({"to": "bob", "items": [1, 2, 3], "n": 2, "x": 1.5});
        let d = decide(&policy, "pay.send", input).unwrap();
        assert_eq!(d.action, RuleAction::Block);
        assert_eq!(d.reason, None, "the condition held, it did not fail");
    }

    #[test]
    fn a_condition_that_fails_at_run_time_blocks_and_says_why() {
        let policy =
            policy("  - { tool: \"pay.send\", when: \"input.amount > 100\", action: approve }\n")
                .unwrap();
        let d = decide(&policy, "pay.send", json!({"to": "bob"})).unwrap();
        assert_eq!(d.action, RuleAction::Block);
        let reason = d.reason.unwrap();
        assert!(reason.contains("policy rule rules[0]"), "{reason}");
        assert!(reason.contains("no field `amount`"), "{reason}");
        let d = decide(&policy, "pay.send", json!({"amount": "lots"})).unwrap();
        assert_eq!(d.action, RuleAction::Block);
        let reason = d.reason.unwrap();
        assert!(
            reason.contains("no matching overload for '_>_' applied to '(string, int)'"),
            "{reason}"
        );
        let policy = super::tests::policy(
            "  - { tool: \"pay.send\", when: \"input.amount\", action: allow }\n",
        )
        .unwrap();
        let d = decide(&policy, "pay.send", json!({"amount": 3})).unwrap();
        assert_eq!(d.action, RuleAction::Block);
        assert!(d
            .reason
            .unwrap()
            .contains("gave an int where true or false"));
    }

    #[test]
    fn a_condition_that_would_cost_too_much_on_its_input_blocks() {
        let policy = policy(
            "  - { tool: \"pay.send\", when: \"input.a.exists(x, input.a.exists(y, x == y + 1))\", action: allow }\n",
        )
        .unwrap();
        let small: Vec<u32> = (0..10).collect();
        let d = decide(&policy, "pay.send", json!({"a": small})).unwrap();
        assert_eq!(d.action, RuleAction::Allow, "{:?}", d.reason);
        let large: Vec<u32> = (0..5_000).collect();
        let d = decide(&policy, "pay.send", json!({"a": large})).unwrap();
        assert_eq!(d.action, RuleAction::Block);
        assert!(d.reason.unwrap().contains("above the bound of 1000000"));
        let long = "x".repeat(4 * 1024 * 1024);
        let policy = super::tests::policy(
            "  - { tool: \"pay.send\", when: \"input.a.exists(x, x.contains(input.s))\", action: allow }\n",
        )
        .unwrap();
        let d = decide(
            &policy,
            "pay.send",
            json!({"a": vec!["y"; 1000], "s": long}),
        )
        .unwrap();
        assert_eq!(d.action, RuleAction::Block);
    }

    #[test]
    fn load_errors_name_the_file_the_line_the_column_and_the_fix() {
        let cases = [
            (
                "  - tool: pay.send\n    when: \"input.amount >\"\n    action: approve\n",
                "policy.yaml:9:11: rules[0].when: is not a CEL expression: Syntax error",
            ),
            (
                "  - tool: pay.send\n    when: \"inptu.amount > 1\"\n    action: approve\n",
                "uses `inptu` (line 1, column 1 of the expression), which is not a variable; did you mean `input`?",
            ),
            (
                "  - tool: pay.send\n    when: \"input.items.all(i, j > 1)\"\n    action: approve\n",
                "uses `j`",
            ),
            (
                "  - tool: pay.send\n    when: \"input.to.startWith('d')\"\n    action: approve\n",
                "calls `startWith` (line 1, column 19 of the expression), which is not a function",
            ),
            (
                "  - { tool: pay.send, action: approve, approvers: [fnance] }\n",
                "policy.yaml:8:5: rules[0].approvers: `fnance` is neither a role nor a principal of this policy; did you mean `finance`?",
            ),
            (
                "  - { tool: pay.send, action: block, approvers: [finance] }\n",
                "rules[0].approvers: apply to `action: approve` only",
            ),
            ("  - { tool: send, action: block }\n", "names no provider"),
            ("  - { tool: pay.send, action: deny }\n", "policy.yaml:8:"),
            (
                "  - { tool: pay.send, action: block, wen: x }\n",
                "unknown field `wen`; did you mean `when`?",
            ),
            (
                "  - { name: a, tool: pay.send, action: block }\n  - { name: a, tool: pay.x, action: block }\n",
                "rules[1].name: `a` names an earlier rule too",
            ),
        ];
        for (rules, want) in cases {
            let got = policy(rules).unwrap_err().to_string();
            assert!(got.contains(want), "{rules}\n  got: {got}\n want: {want}");
        }
        let deep = format!("{}1{}", "(".repeat(40), ")".repeat(40));
        let got = policy(&format!(
            "  - {{ tool: pay.send, when: \"{deep} == 1\", action: block }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(got.contains("nest deeper than 32"), "{got}");
        let got = policy(&format!(
            "  - {{ tool: pay.send, when: \"{}\", action: block }}\n",
            "1 == 1 && ".repeat(500)
        ))
        .unwrap_err()
        .to_string();
        assert!(got.contains("above the 4096 a condition may have"), "{got}");
    }

    #[test]
    fn long_chains_of_operators_load_or_are_refused_without_overflowing_the_stack() {
        for when in [
            format!("{}true", "!".repeat(4000)),
            format!("{}1 == 1", "-".repeat(4000)),
            format!("input{} == 1", ".a".repeat(2000)),
            format!("1{} == 1", " + 1".repeat(1000)),
            format!("true{}", " && true".repeat(500)),
        ] {
            let text = format!("  - {{ tool: pay.send, when: \"{when}\", action: block }}\n");
            if let Err(e) = policy(&text) {
                let e = e.to_string();
                assert!(e.contains("operations deep, above the 100"), "{e}");
            }
        }
        let e = policy(&format!(
            "  - {{ tool: pay.send, when: \"input{} == 1\", action: block }}\n",
            ".a".repeat(2000)
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("operations deep, above the 100"), "{e}");
    }

    #[test]
    fn an_input_nested_as_deep_as_the_protocol_allows_is_evaluated() {
        let policy = policy(
            "  - { tool: pay.send, when: \"has(input.a) && input.a == input.a\", action: block }\n",
        )
        .unwrap();
        let mut nested = json!(1);
        for _ in 0..execbox_protocol::MAX_NESTING_DEPTH - 2 {
            nested = json!([nested]);
        }
        let input = json!({ "a": nested });
        let d = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || decide(&policy, "pay.send", input))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert_eq!((d.action, d.reason), (RuleAction::Block, None));
    }

    #[test]
    fn a_name_both_a_role_and_a_principal_cannot_be_an_approver() {
        let text = "version: 1\nroles:\n  finance: {}\nprincipals:\n  finance: {}\nrules:\n  - { tool: pay.send, action: approve, approvers: [finance] }\n";
        let e = Policy::parse(text, Path::new("policy.yaml"), Path::new("/etc"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`finance` is both a role and a principal of this policy"),
            "{e}"
        );
    }

    #[test]
    fn every_function_the_docs_name_is_known_and_a_typo_is_not() {
        for name in [
            "size",
            "contains",
            "startsWith",
            "endsWith",
            "matches",
            "int",
            "uint",
            "double",
            "string",
            "timestamp",
            "duration",
            "getHours",
            "getDayOfWeek",
            "type",
        ] {
            assert!(known_function(name), "{name}");
        }
        assert!(!known_function("startWith"));
        assert!(!known_function("exec"));
    }

    #[test]
    fn may_ask_counts_every_rule_that_may_ask_until_one_decides_every_call() {
        let policy = policy(
            r#"  - { tool: "pay.refund", action: allow }
  - { tool: "pay.*", when: "input.amount > 100", action: approve, approvers: [finance] }
  - { tool: "mail.*", when: "input.to == 'x'", action: approve }
  - { tool: "mail.send", action: block }
"#,
        )
        .unwrap();
        let rules = policy.rules();
        let requires = |approval: bool| {
            let mut requirements = ToolRequirements::default();
            requirements.requires_approval = approval;
            requirements
        };
        assert_eq!(
            rules.may_ask("pay.refund", "refund", &requires(true)),
            MayAsk::No
        );
        assert_eq!(
            rules.may_ask("pay.send", "send", &requires(false)),
            MayAsk::Named
        );
        assert_eq!(
            rules.may_ask("mail.send", "send", &requires(true)),
            MayAsk::Anyone
        );
        assert_eq!(
            rules.may_ask("mail.draft", "draft", &requires(false)),
            MayAsk::Anyone
        );
        assert_eq!(
            rules.may_ask("fs.read", "read", &requires(false)),
            MayAsk::No
        );
        assert_eq!(
            rules.may_ask("fs.read", "read", &requires(true)),
            MayAsk::Anyone
        );
    }

    #[test]
    fn globs_match_names_and_the_tools_own_names() {
        for (glob, name, want) in [
            ("pay.send", "pay.send", true),
            ("pay.*", "pay.send", true),
            ("pay.*", "payroll.send", false),
            ("*.delete*", "github.delete_repo", true),
            ("*", "a.b", true),
            ("pay.sen?", "pay.send", true),
            ("pay.send", "pay.send_all", false),
            (
                "a*a*a*a*a*b",
                "a.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
        ] {
            assert_eq!(
                Glob::parse(glob).unwrap().matches(name),
                want,
                "{glob} {name}"
            );
        }
        let glob = Glob::parse("gh.delete-all").unwrap();
        let principal = Principal::nobody();
        let input = json!({});
        let call = RuledCall {
            tool: "gh.delete_all",
            original_name: "delete-all",
            input: &input,
            principal: &principal,
        };
        assert!(!glob.matches(call.tool) && glob.matches_original(&call));
    }
}
