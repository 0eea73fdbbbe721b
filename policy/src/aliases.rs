//! Other names of a permission: a grant may name a tool by another of its names (an MCP tool
//! by the name `execute_code`'s index shows, `github:delete_all__2`, as well as by the name
//! its server lists, `github:delete_all`), and then holds the permission the tool requires.
//!
//! The front end that knows a tool's names fills [`PermissionAliases`] (it resolves each
//! grant to exactly one tool first, refusing a name that is unknown or means two tools); an
//! [`Enforcement`](crate::Enforcement) given them
//! ([`Enforcement::with_permission_aliases`](crate::Enforcement::with_permission_aliases))
//! counts a grant of an alias as a grant of the permission.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use execbox_host::ToolRequirements;

use super::Principal;

/// Permissions and their other names, shared (cheap to clone) and replaced group by group
/// (an upstream's namespace) as the tools they name change.
#[derive(Clone, Debug, Default)]
pub struct PermissionAliases(Arc<RwLock<HashMap<String, Vec<String>>>>);

impl PermissionAliases {
    /// No aliases.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces every alias of a permission starting with `group:` by `aliases`, each
    /// `(permission, alias)`: a grant of `alias` then holds `permission`.
    pub fn replace_group(&self, group: &str, aliases: impl IntoIterator<Item = (String, String)>) {
        let prefix = format!("{group}:");
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|permission, _| !permission.starts_with(&prefix));
        for (permission, alias) in aliases {
            map.entry(permission).or_default().push(alias);
        }
    }

    /// Whether `principal` holds `permission`, itself or by one of its aliases.
    pub fn holds(&self, principal: &Principal, permission: &str) -> bool {
        principal.holds(permission)
            || self
                .0
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(permission)
                .is_some_and(|aliases| aliases.iter().any(|a| principal.holds(a)))
    }

    /// Whether `principal` holds every permission `tool` requires, each itself or by an alias.
    pub fn may_call(&self, principal: &Principal, tool: &ToolRequirements) -> bool {
        tool.permissions.iter().all(|p| self.holds(principal, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    #[test]
    fn a_grant_of_an_alias_holds_the_permission_until_the_group_is_replaced() {
        let policy = Policy::builder()
            .principal("alice", [] as [&str; 0], ["gh:delete_all__2"])
            .build()
            .unwrap();
        let alice = policy.principal(Some("alice")).unwrap();
        let aliases = PermissionAliases::new();
        assert!(!aliases.holds(&alice, "gh:delete_all"));
        aliases.replace_group("gh", [("gh:delete_all".into(), "gh:delete_all__2".into())]);
        assert!(aliases.holds(&alice, "gh:delete_all"));
        assert!(!aliases.holds(&alice, "gh:delete-all"));
        aliases.replace_group("other", []);
        assert!(aliases.holds(&alice, "gh:delete_all"));
        aliases.replace_group("gh", []);
        assert!(!aliases.holds(&alice, "gh:delete_all"));
    }
}
