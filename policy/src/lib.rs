//! Policy for execbox: who may call which tool, how often, with whose approval, and the
//! record of every call.
//!
//! The core (`execbox-host`) knows no policy; it calls a [`CallGuard`](execbox_host::CallGuard)
//! around every execution and tool call, and [`Enforcement`] is the one this crate gives it.
//!
//! The parts, each usable alone:
//! - tools declare what they need in their [`ToolRequirements`](execbox_host::ToolRequirements)
//!   (in the core): `permissions` (the caller must hold every one), a
//!   [`RateLimit`](execbox_host::RateLimit) per principal, and `requires_approval`; in the
//!   tools file these are optional fields of a tool, and in the library
//!   [`Tool`](execbox_host::Tool) builder methods;
//! - a [`Policy`] says who holds what: roles, principals, the permissions of an execution
//!   without a principal, whether one is required, where rate-limit state and the audit log
//!   go; it comes from a policy file ([`Policy::load`], format in `file.rs`) or a
//!   [`PolicyBuilder`]. [`Policy::principal`] resolves the caller into a [`Principal`];
//! - [`RateLimits`] holds the counters (in memory, in a SQLite state file the processes of a
//!   machine share, or in PostgreSQL, exact across processes and replicas; a
//!   [`StoreLocation`] says which); [`ObservedResults`] keeps the shape of each MCP tool's
//!   last result beside them;
//! - an [`Approver`] decides calls of tools that require approval ([`ApproveAll`],
//!   [`DenyAll`], [`TerminalApprover`], or the embedding application's own); whatever shows
//!   a question to a person passes its text through [`escape_for_display`];
//! - an [`AuditLog`] appends one JSON line per event, to a file or as a row in PostgreSQL;
//! - an [`Enforcement`] puts them together: which tools the principal may see, and for each
//!   call the permission check, the rate limit, the approval and the audit line, in that
//!   order; [`EnforcementOptions`] is the one place where a front end's flags and the policy
//!   file become an enforcement.
//!
//! A grant is exact (`weather:read`), a prefix (`docs:*`) or `*`; see `grants.rs`.

mod aliases;
mod approval;
mod audit;
mod enforcement;
mod file;
mod grants;
mod limits;
mod location;
mod observed;
mod pg_store;
mod rules;
mod shown;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use aliases::PermissionAliases;
pub use approval::{Approval, ApprovalRequest, ApproveAll, Approver, DenyAll, TerminalApprover};
pub use audit::{AuditEvent, AuditLog, AuditOutcome};
pub use enforcement::{AuditedCall, Enforcement, EnforcementOptions};
pub use file::DEFAULT_APPROVE_PERMISSION;
pub use limits::RateLimits;
pub use location::StoreLocation;
pub use observed::ObservedResults;
pub use rules::{RuleAction, RuleDecision, MAX_RULE_COST, MAX_WHEN_CHARS};
pub use shown::{escape_for_display, shown_input, MAX_SHOWN_INPUT_CHARS};

use execbox_host::yaml::{did_you_mean, YamlError};
use execbox_host::{RateLimit, RateLimitError, ToolRequirements};
use grants::Grants;

