//! The policy file (`--policy policy.yaml`), version 1, read strictly (see `yaml.rs`).
//!
//! ```yaml
//! version: 1                        # required
//! roles:                            # optional; role -> the permissions (grants) it holds
//!   reader: { permissions: ["weather:read", "docs:*"] }
//! principals:                       # optional; principal -> its roles and own permissions
//!   alice: { roles: [reader] }
//!   ops:   { roles: [reader], permissions: ["email:send"] }
//!   bot:   { roles: [reader], token_sha256: [<64 hex digits>] }   # bearer tokens, by digest
//! default_permissions: []           # optional; what an execution without a principal holds
//! require_principal: false          # optional; true: an execution must name a principal
//! state: ./execbox-state.db         # optional; rate-limit counters: a SQLite file or postgres://
//! audit: { file: ./audit.jsonl, include_input: false }   # optional; the audit log: a file or postgres://
//! approvals: { permission: "executions:approve", self_approval: false }   # optional; who may
//!                                   # approve a paused execution's call, and whether the
//!                                   # principal that started it may
//! rules:                            # optional; rules on a call's arguments (see `rules.rs`)
//!   - { tool: "pay.send", when: "input.amount > 100", action: approve, approvers: [finance] }
//! ```
//!
//! - A grant is exact (`weather:read`), a prefix ending in `:*` (`docs:*`), or `*`.
//! - Every role a principal names must be defined; unknown fields, duplicate keys and values
//!   of the wrong type are errors that name the file, the line and the field.
//! - Relative `state` and `audit.file` paths resolve against the policy file's directory; a
//!   `postgres://` (or `postgresql://`) URL is a database (see `pg_store.rs`), used as it is.
//! - `token_sha256` holds SHA-256 digests of bearer tokens (never the tokens), lower- or
//!   upper-case hex; a digest may belong to one principal only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use execbox_host::yaml::{self, base_dir, did_you_mean, Spanned};
use serde::Deserialize;

use super::grants::Grants;
use super::rules::{RuleDef, Rules};
use super::{Inner, Policy, PolicyError, StoreLocation};

/// The policy file version this host reads.
pub const POLICY_FILE_VERSION: u64 = 1;

