//! What the upstream servers offer besides tools (resources, prompts, logging), as the pass-through
//! of `execbox mcp` reaches them, and what they announce ([`Notice`]) for its clients.

// Upstream servers still send `notifications/message` (logging), which SEP-2577 deprecates.
#![allow(deprecated)]

use rmcp::model::{LoggingMessageNotificationParam, PaginatedRequestParams, ServerCapabilities};
use rmcp::service::{Peer, RoleClient, RoleServer, ServiceError};

use super::content::one_line;
use super::plain::plain_error;

/// One connected upstream, as the pass-through sees it: its namespace, its name in the config,
/// its connection and what it declared.
#[derive(Clone)]
pub(crate) struct Offer {
    /// Its namespace: the prefix of its prompts' and resources' names.
    pub namespace: String,
    /// Its key in the config.
    pub name: String,
    pub peer: Peer<RoleClient>,
    pub capabilities: ServerCapabilities,
}

impl Offer {
    pub fn resources(&self) -> bool {
        self.capabilities.resources.is_some()
    }

    pub fn subscribe(&self) -> bool {
        self.capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false)
    }

    pub fn prompts(&self) -> bool {
        self.capabilities.prompts.is_some()
    }

    pub fn logging(&self) -> bool {
        self.capabilities.logging.is_some()
    }

    /// What a failed request to this server reads as: `the MCP server "github" answered
    /// resources/read with error -32002: ...`.
    pub fn failed(&self, method: &str, error: &ServiceError) -> String {
        match error {
            ServiceError::McpError(e) => format!(
                "the MCP server {:?} answered {method} with error {}: {}",
                self.name,
                e.code.0,
                one_line(&e.message, 500)
            ),
            other => format!(
                "the MCP server {:?} did not answer {method}: {}",
                self.name,
                plain_error(other, 500)
            ),
        }
    }
}

/// Something an upstream announced that the clients of `execbox mcp` are told.
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// `notifications/resources/updated` for `uri` (as the server names it).
    ResourceUpdated { namespace: String, uri: String },
    /// `notifications/message`.
    Log {
        namespace: String,
        message: LoggingMessageNotificationParam,
    },
}

/// The most items execbox keeps of one upstream's list (resources, templates or prompts), and
/// the most pages it reads for it: a server that lists more is cut there, saying so on stderr.
pub(crate) const MAX_LISTED: usize = 10_000;
const MAX_PAGES: usize = 1_000;

/// Reads every page of a list by `page`, up to [`MAX_LISTED`] items and `MAX_PAGES` pages (a
/// cursor that never ends is cut there too).
pub(crate) async fn every_page<T, F, Fut>(
    offer: &Offer,
    what: &str,
    mut page: F,
) -> Result<Vec<T>, ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (mut listed, next) = page(params).await?;
        if items.len() + listed.len() > MAX_LISTED {
            listed.truncate(MAX_LISTED - items.len());
            items.extend(listed);
            eprintln!(
                "execbox mcp: upstream {:?} lists more than {MAX_LISTED} {what}; keeping the first \
                 {MAX_LISTED}",
                offer.name
            );
            return Ok(items);
        }
        items.extend(listed);
        match next {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(items),
        }
    }
    eprintln!(
        "execbox mcp: upstream {:?} gave more than {MAX_PAGES} pages of {what}; keeping the \
         first {MAX_PAGES}",
        offer.name
    );
    Ok(items)
}

/// Whether two handles of client sessions are the same session (clones of one peer share
/// what the client said about itself at `initialize`).
pub(crate) fn same_session(a: &Peer<RoleServer>, b: &Peer<RoleServer>) -> bool {
    match (a.peer_info(), b.peer_info()) {
        (Some(a), Some(b)) => std::sync::Arc::ptr_eq(&a, &b),
        _ => false,
    }
}
