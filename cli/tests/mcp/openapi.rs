//! An `openapi:` provider behind `execbox mcp`: GitHub's whole description, served by Prism,
//! found by `search_tools` in plain words and called from `execute_code`.

use super::*;

#[allow(dead_code)]
#[path = "../support/openapi.rs"]
mod openapi_support;

use openapi_support::{github_description, installed, Prism};

pub async fn github_openapi_is_searched_in_plain_words_and_called(
    h: Harness,
) -> Result<(), String> {
    let dir = h.dir.clone();
    let started = tokio::task::spawn_blocking(move || {
        let npm = installed()?;
        let document = github_description(npm);
        let prism = Prism::start(npm, &document, dir.join("prism.log"));
        Some((document, prism))
    })
    .await
    .map_err(|e| e.to_string())?;
    let Some((document, prism)) = started else {
        return Ok(());
    };
    let tools = h.write(
        "tools.yaml",
        &format!(
            "version: 1\nproviders:\n  github:\n    openapi: {}\n    base_url: {}\n",
            document.display(),
            prism.url()
        ),
    );
    let mcp = h.start(&["--tools", tools.to_str().unwrap()]).await?;
    for (query, wanted) in [
        (
            "create a comment on an issue",
            "github.issues_create_comment",
        ),
        ("list pull requests of a repository", "github.pulls_list"),
        (
            "get the authenticated user",
            "github.users_get_authenticated",
        ),
    ] {
        let found = answer(mcp.call("search_tools", json!({"query": query})).await?);
        let top: Vec<String> = found.structured["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .take(3)
            .filter_map(|t| t["tool"].as_str().map(str::to_string))
            .collect();
        check!(
            top.iter().any(|t| t == wanted),
            "{query:?}: {wanted} is not in the top 3: {top:?}"
        );
    }
    let value = mcp
        .value(
            "const comment = await github.issues_create_comment({ owner: 'octo', repo: 'hello', issue_number: 7, body: { body: 'Thanks!' } });\n\
             return typeof comment.id",
        )
        .await?;
    check!(value == json!("number"), "{value}\n{}", prism.log());
    Ok(())
}
