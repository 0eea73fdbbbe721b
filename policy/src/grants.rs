//! Permissions and grants: what a tool requires, what a principal holds, and how they match.
//!
//! A permission is a non-empty string without `*` or whitespace, by convention
//! `area:action` (`weather:read`, `email:send`). A grant is one of:
//! - exact: `weather:read` holds `weather:read` only;
//! - a prefix, ending in `:*`: `docs:*` holds every permission that starts with `docs:`
//!   (`docs:read`, `docs:read:drafts`), but not `docs` itself;
//! - `*`: holds every permission.
//!
//! A principal may call a tool when it holds every permission the tool requires; a tool
//! requiring none may be called by anyone.

use std::collections::HashSet;

use execbox_host::check_permission;

/// A set of grants, ready to match permissions against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Grants {
    all: bool,
    exact: HashSet<String>,
    /// Each with its trailing `:`, e.g. `docs:`.
    prefixes: Vec<String>,
}

impl Grants {
    /// Grants holding every permission (`*`).
    pub(crate) fn all() -> Grants {
        Grants {
            all: true,
            ..Grants::default()
        }
    }

    /// Parses grants; the error names the first bad one and why.
    pub(crate) fn parse<'a>(grants: impl IntoIterator<Item = &'a str>) -> Result<Grants, String> {
        let mut parsed = Grants::default();
        for grant in grants {
            parsed.add(grant)?;
        }
        Ok(parsed)
    }

    fn add(&mut self, grant: &str) -> Result<(), String> {
        if grant == "*" {
            self.all = true;
        } else if let Some(prefix) = grant.strip_suffix(":*") {
            check_permission(prefix).map_err(|_| bad_grant(grant))?;
            let prefix = format!("{prefix}:");
            if !self.prefixes.contains(&prefix) {
                self.prefixes.push(prefix);
            }
        } else {
            check_permission(grant).map_err(|_| bad_grant(grant))?;
            self.exact.insert(grant.to_string());
        }
        Ok(())
    }

    /// Adds every grant of `other`.
    pub(crate) fn extend(&mut self, other: &Grants) {
        self.all |= other.all;
        self.exact.extend(other.exact.iter().cloned());
        for prefix in &other.prefixes {
            if !self.prefixes.contains(prefix) {
                self.prefixes.push(prefix.clone());
            }
        }
    }

    /// The exact grants (permissions, not prefixes).
    pub(crate) fn exact(&self) -> impl Iterator<Item = &str> {
        self.exact.iter().map(String::as_str)
    }

    /// Whether these grants hold `permission`.
    pub(crate) fn holds(&self, permission: &str) -> bool {
        self.all
            || self.exact.contains(permission)
            || self
                .prefixes
                .iter()
                .any(|prefix| permission.len() > prefix.len() && permission.starts_with(prefix))
    }

    /// Whether these grants hold every one of `permissions`.
    pub(crate) fn holds_all<S: AsRef<str>>(&self, permissions: &[S]) -> bool {
        permissions.iter().all(|p| self.holds(p.as_ref()))
    }
}

fn bad_grant(grant: &str) -> String {
    format!(
        "{grant:?} is not a grant; write a permission (`weather:read`), a prefix ending in \
         `:*` (`docs:*`), or `*`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Grants {
        Grants::parse(list.iter().copied()).unwrap()
    }

    #[test]
    fn exact_grants_hold_only_themselves() {
        let g = grants(&["weather:read"]);
        assert!(g.holds("weather:read"));
        assert!(!g.holds("weather:write"));
        assert!(!g.holds("weather:read:extra"));
        assert!(!g.holds("weather"));
    }

    #[test]
    fn prefix_grants_hold_what_starts_with_the_prefix_and_a_colon() {
        let g = grants(&["docs:*"]);
        assert!(g.holds("docs:read"));
        assert!(g.holds("docs:read:drafts"));
        assert!(!g.holds("docs"));
        assert!(!g.holds("docs:"));
        assert!(!g.holds("docsx:read"));
        assert!(!g.holds("weather:read"));
        let g = grants(&["a:b:*"]);
        assert!(g.holds("a:b:c"));
        assert!(!g.holds("a:c"));
    }

    #[test]
    fn star_holds_everything_and_nothing_holds_nothing() {
        assert!(grants(&["*"]).holds("anything:at:all"));
        assert!(!grants(&[]).holds("weather:read"));
        assert!(grants(&[]).holds_all::<&str>(&[]));
    }

    #[test]
    fn holds_all_needs_every_permission() {
        let g = grants(&["weather:read", "docs:*"]);
        assert!(g.holds_all(&["weather:read", "docs:search"]));
        assert!(!g.holds_all(&["weather:read", "email:send"]));
    }

    #[test]
    fn extending_merges_grants() {
        let mut g = grants(&["weather:read"]);
        g.extend(&grants(&["docs:*"]));
        assert!(g.holds("weather:read") && g.holds("docs:x"));
        g.extend(&grants(&["*"]));
        assert!(g.holds("email:send"));
    }

    #[test]
    fn bad_grants_and_permissions_are_refused_with_the_reason() {
        for bad in [
            "",
            "docs*",
            "do*cs:read",
            "*:read",
            ":*",
            "a:**",
            "a b",
            "docs:*:x",
        ] {
            let e = Grants::parse([bad]).unwrap_err();
            assert!(e.contains("is not a grant"), "{bad:?}: {e}");
        }
        assert!(check_permission("weather:read").is_ok());
        assert!(check_permission("weather:*")
            .unwrap_err()
            .contains("cannot contain `*`"));
        assert!(check_permission("").is_err());
        assert!(check_permission("a b").is_err());
    }
}
