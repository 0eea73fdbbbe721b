//! Upstream resources served by `execbox mcp`: one list of every server's resources and
//! templates (names prefixed by the namespace), reads and subscriptions routed to the server
//! a URI belongs to, and `notifications/resources/updated` taken back to the clients that
//! subscribed.
//!
//! URIs stay as the servers give them, so a URI a tool returned can be read as it is. A URI
//! two servers both list (or one starting `execbox:`) is listed once per server as
//! `execbox://NAMESPACE/URI` (the server's URI after the namespace, verbatim), and that form is
//! read from that server alone; it works for every URI, and for templates (expanding
//! `execbox://docs/file:///{path}` gives such a URI). An unqualified URI goes to the one server
//! that lists it, else the one server with a template it matches, else, with a single
//! server offering resources, to that server; anything else is an error naming the URI.

// `resources/subscribe` is deprecated by MCP 2026-07-28, yet servers before it still use it.
#![allow(deprecated)]

use std::collections::HashMap;

use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceTemplate, ResourceUpdatedNotificationParam,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleServer};
use rmcp::ErrorData;
use serde_json::{json, Value};

use super::offers::{every_page, same_session, Offer};

/// The scheme of a URI qualified by its namespace.
const QUALIFIED: &str = "execbox://";

/// `uri` of the server of `namespace`, as execbox lists it when it must say which server.
fn qualify(namespace: &str, uri: &str) -> String {
    format!("{QUALIFIED}{namespace}/{uri}")
}

/// The namespace and the server's own URI of a qualified URI.
fn unqualify(uri: &str) -> Option<(&str, &str)> {
    uri.strip_prefix(QUALIFIED)?.split_once('/')
}

/// Every resource of every server offering resources, and their templates; a server that
/// cannot list them is left out, saying why on stderr.
async fn listings(offers: &[Offer]) -> Vec<(Offer, Vec<Resource>, Vec<ResourceTemplate>)> {
    let lists = offers
        .iter()
        .filter(|o| o.resources())
        .map(|offer| async move {
            let resources = every_page(offer, "resources", |params| async {
                let page = offer.peer.list_resources(params).await?;
                Ok((page.resources, page.next_cursor))
            })
            .await;
            let templates = every_page(offer, "resource templates", |params| async {
                let page = offer.peer.list_resource_templates(params).await?;
                Ok((page.resource_templates, page.next_cursor))
            })
            .await;
            let resources = resources.unwrap_or_else(|e| {
                eprintln!("execbox mcp: {}", offer.failed("resources/list", &e));
                Vec::new()
            });
            // A server may list resources and have no templates (method not found).
            let templates = templates.unwrap_or_default();
            (offer.clone(), resources, templates)
        });
    futures_util::future::join_all(lists).await
}

/// How many servers list each URI (or template).
fn counts<'a>(uris: impl Iterator<Item = &'a str>) -> HashMap<&'a str, usize> {
    let mut counts = HashMap::new();
    for uri in uris {
        *counts.entry(uri).or_insert(0) += 1;
    }
    counts
}

/// A URI as execbox lists it: as the server gives it unless another server lists it too, or
/// it could be read as a qualified URI.
fn shown(namespace: &str, uri: &str, listed_by: usize) -> String {
    if listed_by > 1 || uri.starts_with("execbox:") {
        qualify(namespace, uri)
    } else {
        uri.to_owned()
    }
}

/// `resources/list`: every server's resources, names prefixed by the namespace.
pub(crate) async fn list(offers: &[Offer]) -> ListResourcesResult {
    let listings = listings(offers).await;
    // Each server counts once per URI, however often it lists it.
    let counts = counts(listings.iter().flat_map(|(_, resources, _)| {
        resources
            .iter()
            .map(|r| r.uri.as_str())
            .collect::<std::collections::HashSet<_>>()
    }));
    let mut all = Vec::new();
    for (offer, resources, _) in &listings {
        for resource in resources {
            let mut resource = resource.clone();
            resource.uri = shown(
                &offer.namespace,
                &resource.uri,
                counts[resource.uri.as_str()],
            );
            resource.name = format!("{}.{}", offer.namespace, resource.name);
            all.push(resource);
        }
    }
    ListResourcesResult::with_all_items(all)
}