/// Why a policy cannot be loaded or used, or why it refuses.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file cannot be read, or is not YAML of the expected shape.
    #[error(transparent)]
    File(#[from] YamlError),
    /// A value of the policy is not acceptable; `at` is its YAML path.
    #[error("{}{at}: {message}", Prefix(path))]
    Invalid {
        /// The policy file (empty for a policy built in code).
        path: PathBuf,
        /// The YAML path of the value, e.g. `principals.alice.roles`.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// A rate limit is not acceptable.
    #[error(transparent)]
    InvalidRateLimit(#[from] RateLimitError),
    /// A principal was named where each caller is named by its request (a usage error).
    #[error("a fixed principal does not apply here: each caller is the principal its bearer token belongs to (token_sha256 in the policy)")]
    PrincipalPerRequest,
    /// A principal was named without a policy to find it in (a usage error).
    #[error("a principal was named without a policy: give the policy file too (--policy)")]
    PrincipalWithoutPolicy,
    /// The principal named is not in the policy (a usage error: exit 2 in the CLI).
    #[error(
        "unknown principal `{name}`{}; the policy names {}",
        Suggestion(suggestion.as_deref()),
        Known(known)
    )]
    UnknownPrincipal {
        /// The name given.
        name: String,
        /// The closest name the policy has, if one is close.
        suggestion: Option<String>,
        /// The names the policy has.
        known: Vec<String>,
    },
    /// The policy requires a principal and none was given (a usage error).
    #[error("the policy requires a principal (`require_principal: true`), and none was given")]
    PrincipalRequired,
    /// A bearer token matches no principal's `token_sha256`.
    #[error("the token belongs to no principal of the policy")]
    UnknownToken,
    /// A call would exceed its rate limit.
    #[error(
        "rate limit exceeded for {tool}: {limit}; retry in {} s",
        retry_secs(*retry_after)
    )]
    RateLimited {
        /// `provider.tool`.
        tool: String,
        /// The limit.
        limit: RateLimit,
        /// How long until a call would be admitted.
        retry_after: Duration,
    },
    /// The rate-limit state file cannot be opened or used; calls are refused meanwhile.
    #[error("rate-limit state file {}: {message}", path.display())]
    State {
        /// The state file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The policy's PostgreSQL database (rate limits, observed results) cannot be used;
    /// rate-limited calls are refused meanwhile. Shown in plain words, naming no database (a
    /// model may read it); the whole error, URL masked, is logged where it happened.
    #[error("rate-limit state: {}", .0.plain())]
    SharedState(execbox_pg::PgError),
    /// The audit log's PostgreSQL database cannot be written: the execution must fail closed.
    /// Shown in plain words, naming no database (the model reads it as the execution's
    /// error); the whole error, URL masked, is logged where it happened.
    #[error("cannot write the audit log: {}; refusing to run unaudited", .0.plain())]
    AuditDatabase(execbox_pg::PgError),
    /// The audit log cannot be opened or written: the execution must fail closed.
    #[error("cannot write the audit log {}: {source}; refusing to run unaudited", path.display())]
    Audit {
        /// The audit file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Whole seconds to wait, rounded up, at least 1.
fn retry_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

struct Prefix<'a>(&'a Path);

impl fmt::Display for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.as_os_str().is_empty() {
            Ok(())
        } else {
            write!(f, "{}: ", self.0.display())
        }
    }
}

struct Suggestion<'a>(Option<&'a str>);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) => write!(f, " (did you mean `{s}`?)"),
            None => Ok(()),
        }
    }
}

struct Known<'a>(&'a [String]);

impl fmt::Display for Known<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no principals");
        }
        let names: Vec<String> = self.0.iter().map(|n| format!("`{n}`")).collect();
        f.write_str(&names.join(", "))
    }
}

/// Who is calling, resolved against a [`Policy`]: a name (or none) and the grants it holds.
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Principal {
    name: Option<Arc<str>>,
    grants: Arc<Grants>,
    roles: Arc<[String]>,
}

impl Principal {
    /// The principal's name; `None` for an execution without one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The roles the policy gives the principal, as its file lists them.
    pub fn roles(&self) -> &[String] {
        &self.roles
    }

    /// Whether the principal is one of `approvers` (principal names or roles, as a policy
    /// rule's `approvers` lists them).
    pub fn is_one_of(&self, approvers: &[String]) -> bool {
        approvers
            .iter()
            .any(|a| self.name.as_deref() == Some(a.as_str()) || self.roles.iter().any(|r| r == a))
    }

    /// Whether the principal holds `permission`.
    pub fn holds(&self, permission: &str) -> bool {
        self.grants.holds(permission)
    }

    /// Whether the principal holds every permission `tool` requires: if not, the tool does
    /// not exist for it (left out of manifests and declarations, refused at dispatch).
    pub fn may_call(&self, tool: &ToolRequirements) -> bool {
        self.grants.holds_all(&tool.permissions)
    }

    /// Nobody in particular, holding nothing: tools that require a permission are hidden.
    pub fn nobody() -> Principal {
        Principal {
            name: None,
            grants: Arc::new(Grants::default()),
            roles: Arc::new([]),
        }
    }

    /// The principal of an execution without a policy: nobody in particular, holding every
    /// permission.
    pub fn unrestricted() -> Principal {
        Principal {
            name: None,
            grants: Arc::new(Grants::all()),
            roles: Arc::new([]),
        }
    }