/// The permission that lets a principal approve a paused execution's call, unless the
/// policy's `approvals.permission` names another.
pub const DEFAULT_APPROVE_PERMISSION: &str = "executions:approve";

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyDef {
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    pub(super) roles: BTreeMap<String, RoleDef>,
    #[serde(default)]
    pub(super) principals: BTreeMap<String, PrincipalDef>,
    #[serde(default)]
    pub(super) default_permissions: Vec<String>,
    #[serde(default)]
    pub(super) require_principal: bool,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) audit: Option<AuditDef>,
    #[serde(default)]
    pub(super) approvals: Option<ApprovalsDef>,
    #[serde(default)]
    pub(super) rules: Vec<Spanned<RuleDef>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsDef {
    #[serde(default)]
    pub(super) permission: Option<String>,
    #[serde(default)]
    pub(super) self_approval: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RoleDef {
    #[serde(default)]
    pub(super) permissions: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PrincipalDef {
    #[serde(default)]
    pub(super) roles: Vec<String>,
    #[serde(default)]
    pub(super) permissions: Vec<String>,
    #[serde(default)]
    pub(super) token_sha256: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditDef {
    pub(super) file: String,
    #[serde(default)]
    pub(super) include_input: bool,
}

impl Policy {
    /// Reads and checks a policy file; relative paths in it resolve against its directory.
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let def: PolicyDef = yaml::from_file(path)?;
        def.check_version(path)?;
        def.resolve(path, &base_dir(path))
    }

    /// Checks the text of a policy file. `path` is only used in error messages; relative
    /// paths resolve against `base_dir`.
    pub fn parse(text: &str, path: &Path, base_dir: &Path) -> Result<Policy, PolicyError> {
        let def: PolicyDef = yaml::from_str(text, path)?;
        def.check_version(path)?;
        def.resolve(path, base_dir)
    }
}

impl PolicyDef {
    fn check_version(&self, path: &Path) -> Result<(), PolicyError> {
        let invalid = |message: String| PolicyError::Invalid {
            path: path.to_path_buf(),
            at: "version".into(),
            message,
        };
        match self.version {
            Some(POLICY_FILE_VERSION) => Ok(()),
            Some(v) => Err(invalid(format!(
                "unsupported version {v}; this execbox reads version {POLICY_FILE_VERSION}"
            ))),
            None => Err(invalid(format!(
                "is required (write `version: {POLICY_FILE_VERSION}`)"
            ))),
        }
    }

    /// Checks every value and builds the policy.
    pub(super) fn resolve(self, path: &Path, base_dir: &Path) -> Result<Policy, PolicyError> {
        let invalid = |at: String, message: String| PolicyError::Invalid {
            path: path.to_path_buf(),
            at,
            message,
        };
        let mut roles = HashMap::new();
        for (name, role) in &self.roles {
            let at = format!("roles.{name}");
            check_name(name).map_err(|m| invalid(at.clone(), m))?;
            let grants = Grants::parse(role.permissions.iter().map(String::as_str))
                .map_err(|m| invalid(format!("{at}.permissions"), m))?;
            roles.insert(name.as_str(), grants);
        }
        let mut principals = BTreeMap::new();
        let mut tokens = HashMap::new();
        for (name, def) in &self.principals {
            let at = format!("principals.{name}");
            check_name(name).map_err(|m| invalid(at.clone(), m))?;
            let mut grants = Grants::parse(def.permissions.iter().map(String::as_str))
                .map_err(|m| invalid(format!("{at}.permissions"), m))?;
            for role in &def.roles {
                let Some(role_grants) = roles.get(role.as_str()) else {
                    let suggestion = did_you_mean(role, roles.keys().copied())
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    return Err(invalid(
                        format!("{at}.roles"),
                        format!(
                            "unknown role `{role}`{suggestion} (roles are defined under `roles:`)"
                        ),
                    ));
                };
                grants.extend(role_grants);
            }
            for hex in &def.token_sha256 {
                let digest = parse_digest(hex).ok_or_else(|| {
                    invalid(
                        format!("{at}.token_sha256"),
                        "must be SHA-256 digests, 64 hex digits each (e.g. the output of \
                         `printf %s TOKEN | sha256sum`)"
                            .into(),
                    )
                })?;
                if let Some(other) = tokens.insert(digest, name.clone()) {
                    return Err(invalid(
                        format!("{at}.token_sha256"),
                        format!("a token digest of `{other}` is repeated here; a token names one principal"),
                    ));
                }
            }
            principals.insert(
                name.clone(),
                (
                    Arc::new(grants),
                    def.roles.iter().cloned().collect::<Arc<[String]>>(),
                ),
            );
        }
        let default_grants = Grants::parse(self.default_permissions.iter().map(String::as_str))
            .map_err(|m| invalid("default_permissions".into(), m))?;
        let resolve = |at: &str, p: &str| -> Result<StoreLocation, PolicyError> {
            if p.trim().is_empty() {
                return Err(invalid(at.into(), "must not be empty".into()));
            }
            let location =
                StoreLocation::parse(p).map_err(|e| invalid(at.into(), e.to_string()))?;
            Ok(location.resolved_against(base_dir))
        };
        let state = self
            .state
            .as_deref()
            .map(|p| resolve("state", p))
            .transpose()?;
        let (audit, audit_include_input) = match &self.audit {
            Some(a) => (Some(resolve("audit.file", &a.file)?), a.include_input),
            None => (None, false),
        };
        let approvals = self.approvals.clone().unwrap_or_default();
        let approve_permission = approvals
            .permission
            .unwrap_or_else(|| DEFAULT_APPROVE_PERMISSION.to_string());
        Grants::parse([approve_permission.as_str()])
            .map_err(|m| invalid("approvals.permission".into(), m))?;
        let role_names = roles.keys().copied().collect();
        let principal_names = self.principals.keys().map(String::as_str).collect();
        let rules = Rules::compile(&self.rules, path, &role_names, &principal_names)?;
        Ok(Policy(Arc::new(Inner {
            rules,
            approve_permission,
            self_approval: approvals.self_approval,
            principals,
            default_grants: Arc::new(default_grants),
            require_principal: self.require_principal,
            tokens,
            state,
            audit,
            audit_include_input,
        })))
    }
}

/// Role and principal names: non-empty, no spaces or control characters.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err("a name must be non-empty, without spaces or control characters".into())
    } else {
        Ok(())
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
version: 1
roles:
  reader: { permissions: ["weather:read", "docs:*"] }
principals:
  alice: { roles: [reader] }
  ops:   { roles: [reader], permissions: ["email:send"] }
default_permissions: []
require_principal: false
state: ./execbox-state.db
audit: { file: ./audit.jsonl, include_input: false }
"#;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text, Path::new("policy.yaml"), Path::new("/etc/execbox"))
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn the_issue_example_loads() {
        let policy = parse(EXAMPLE).unwrap();
        assert_eq!(
            policy.principal_names().collect::<Vec<_>>(),
            ["alice", "ops"]
        );
        let ops = policy.principal(Some("ops")).unwrap();
        assert!(ops.holds("email:send") && ops.holds("docs:read") && ops.holds("weather:read"));
        let alice = policy.principal(Some("alice")).unwrap();
        assert!(!alice.holds("email:send"));
        assert!(!policy.principal(None).unwrap().holds("weather:read"));
        assert_eq!(
            policy.state().and_then(StoreLocation::file),
            Some(Path::new("/etc/execbox/./execbox-state.db"))
        );
        assert_eq!(
            policy.audit_log().and_then(StoreLocation::file),
            Some(Path::new("/etc/execbox/./audit.jsonl"))
        );
        assert!(!policy.audit_includes_input());
        assert!(!policy.requires_principal());
    }

    #[test]
    fn a_minimal_file_is_the_empty_policy() {
        let policy = parse("version: 1\n").unwrap();
        assert!(policy.principal_names().next().is_none());
        assert!(policy.state().is_none() && policy.audit_log().is_none());
    }

    #[test]
    fn a_postgres_url_is_a_database_and_is_not_resolved_against_the_folder() {
        let policy = parse(
            "version: 1\n\
             state: postgres://execbox:s3cret@db.internal:5432/execbox\n\
             audit: { file: \"postgresql://execbox@db.internal/audit?sslmode=require\" }\n",
        )
        .unwrap();
        let Some(StoreLocation::Postgres(url)) = policy.state() else {
            panic!("{:?}", policy.state());
        };
        assert_eq!(
            url.to_string(),
            "postgres://execbox:***@db.internal:5432/execbox"
        );
        let Some(StoreLocation::Postgres(url)) = policy.audit_log() else {
            panic!("{:?}", policy.audit_log());
        };
        assert_eq!(
            url.to_string(),
            "postgresql://execbox@db.internal:5432/audit?sslmode=require"
        );
        let e = error("version: 1\nstate: postgres://u:s3cret@db:port/x\n");
        assert!(e.starts_with("policy.yaml: state: database URL"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn errors_name_the_file_the_place_and_the_fix() {
        let cases = [
            ("roles: {}", "policy.yaml: version: is required"),
            ("version: 2", "policy.yaml: version: unsupported version 2"),
            (
                "version: 1\nprincipals:\n  alice: { roles: [raeder] }\nroles:\n  reader: {}\n",
                "policy.yaml: principals.alice.roles: unknown role `raeder`; did you mean `reader`?",
            ),
            (
                "version: 1\nroles:\n  r: { permissions: [\"docs*\"] }\n",
                "policy.yaml: roles.r.permissions: \"docs*\" is not a grant",
            ),
            (
                "version: 1\ndefault_permissions: [\"*:x\"]\n",
                "policy.yaml: default_permissions: \"*:x\" is not a grant",
            ),
            (
                "version: 1\nprincipals:\n  alice:\n    role: [reader]\n",
                "policy.yaml:4:5: principals.alice: unknown field `role`; did you mean `roles`?",
            ),
            (
                "version: 1\nrequire_principals: true\n",
                "policy.yaml:2:1: unknown field `require_principals`; did you mean `require_principal`?",
            ),
            (
                "version: 1\nprincipals:\n  alice: {}\n  alice: {}\n",
                "policy.yaml:4:",
            ),
            (
                "version: 1\nrequire_principal: sometimes\n",
                "policy.yaml:2:",
            ),
            (
                "version: 1\naudit: { include_input: true }\n",
                "missing field `file`",
            ),
            (
                "version: 1\nprincipals:\n  bot: { token_sha256: [abc] }\n",
                "policy.yaml: principals.bot.token_sha256: must be SHA-256 digests",
            ),
            ("version: 1\nstate: \"\"\n", "policy.yaml: state: must not be empty"),
        ];
        for (text, want) in cases {
            let got = error(text);
            assert!(
                got.starts_with(want) || got.contains(want),
                "{text:?}\n  got: {got}\n want: {want}"
            );
        }
        let digest = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
        let got = error(&format!(
            "version: 1\nprincipals:\n  a: {{ token_sha256: [{digest}] }}\n  b: {{ token_sha256: [{digest}] }}\n"
        ));
        assert!(
            got.contains("a token digest of `a` is repeated here"),
            "{got}"
        );
    }

    #[test]
    fn a_policy_file_on_disk_resolves_paths_against_its_directory() {
        let dir = std::env::temp_dir().join(format!("execbox-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("policy.yaml");
        std::fs::write(&file, EXAMPLE).unwrap();
        let policy = Policy::load(&file).unwrap();
        assert_eq!(
            policy.audit_log().and_then(StoreLocation::file).unwrap(),
            dir.join("./audit.jsonl")
        );
        let e = Policy::load(dir.join("missing.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read "), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