/// `resources/templates/list`: every server's templates, names prefixed by the namespace.
pub(crate) async fn templates(offers: &[Offer]) -> ListResourceTemplatesResult {
    let listings = listings(offers).await;
    let counts = counts(listings.iter().flat_map(|(_, _, templates)| {
        templates
            .iter()
            .map(|t| t.uri_template.as_str())
            .collect::<std::collections::HashSet<_>>()
    }));
    let mut all = Vec::new();
    for (offer, _, templates) in &listings {
        for template in templates {
            let mut template = template.clone();
            template.uri_template = shown(
                &offer.namespace,
                &template.uri_template,
                counts[template.uri_template.as_str()],
            );
            template.name = format!("{}.{}", offer.namespace, template.name);
            all.push(template);
        }
    }
    ListResourceTemplatesResult::with_all_items(all)
}

/// Whether `uri` is one that `template` (RFC 6570) expands to: its literal parts appear in
/// order, the first at the start and the last at the end.
fn matches_template(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    literals.push(rest);
    if literals.len() == 1 {
        return literals[0] == uri;
    }
    let (first, last) = (literals[0], literals[literals.len() - 1]);
    let Some(mut remaining) = uri.strip_prefix(first) else {
        return false;
    };
    for literal in &literals[1..literals.len() - 1] {
        match remaining.find(literal) {
            Some(at) => remaining = &remaining[at + literal.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last) && remaining.len() >= last.len()
}

/// Where a URI a client gave goes: the server and the URI it knows.
pub(crate) struct Route {
    pub offer: Offer,
    pub uri: String,
    /// The client named the server (`execbox://ns/...`): the contents are qualified too.
    pub qualified: bool,
}

fn unknown(uri: &str, why: String) -> ErrorData {
    ErrorData::resource_not_found(why, Some(json!({ "uri": uri })))
}

/// The namespaces of the servers offering resources, for an error.
fn namespaces(offers: &[Offer]) -> String {
    let names: Vec<&str> = offers
        .iter()
        .filter(|o| o.resources())
        .map(|o| o.namespace.as_str())
        .collect();
    if names.is_empty() {
        "none of the MCP servers offers resources".into()
    } else {
        format!("the namespaces with resources are {}", names.join(", "))
    }
}

/// The server `uri` belongs to; an error names the URI and says what to do.
pub(crate) async fn route(offers: &[Offer], uri: &str) -> Result<Route, ErrorData> {
    if let Some((namespace, original)) = unqualify(uri) {
        return match offers
            .iter()
            .find(|o| o.namespace == namespace && o.resources())
        {
            Some(offer) => Ok(Route {
                offer: offer.clone(),
                uri: original.to_owned(),
                qualified: true,
            }),
            None => Err(unknown(
                uri,
                format!(
                    "no MCP server with resources has the namespace {namespace:?} (in the \
                     resource URI {uri:?}); {}",
                    namespaces(offers)
                ),
            )),
        };
    }
    let listings = listings(offers).await;
    let listing: Vec<&Offer> = listings
        .iter()
        .filter(|(_, resources, _)| resources.iter().any(|r| r.uri == uri))
        .map(|(offer, _, _)| offer)
        .collect();
    let templated: Vec<&Offer> = listings
        .iter()
        .filter(|(_, _, templates)| {
            templates
                .iter()
                .any(|t| matches_template(&t.uri_template, uri))
        })
        .map(|(offer, _, _)| offer)
        .collect();
    let found = if !listing.is_empty() {
        listing
    } else {
        templated
    };
    let offering: Vec<&Offer> = offers.iter().filter(|o| o.resources()).collect();
    let offer = match found.as_slice() {
        [offer] => *offer,
        [] if offering.len() == 1 => offering[0],
        [] => {
            return Err(unknown(
                uri,
                format!(
                    "no MCP server lists the resource {uri:?} or a template it matches; \
                     resources/list and resources/templates/list give the URIs execbox serves \
                     ({})",
                    namespaces(offers)
                ),
            ))
        }
        several => {
            let forms: Vec<String> = several
                .iter()
                .map(|o| format!("{} ({})", qualify(&o.namespace, uri), o.name))
                .collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "the resource URI {uri:?} belongs to {} MCP servers; name the one you mean: {}",
                    several.len(),
                    forms.join(", ")
                ),
                Some(json!({ "uri": uri })),
            ));
        }
    };
    Ok(Route {
        offer: offer.clone(),
        uri: uri.to_owned(),
        qualified: false,
    })
}