    /// The rate-limit key.
    pub(crate) fn key(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }
}

/// Who holds which permissions: roles, principals, the permissions of an execution without a
/// principal, and where rate-limit state and the audit log are kept.
///
/// Load one from a policy file with [`Policy::load`], or build one:
///
/// ```
/// use execbox_policy::Policy;
///
/// let policy = Policy::builder()
///     .role("reader", ["weather:read", "docs:*"])
///     .principal("alice", ["reader"], [] as [&str; 0])
///     .principal("ops", ["reader"], ["email:send"])
///     .build()
///     .unwrap();
/// let alice = policy.principal(Some("alice")).unwrap();
/// assert!(alice.holds("docs:search") && !alice.holds("email:send"));
/// assert!(policy.principal(Some("mallory")).is_err());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Policy(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// Each principal's grants and roles.
    principals: BTreeMap<String, (Arc<Grants>, Arc<[String]>)>,
    /// Rules on calls' arguments, in order.
    rules: rules::Rules,
    default_grants: Arc<Grants>,
    require_principal: bool,
    /// SHA-256 of a bearer token → principal name.
    tokens: HashMap<[u8; 32], String>,
    state: Option<StoreLocation>,
    audit: Option<StoreLocation>,
    audit_include_input: bool,
    /// The permission an approver of a paused execution must hold.
    approve_permission: String,
    /// Whether a principal may approve the executions it started.
    self_approval: bool,
}

impl Policy {
    /// The empty policy: no roles, no principals, nothing granted to an execution without a
    /// principal (so tools that require a permission are hidden), principal not required.
    pub fn new() -> Policy {
        Policy::default()
    }

    /// A builder, for a policy written in code.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// Resolves the caller: `Some(name)` must be a principal of the policy, and `None` is
    /// allowed unless the policy requires a principal (it then holds `default_permissions`).
    pub fn principal(&self, name: Option<&str>) -> Result<Principal, PolicyError> {
        match name {
            None if self.0.require_principal => Err(PolicyError::PrincipalRequired),
            None => Ok(Principal {
                name: None,
                grants: self.0.default_grants.clone(),
                roles: Arc::new([]),
            }),
            Some(name) => match self.0.principals.get(name) {
                Some((grants, roles)) => Ok(Principal {
                    name: Some(Arc::from(name)),
                    grants: grants.clone(),
                    roles: roles.clone(),
                }),
                None => Err(PolicyError::UnknownPrincipal {
                    name: name.to_string(),
                    suggestion: did_you_mean(name, self.0.principals.keys().map(String::as_str))
                        .map(str::to_string),
                    known: self.0.principals.keys().cloned().collect(),
                }),
            },
        }
    }

