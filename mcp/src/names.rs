//! Which upstream tool a name means: the name its server lists (`delete-all`) or the name
//! `execute_code`'s index shows (`delete_all`, or `delete_all__2` when another tool took
//! `delete_all`). `requireApproval` and the policy's grants are resolved here, to exactly one
//! tool each, so that they reach the tool the program calls; a name that is no tool's, or
//! means two, is an error naming the candidates.

use execbox_host::assign_safe_names;
use execbox_host::yaml::did_you_mean;

/// At most this many tools are listed in an error about an unknown name.
const LISTED_IN_ERRORS: usize = 20;

/// The names of one server's tools, in the order it lists them (duplicates dropped).
#[derive(Debug, Clone)]
pub(crate) struct ToolNames {
    listed: Vec<String>,
    safe: Vec<String>,
}

impl ToolNames {
    /// The tools named `listed`, given their safe names as the tool set gives them.
    pub(crate) fn new(listed: Vec<String>) -> ToolNames {
        let safe = assign_safe_names(listed.iter().map(String::as_str));
        ToolNames { listed, safe }
    }

    /// The one tool `name` means, by either of its names; `what` says where the name was
    /// written (`requireApproval names "x"`) for the error.
    fn resolve(&self, name: &str, what: &str) -> Result<usize, String> {
        let candidates: Vec<usize> = (0..self.listed.len())
            .filter(|&i| self.listed[i] == name || self.safe[i] == name)
            .collect();
        match candidates.as_slice() {
            [one] => Ok(*one),
            [] => {
                let mut message = format!("{what}, which is no tool of this server");
                let names = self.listed.iter().chain(&self.safe).map(String::as_str);
                if let Some(near) = did_you_mean(name, names) {
                    message.push_str(&format!(" (did you mean {near:?}?)"));
                }
                if self.listed.is_empty() {
                    message.push_str("; it lists no tools");
                } else {
                    let shown: Vec<String> = (0..self.listed.len().min(LISTED_IN_ERRORS))
                        .map(|i| self.describe(i))
                        .collect();
                    let more = self.listed.len().saturating_sub(LISTED_IN_ERRORS);
                    message.push_str(&format!("; its tools: {}", shown.join(", ")));
                    if more > 0 {
                        message.push_str(&format!(" and {more} more"));
                    }
                }
                Err(message)
            }
            several => {
                let described: Vec<String> = several.iter().map(|&i| self.describe(i)).collect();
                let unique: Vec<String> = several
                    .iter()
                    .map(|&i| format!("{:?}", self.unambiguous(i)))
                    .collect();
                Err(format!(
                    "{what}, which means {} tools: {}; write {} for the one you mean",
                    several.len(),
                    described.join(" and "),
                    unique.join(" or ")
                ))
            }
        }
    }

    /// `"delete-all" (delete_all in the index)`.
    fn describe(&self, i: usize) -> String {
        if self.listed[i] == self.safe[i] {
            format!("{:?}", self.listed[i])
        } else {
            format!("{:?} ({} in the index)", self.listed[i], self.safe[i])
        }
    }

    /// A name of tool `i` that means no other tool: its listed name if it can, else its
    /// safe name (which may still be another's listed name, in contrived cases).
    fn unambiguous(&self, i: usize) -> &str {
        let means_only_i = |name: &str| {
            (0..self.listed.len())
                .all(|j| j == i || (self.listed[j] != name && self.safe[j] != name))
        };
        if means_only_i(&self.listed[i]) {
            &self.listed[i]
        } else {
            &self.safe[i]
        }
    }

    /// For each tool, whether `require` (`requireApproval`: names, or `*`) names it.
    pub(crate) fn approvals(&self, require: &[String]) -> Result<Vec<bool>, String> {
        let mut needed = vec![false; self.listed.len()];
        let mut errors = Vec::new();
        for name in require {
            if name == "*" {
                needed.iter_mut().for_each(|n| *n = true);
                continue;
            }
            match self.resolve(name, &format!("requireApproval names {name:?}")) {
                Ok(i) => needed[i] = true,
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(needed)
        } else {
            Err(errors.join("; "))
        }
    }

    /// The aliases the policy's `grants` need for the tools of `namespace`: for a grant
    /// `namespace:NAME` where NAME is a tool's name in the index and not the name its server
    /// lists, `(namespace:LISTED, namespace:NAME)`, since a tool requires the permission of
    /// its listed name. A grant of this namespace that names no tool, or two, is an error.
    pub(crate) fn grant_aliases<'a>(
        &self,
        namespace: &str,
        grants: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<(String, String)>, String> {
        let mut aliases = Vec::new();
        let mut errors = Vec::new();
        for grant in grants {
            let Some(name) = grant
                .strip_prefix(namespace)
                .and_then(|rest| rest.strip_prefix(':'))
            else {
                continue;
            };
            match self.resolve(name, &format!("the policy grants {grant:?}")) {
                Ok(i) if self.listed[i] != name => {
                    aliases.push((format!("{namespace}:{}", self.listed[i]), grant.to_owned()));
                }
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(aliases)
        } else {
            Err(errors.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn twins() -> ToolNames {
        ToolNames::new(vec![
            "delete-all".into(),
            "delete_all".into(),
            "list".into(),
        ])
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn require_approval_reaches_the_tool_by_either_of_its_names() {
        let names = twins();
        assert_eq!(names.safe, ["delete_all", "delete_all__2", "list"]);
        assert_eq!(
            names.approvals(&strings(&["delete_all__2"])).unwrap(),
            [false, true, false]
        );
        assert_eq!(
            names.approvals(&strings(&["delete-all"])).unwrap(),
            [true, false, false]
        );
        assert_eq!(
            names.approvals(&strings(&["*"])).unwrap(),
            [true, true, true]
        );
        assert_eq!(names.approvals(&[]).unwrap(), [false, false, false]);
    }

    #[test]
    fn an_ambiguous_or_unknown_name_is_an_error_naming_the_candidates() {
        let names = twins();
        let e = names.approvals(&strings(&["delete_all"])).unwrap_err();
        assert_eq!(
            e,
            "requireApproval names \"delete_all\", which means 2 tools: \"delete-all\" \
             (delete_all in the index) and \"delete_all\" (delete_all__2 in the index); write \
             \"delete-all\" or \"delete_all__2\" for the one you mean"
        );
        let e = names.approvals(&strings(&["delete_al"])).unwrap_err();
        assert!(
            e.starts_with(
                "requireApproval names \"delete_al\", which is no tool of this server (did you \
                 mean \"delete_all\"?); its tools: \"delete-all\" (delete_all in the index), \
                 \"delete_all\" (delete_all__2 in the index), \"list\""
            ),
            "{e}"
        );
    }

    #[test]
    fn grants_by_the_index_name_become_aliases_of_the_listed_name() {
        let names = twins();
        let aliases = names
            .grant_aliases(
                "gh",
                [
                    "gh:delete_all__2",
                    "gh:delete-all",
                    "gh:list",
                    "other:x",
                    "gh2:y",
                ],
            )
            .unwrap();
        assert_eq!(
            aliases,
            [("gh:delete_all".to_string(), "gh:delete_all__2".to_string())]
        );
        let e = names.grant_aliases("gh", ["gh:delete_all"]).unwrap_err();
        assert!(
            e.starts_with("the policy grants \"gh:delete_all\", which means 2 tools"),
            "{e}"
        );
        let e = names.grant_aliases("gh", ["gh:nope"]).unwrap_err();
        assert!(e.contains("which is no tool of this server"), "{e}");
    }
}