/// `resources/read` of `uri`, from the server it belongs to.
pub(crate) async fn read(offers: &[Offer], uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let route = route(offers, uri).await?;
    let read = route
        .offer
        .peer
        .read_resource(ReadResourceRequestParams::new(route.uri.clone()))
        .await;
    let mut result = read.map_err(|e| upstream_error(&route, uri, "resources/read", &e))?;
    if route.qualified {
        // The contents name the server's URIs: give them in the form the client used.
        let mut contents = serde_json::to_value(&result.contents).unwrap_or(Value::Null);
        if let Value::Array(items) = &mut contents {
            for item in items {
                if let Some(Value::String(inner)) = item.get("uri").cloned() {
                    item["uri"] = Value::String(qualify(&route.offer.namespace, &inner));
                }
            }
        }
        if let Ok(contents) = serde_json::from_value(contents) {
            result.contents = contents;
        }
    }
    Ok(result)
}

/// An upstream's failure for a request about `uri`: its code kept, the message naming the
/// server and the URI.
fn upstream_error(
    route: &Route,
    uri: &str,
    method: &str,
    error: &rmcp::service::ServiceError,
) -> ErrorData {
    let message = format!("{} (resource {uri:?})", route.offer.failed(method, error));
    match error {
        rmcp::service::ServiceError::McpError(e) => {
            ErrorData::new(e.code, message, Some(json!({ "uri": uri })))
        }
        _ => ErrorData::internal_error(message, Some(json!({ "uri": uri }))),
    }
}

/// One client's subscription: its session, and the URI as it named it.
struct Subscriber {
    peer: Peer<RoleServer>,
    uri: String,
}

/// The subscriptions of every client, by server and the server's URI; each server is asked
/// once per URI however many clients subscribe.
#[derive(Default)]
pub(crate) struct Subscriptions(tokio::sync::Mutex<HashMap<(String, String), Vec<Subscriber>>>);

/// The most subscriptions execbox keeps at once, over every client.
const MAX_SUBSCRIPTIONS: usize = 10_000;

impl Subscriptions {
    /// `resources/subscribe` of `uri` by `peer`'s session.
    pub(crate) async fn subscribe(
        &self,
        offers: &[Offer],
        peer: &Peer<RoleServer>,
        uri: &str,
    ) -> Result<(), ErrorData> {
        let route = route(offers, uri).await?;
        if !route.offer.subscribe() {
            return Err(ErrorData::invalid_params(
                format!(
                    "the MCP server {:?} does not offer subscriptions to its resources, so \
                     {uri:?} cannot be subscribed to; read it again instead",
                    route.offer.name
                ),
                Some(json!({ "uri": uri })),
            ));
        }
        let key = (route.offer.namespace.clone(), route.uri.clone());
        let mut all = self.0.lock().await;
        let total: usize = all.values().map(Vec::len).sum();
        let subscribers = all.entry(key.clone()).or_default();
        subscribers.retain(|s| !s.peer.is_transport_closed());
        if subscribers
            .iter()
            .any(|s| same_session(&s.peer, peer) && s.uri == uri)
        {
            return Ok(());
        }
        if total >= MAX_SUBSCRIPTIONS {
            return Err(ErrorData::invalid_request(
                format!(
                    "execbox keeps at most {MAX_SUBSCRIPTIONS} resource subscriptions; \
                     unsubscribe from some before subscribing to {uri:?}"
                ),
                None,
            ));
        }
        if subscribers.is_empty() {
            route
                .offer
                .peer
                .subscribe(SubscribeRequestParams::new(route.uri.clone()))
                .await
                .map_err(|e| upstream_error(&route, uri, "resources/subscribe", &e))?;
        }
        subscribers.push(Subscriber {
            peer: peer.clone(),
            uri: uri.to_owned(),
        });
        Ok(())
    }

