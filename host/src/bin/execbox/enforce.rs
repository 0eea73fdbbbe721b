//! The policy flags (`--policy --principal --audit-log --state --approve-all`) turned into
//! what enforces them: a principal, a rate-limit store and an audit log.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use execbox_host::{AuditLog, Policy, Principal, RateLimits};

use crate::args::{EnforceArgs, PolicyArgs};

/// What `--policy` and its companions resolve to.
#[derive(Debug, Default)]
pub struct Enforcement {
    /// The principal (`--principal`, or the policy's default), with a policy only.
    pub principal: Option<Principal>,
    /// `--state` or the policy's `state`, if either.
    pub rate_limits: Option<Arc<RateLimits>>,
    /// `--audit-log` or the policy's `audit.file`, if either.
    pub audit: Option<Arc<AuditLog>>,
    /// `--approve-all`.
    pub approve_all: bool,
}

/// The policy file and the principal it resolves, or neither.
pub fn load_policy(args: &PolicyArgs) -> anyhow::Result<Option<(Policy, Principal)>> {
    let Some(path) = &args.policy else {
        return Ok(None);
    };
    let policy = Policy::load(path)?;
    let principal = policy
        .principal(args.principal.as_deref())
        .with_context(|| format!("--principal (policy {})", path.display()))?;
    Ok(Some((policy, principal)))
}

/// The audit log: `audit_log` (the flag), else the policy's `audit.file`; none without either.
pub fn open_audit(
    audit_log: Option<&PathBuf>,
    policy: Option<&Policy>,
) -> anyhow::Result<Option<Arc<AuditLog>>> {
    let path = audit_log
        .cloned()
        .or_else(|| policy.and_then(|p| p.audit_file().map(Into::into)));
    let Some(path) = path else { return Ok(None) };
    let include_input = policy.is_some_and(Policy::audit_includes_input);
    Ok(Some(Arc::new(AuditLog::open(&path, include_input)?)))
}

impl Enforcement {
    /// Loads the policy, opens the state file and the audit log; any failure is a usage error
    /// before anything runs.
    pub fn load(args: &EnforceArgs) -> anyhow::Result<Enforcement> {
        let (policy, principal) = match load_policy(&args.policy)? {
            Some((policy, principal)) => (Some(policy), Some(principal)),
            None => (None, None),
        };
        let state: Option<PathBuf> = args
            .state
            .clone()
            .or_else(|| policy.as_ref().and_then(|p| p.state_file().map(Into::into)));
        let rate_limits = match state {
            Some(state) => Some(Arc::new(RateLimits::open(&state)?)),
            None => None,
        };
        let audit = open_audit(args.audit_log.as_ref(), policy.as_ref())?;
        Ok(Enforcement {
            principal,
            rate_limits,
            audit,
            approve_all: args.approve_all,
        })
    }
}