    /// The principal a bearer token belongs to (by the SHA-256 digests in the principals'
    /// `token_sha256`).
    pub fn principal_for_token(&self, token: &str) -> Result<Principal, PolicyError> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let digest: [u8; 32] = digest.as_ref().try_into().expect("SHA-256 is 32 bytes");
        match self.0.tokens.get(&digest) {
            Some(name) => self.principal(Some(name)),
            None => Err(PolicyError::UnknownToken),
        }
    }

    /// Whether any principal has a bearer token (`token_sha256`): a server may then require
    /// one of every caller.
    pub fn has_tokens(&self) -> bool {
        !self.0.tokens.is_empty()
    }

    /// Every exact grant (a permission, not a prefix nor `*`) that a principal or an
    /// execution without one holds, sorted: what a front end checks against the names of its
    /// tools.
    pub fn exact_grants(&self) -> std::collections::BTreeSet<&str> {
        self.0
            .principals
            .values()
            .map(|(grants, _)| grants)
            .chain(std::iter::once(&self.0.default_grants))
            .flat_map(|grants| grants.exact())
            .collect()
    }

    /// Whether an execution must name a principal.
    pub fn requires_principal(&self) -> bool {
        self.0.require_principal
    }

    /// The principals' names, sorted.
    pub fn principal_names(&self) -> impl Iterator<Item = &str> {
        self.0.principals.keys().map(String::as_str)
    }

    /// Where rate-limit counters and observed results are kept (`state:`, a file resolved
    /// against the policy's folder or a `postgres://` URL), if the policy says.
    pub fn state(&self) -> Option<&StoreLocation> {
        self.0.state.as_ref()
    }

    /// Where the audit log goes (`audit.file`, a file resolved against the policy's folder or
    /// a `postgres://` URL), if the policy says.
    pub fn audit_log(&self) -> Option<&StoreLocation> {
        self.0.audit.as_ref()
    }

    /// Whether audit lines carry tool inputs (`audit.include_input`; off by default, since
    /// inputs carry secrets).
    pub fn audit_includes_input(&self) -> bool {
        self.0.audit_include_input
    }

    /// The permission a principal must hold to approve (or deny) the call a paused
    /// execution waits on: `approvals.permission`, by default
    /// [`DEFAULT_APPROVE_PERMISSION`] (`executions:approve`).
    pub fn approve_permission(&self) -> &str {
        if self.0.approve_permission.is_empty() {
            DEFAULT_APPROVE_PERMISSION
        } else {
            &self.0.approve_permission
        }
    }

    /// The rules on calls' arguments (`rules:`), in order.
    pub(crate) fn rules(&self) -> &rules::Rules {
        &self.0.rules
    }

    /// Whether the policy has rules on calls' arguments.
    pub fn has_rules(&self) -> bool {
        !self.0.rules.is_empty()
    }

    /// Whether the principal that started an execution may approve its calls
    /// (`approvals.self_approval`, off by default: a second person decides).
    pub fn allows_self_approval(&self) -> bool {
        self.0.self_approval
    }
}

/// Builds a [`Policy`] in code; [`PolicyBuilder::build`] checks it as a policy file is.
#[derive(Clone, Debug, Default)]
pub struct PolicyBuilder {
    def: file::PolicyDef,
}

fn strings(items: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    items.into_iter().map(Into::into).collect()
}

impl PolicyBuilder {
    /// Adds a role holding `permissions` (grants).
    pub fn role(
        mut self,
        name: impl Into<String>,
        permissions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.def.roles.insert(
            name.into(),
            file::RoleDef {
                permissions: strings(permissions),
            },
        );
        self
    }

    /// Adds a principal holding the grants of `roles` plus `permissions`.
    pub fn principal(
        mut self,
        name: impl Into<String>,
        roles: impl IntoIterator<Item = impl Into<String>>,
        permissions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.def.principals.insert(
            name.into(),
            file::PrincipalDef {
                roles: strings(roles),
                permissions: strings(permissions),
                token_sha256: Vec::new(),
            },
        );
        self
    }

    /// Maps bearer tokens whose SHA-256 is `hex_digest` to `principal` (added before).
    pub fn token_sha256(mut self, principal: &str, hex_digest: impl Into<String>) -> Self {
        if let Some(p) = self.def.principals.get_mut(principal) {
            p.token_sha256.push(hex_digest.into());
        }
        self
    }

    /// The grants of an execution without a principal.
    pub fn default_permissions(
        mut self,
        permissions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.def.default_permissions = strings(permissions);
        self
    }

    /// Whether an execution must name a principal.
    pub fn require_principal(mut self, required: bool) -> Self {
        self.def.require_principal = required;
        self
    }

    /// Where rate-limit counters are kept: a file, or a `postgres://` URL.
    pub fn state(mut self, location: impl fmt::Display) -> Self {
        self.def.state = Some(location.to_string());
        self
    }

    /// Where the audit log goes (a file, or a `postgres://` URL), and whether its lines carry
    /// tool inputs.
    pub fn audit(mut self, location: impl fmt::Display, include_input: bool) -> Self {
        self.def.audit = Some(file::AuditDef {
            file: location.to_string(),
            include_input,
        });
        self
    }

    /// Who may approve a paused execution's call: principals holding `permission` (by
    /// default `executions:approve`), and whether one may approve its own execution's.
    pub fn approvals(mut self, permission: impl Into<String>, self_approval: bool) -> Self {
        self.def.approvals = Some(file::ApprovalsDef {
            permission: Some(permission.into()),
            self_approval,
        });
        self
    }