    /// `resources/unsubscribe` of `uri` by `peer`'s session; the server is told once no client
    /// subscribes to it any more.
    pub(crate) async fn unsubscribe(
        &self,
        offers: &[Offer],
        peer: &Peer<RoleServer>,
        uri: &str,
    ) -> Result<(), ErrorData> {
        let mut all = self.0.lock().await;
        let key = all.iter().find_map(|(key, subscribers)| {
            subscribers
                .iter()
                .any(|s| same_session(&s.peer, peer) && s.uri == uri)
                .then(|| key.clone())
        });
        let Some(key) = key else {
            return Err(ErrorData::invalid_params(
                format!("this session is not subscribed to the resource {uri:?}"),
                Some(json!({ "uri": uri })),
            ));
        };
        let left = {
            let subscribers = all.get_mut(&key).expect("found above");
            let this_one = |s: &Subscriber| same_session(&s.peer, peer) && s.uri == uri;
            subscribers.retain(|s| !s.peer.is_transport_closed() && !this_one(s));
            subscribers.len()
        };
        if left == 0 {
            all.remove(&key);
            if let Some(offer) = offers.iter().find(|o| o.namespace == key.0) {
                let _ = offer
                    .peer
                    .unsubscribe(UnsubscribeRequestParams::new(key.1.clone()))
                    .await;
            }
        }
        Ok(())
    }

    /// Tells every client subscribed to `uri` of the server of `namespace` that it changed,
    /// each by the URI it subscribed with.
    pub(crate) async fn updated(&self, namespace: &str, uri: &str) {
        let peers: Vec<(Peer<RoleServer>, String)> = {
            let mut all = self.0.lock().await;
            let Some(subscribers) = all.get_mut(&(namespace.to_owned(), uri.to_owned())) else {
                return;
            };
            subscribers.retain(|s| !s.peer.is_transport_closed());
            subscribers
                .iter()
                .map(|s| (s.peer.clone(), s.uri.clone()))
                .collect()
        };
        for (peer, uri) in peers {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qualified_uri_keeps_the_server_uri_verbatim() {
        let uri = qualify("docs", "file:///a b?x=1#y");
        assert_eq!(uri, "execbox://docs/file:///a b?x=1#y");
        assert_eq!(unqualify(&uri), Some(("docs", "file:///a b?x=1#y")));
        assert_eq!(unqualify("execbox://docs"), None);
        assert_eq!(unqualify("file:///x"), None);
    }

    #[test]
    fn a_uri_is_qualified_only_when_it_must_be() {
        assert_eq!(shown("a", "file:///x", 1), "file:///x");
        assert_eq!(shown("a", "file:///x", 2), "execbox://a/file:///x");
        assert_eq!(
            shown("a", "execbox://b/file:///x", 1),
            "execbox://a/execbox://b/file:///x"
        );
    }

    #[test]
    fn templates_match_by_their_literal_parts() {
        assert!(matches_template(
            "test://static/resource/{id}",
            "test://static/resource/7"
        ));
        assert!(matches_template(
            "file:///{dir}/{name}.txt",
            "file:///a/b.txt"
        ));
        assert!(!matches_template(
            "file:///{dir}/{name}.txt",
            "file:///a/b.md"
        ));
        assert!(!matches_template("test://x/{id}", "other://x/1"));
        assert!(matches_template("test://fixed", "test://fixed"));
        assert!(!matches_template("test://{broken", "test://x"));
    }
}
