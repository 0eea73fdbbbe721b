//! Upstream prompts served by `execbox mcp`: one list of every server's prompts, each named
//! `namespace.prompt`, and `prompts/get` routed by that prefix to the server that has it.

use rmcp::model::{GetPromptRequestParams, GetPromptResult, ListPromptsResult};
use rmcp::ErrorData;
use serde_json::json;

use super::offers::{every_page, Offer};

/// `prompts/list`: every server's prompts, named `namespace.prompt`; a server that cannot list
/// them is left out, saying why on stderr.
pub(crate) async fn list(offers: &[Offer]) -> ListPromptsResult {
    let lists = offers
        .iter()
        .filter(|o| o.prompts())
        .map(|offer| async move {
            let listed = every_page(offer, "prompts", |params| async {
                let page = offer.peer.list_prompts(params).await?;
                Ok((page.prompts, page.next_cursor))
            })
            .await;
            match listed {
                Ok(prompts) => prompts
                    .into_iter()
                    .map(|mut p| {
                        p.name = format!("{}.{}", offer.namespace, p.name);
                        p
                    })
                    .collect(),
                Err(e) => {
                    eprintln!("execbox mcp: {}", offer.failed("prompts/list", &e));
                    Vec::new()
                }
            }
        });
    let all: Vec<_> = futures_util::future::join_all(lists)
        .await
        .into_iter()
        .flatten()
        .collect();
    ListPromptsResult::with_all_items(all)
}

/// `prompts/get` of `namespace.prompt`, from that server, by the prompt's own name.
pub(crate) async fn get(
    offers: &[Offer],
    mut request: GetPromptRequestParams,
) -> Result<GetPromptResult, ErrorData> {
    let name = request.name.clone();
    let with_prompts = || {
        let names: Vec<&str> = offers
            .iter()
            .filter(|o| o.prompts())
            .map(|o| o.namespace.as_str())
            .collect();
        if names.is_empty() {
            "none of the MCP servers offers prompts".to_owned()
        } else {
            format!("the namespaces with prompts are {}", names.join(", "))
        }
    };
    let data = Some(json!({ "name": name }));
    let Some((namespace, prompt)) = name.split_once('.') else {
        return Err(ErrorData::invalid_params(
            format!(
                "the prompt name {name:?} has no namespace: prompts/list names each prompt \
                 `namespace.prompt` ({})",
                with_prompts()
            ),
            data,
        ));
    };
    let Some(offer) = offers
        .iter()
        .find(|o| o.namespace == namespace && o.prompts())
    else {
        return Err(ErrorData::invalid_params(
            format!(
                "no MCP server with prompts has the namespace {namespace:?} (in the prompt name \
                 {name:?}); {}",
                with_prompts()
            ),
            data,
        ));
    };
    request.name = prompt.to_owned();
    request.meta = None;
    offer.peer.get_prompt(request).await.map_err(|e| {
        let message = format!("{} (prompt {name:?})", offer.failed("prompts/get", &e));
        match e {
            rmcp::service::ServiceError::McpError(e) => ErrorData::new(e.code, message, data),
            _ => ErrorData::internal_error(message, data),
        }
    })
}