    /// Adds a rule on calls' arguments (after those added before; the first that matches a
    /// call decides it): `tool` a tool or glob (`pay.*`), `when` a CEL condition (`None`:
    /// every call of those tools), `approvers` for [`RuleAction::Approve`].
    pub fn rule(
        mut self,
        tool: impl Into<String>,
        when: Option<&str>,
        action: RuleAction,
        approvers: impl IntoIterator<Item = impl Into<String>>,
        reason: Option<&str>,
    ) -> Self {
        self.def
            .rules
            .push(execbox_host::yaml::unplaced(rules::RuleDef {
                name: None,
                tool: tool.into(),
                when: when.map(|w| execbox_host::yaml::unplaced(w.to_string())),
                action,
                approvers: strings(approvers),
                reason: reason.map(str::to_string),
            }));
        self
    }

    /// Checks the policy: every grant well formed, every role a principal names defined,
    /// every token digest 64 hex digits and used once.
    pub fn build(self) -> Result<Policy, PolicyError> {
        self.def.resolve(Path::new(""), Path::new("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_resolve_with_their_roles_and_own_permissions() {
        let policy = Policy::builder()
            .role("reader", ["weather:read", "docs:*"])
            .principal("alice", ["reader"], [] as [&str; 0])
            .principal("ops", ["reader"], ["email:send"])
            .default_permissions(["weather:read"])
            .build()
            .unwrap();
        let alice = policy.principal(Some("alice")).unwrap();
        assert_eq!(alice.name(), Some("alice"));
        assert!(alice.holds("weather:read") && alice.holds("docs:x"));
        assert!(!alice.holds("email:send"));
        let ops = policy.principal(Some("ops")).unwrap();
        assert!(ops.holds("email:send") && ops.holds("docs:x"));
        let nobody = policy.principal(None).unwrap();
        assert_eq!(nobody.name(), None);
        assert!(nobody.holds("weather:read") && !nobody.holds("docs:x"));
        let mut tool = ToolRequirements::default();
        tool.permissions = vec!["weather:read".into(), "email:send".into()];
        assert!(ops.may_call(&tool) && !alice.may_call(&tool));
        assert!(nobody.may_call(&ToolRequirements::default()));
    }

    #[test]
    fn an_unknown_principal_is_an_error_with_a_suggestion() {
        let policy = Policy::builder()
            .principal("alice", [] as [&str; 0], [] as [&str; 0])
            .principal("ops", [] as [&str; 0], [] as [&str; 0])
            .build()
            .unwrap();
        assert_eq!(
            policy.principal(Some("alcie")).unwrap_err().to_string(),
            "unknown principal `alcie` (did you mean `alice`?); the policy names `alice`, `ops`"
        );
        assert_eq!(
            Policy::new().principal(Some("x")).unwrap_err().to_string(),
            "unknown principal `x`; the policy names no principals"
        );
    }

    #[test]
    fn a_required_principal_must_be_given() {
        let policy = Policy::builder().require_principal(true).build().unwrap();
        assert!(matches!(
            policy.principal(None),
            Err(PolicyError::PrincipalRequired)
        ));
        assert!(!Policy::new().requires_principal());
        assert!(Policy::new().principal(None).is_ok());
    }

    #[test]
    fn tokens_map_to_principals_by_their_digest() {
        let digest = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"; // "secret"
        let policy = Policy::builder()
            .principal("alice", [] as [&str; 0], ["x:y"])
            .token_sha256("alice", digest)
            .build()
            .unwrap();
        let p = policy.principal_for_token("secret").unwrap();
        assert_eq!(p.name(), Some("alice"));
        assert!(matches!(
            policy.principal_for_token("guess"),
            Err(PolicyError::UnknownToken)
        ));
    }

    #[test]
    fn rate_limit_errors_round_the_wait_up_to_whole_seconds() {
        let e = PolicyError::RateLimited {
            tool: "weather.get".into(),
            limit: RateLimit::new(100, Duration::from_secs(3600)).unwrap(),
            retry_after: Duration::from_millis(33_200),
        };
        assert_eq!(
            e.to_string(),
            "rate limit exceeded for weather.get: 100 per 1h; retry in 34 s"
        );
        assert_eq!(retry_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_secs(Duration::ZERO), 1);
        assert_eq!(retry_secs(Duration::from_secs(20)), 20);
    }
}
