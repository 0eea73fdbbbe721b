//! The fixture documents (OpenAPI 3.0 in YAML, 3.1 in JSON) loaded as providers the host
//! accepts: names, schemas, skipped operations, filters.

use std::path::Path;

use execbox_host::{Schema, ToolSet};
use execbox_openapi::{OpenApiConfig, OpenApiProvider, Operations};
use serde_json::json;

fn fixtures() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

fn load(file: &str, edit: impl FnOnce(&mut OpenApiConfig)) -> OpenApiProvider {
    let mut config = OpenApiConfig::new(file);
    config.base_url = Some("http://127.0.0.1:9".into());
    edit(&mut config);
    OpenApiProvider::load("api", &config, fixtures()).unwrap_or_else(|e| panic!("{e}"))
}

fn check_host_accepts(p: &OpenApiProvider) {
    for tool in p.provider().tools() {
        for schema in [tool.get_input_schema(), tool.get_output_schema()]
            .into_iter()
            .flatten()
        {
            Schema::compile(schema).unwrap_or_else(|e| panic!("{}: {e}", tool.name()));
        }
    }
    ToolSet::new(vec![p.provider().clone()]).unwrap();
}

#[test]
fn an_openapi_3_0_yaml_document_becomes_tools() {
    let p = load("petstore-3.0.yaml", |_| {});
    let names: Vec<(String, String)> = p.tool_names();
    let safe: Vec<&str> = names.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        safe,
        [
            "pets_list",
            "pets_create",
            "pets_get",
            "pets_delete",
            "get_status"
        ]
    );
    assert_eq!(names[0].1, "pets/list");
    assert!(p.skipped().is_empty(), "{:?}", p.skipped());
    let get = &p.provider().tools()[2];
    assert_eq!(
        get.get_description(),
        Some("Get a pet\n\n`GET /pets/{petId}`")
    );
    assert_eq!(
        get.get_input_schema().unwrap()["required"],
        json!(["petId"])
    );
    // 3.0 `nullable` became a JSON Schema null type; the recursive Pet is bounded.
    let out = get.get_output_schema().unwrap().to_string();
    assert!(out.contains(r#""tag":{"type":["string","null"]}"#), "{out}");
    assert!(
        out.contains("Pet (recursive; not expanded further)"),
        "{out}"
    );
    assert_eq!(
        p.provider().get_description(),
        Some("Petstore: A small pet store, for execbox's OpenAPI tests.")
    );
    check_host_accepts(&p);
}

#[test]
fn an_openapi_3_1_json_document_becomes_tools() {
    let p = load("tracker-3.1.json", |_| {});
    let names = p.tool_names();
    assert_eq!(
        names[0],
        (
            "issues_create_comment".to_string(),
            "issues/create-comment".to_string()
        )
    );
    let create = &p.provider().tools()[0];
    let input = create.get_input_schema().unwrap();
    let keys: Vec<&String> = input["properties"].as_object().unwrap().keys().collect();
    // The query parameter named `body` yields to the request body.
    assert_eq!(keys, ["owner", "number", "body_query", "X-Trace", "body"]);
    assert_eq!(input["required"], json!(["owner", "number", "body"]));
    // The one operation with a multipart body is left out, saying why.
    assert_eq!(p.skipped().len(), 1);
    assert_eq!(p.skipped()[0].operation, "POST /upload");
    assert!(p.skipped()[0].reason.contains("multipart/form-data"));
    // `+json` media types give the output schema.
    let search = p
        .provider()
        .tools()
        .iter()
        .find(|t| t.name() == "search")
        .unwrap();
    assert_eq!(search.get_output_schema(), Some(&json!({"type": "object"})));
    check_host_accepts(&p);
}

#[test]
fn include_and_exclude_filter_by_operation_id_and_tag() {
    let p = load("petstore-3.0.yaml", |c| {
        c.operations = Operations {
            include: vec!["pets".into()],
            exclude: vec!["*delete*".into()],
        }
    });
    let names: Vec<String> = p.tool_names().into_iter().map(|(s, _)| s).collect();
    assert_eq!(names, ["pets_list", "pets_create", "pets_get"]);
}

#[test]
fn an_include_that_matches_nothing_is_an_error_and_dot_slash_paths_read() {
    let mut config = OpenApiConfig::new("./petstore-3.0.yaml");
    config.base_url = Some("http://127.0.0.1:9".into());
    config.operations.include = vec!["GET /pets".into()];
    let err = OpenApiProvider::load("api", &config, fixtures())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("operations.include: [\"GET /pets\"] matches no operation of the document"),
        "{err}"
    );
    config.operations.include = vec!["pets_get".into()];
    let p = OpenApiProvider::load("api", &config, fixtures()).unwrap();
    assert_eq!(p.provider().tools().len(), 1);
    config.openapi = "./missing.yaml".into();
    let err = OpenApiProvider::load("api", &config, fixtures())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("/./"), "{err}");
}

#[test]
fn documents_that_cannot_be_used_are_refused_with_what_to_do() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(
        dir.join("swagger.json"),
        r#"{"swagger": "2.0", "paths": {}}"#,
    )
    .unwrap();
    let err = OpenApiProvider::load("api", &OpenApiConfig::new("swagger.json"), dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("swagger.json: is Swagger 2.0") && err.contains("convert it to OpenAPI 3"),
        "{err}"
    );
    let err = OpenApiProvider::load("api", &OpenApiConfig::new("missing.json"), dir)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("cannot read the OpenAPI document"), "{err}");
    // A document by URL is fetched over https only (plain http on this machine only).
    let err = OpenApiProvider::load(
        "api",
        &OpenApiConfig::new("http://example.com/api.json"),
        dir,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("openapi: ") && err.contains("plain http"),
        "{err}"
    );
    // No base_url and a relative server: say what to set.
    std::fs::write(
        dir.join("relative.yaml"),
        "openapi: 3.0.0\nservers: [{url: /v3}]\npaths: {}\n",
    )
    .unwrap();
    let err = OpenApiProvider::load("api", &OpenApiConfig::new("relative.yaml"), dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("base_url: is not set, and the document's first server cannot be used"),
        "{err}"
    );
}

#[test]
fn the_host_declares_the_tools_with_their_upstream_names() {
    let p = load("tracker-3.1.json", |_| {});
    let set = ToolSet::new(vec![p.into_provider()]).unwrap();
    let text = set.declarations();
    assert!(text.contains("declare namespace api"), "{text}");
    assert!(text.contains("function issues_create_comment("), "{text}");
    assert!(text.contains("body_query?: string"), "{text}");
    assert!(text.contains("Create an issue comment"), "{text}");
    // The original name travels with the safe one, for the runner's alias.
    let tool = &set.manifests()[0].tools[0];
    assert_eq!(tool.safe_name, "issues_create_comment");
    assert_eq!(tool.original_name.as_deref(), Some("issues/create-comment"));
}

/// Loads the document at `EXECBOX_OPENAPI_DOC` (GitHub's description, say) into a ready
/// tool set and prints how long it took and the peak resident set, then what the first
/// declarations cost: `EXECBOX_OPENAPI_DOC=PATH cargo test --release -p execbox-openapi
/// --test documents a_large_document_loads -- --ignored --nocapture` (docs/benchmarks.md).
#[test]
#[ignore = "needs EXECBOX_OPENAPI_DOC, a large document to time"]
fn a_large_document_loads() {
    let path = std::env::var("EXECBOX_OPENAPI_DOC").expect("EXECBOX_OPENAPI_DOC names a document");
    let started = std::time::Instant::now();
    let mut config = OpenApiConfig::new(&path);
    config.base_url = Some("https://api.example.com".into());
    let p = OpenApiProvider::load("api", &config, Path::new(".")).unwrap_or_else(|e| panic!("{e}"));
    let loaded = started.elapsed();
    let peak_loaded = peak_rss();
    let tools = p.provider().tools().len();
    let set = ToolSet::new(vec![p.provider().clone()]).unwrap();
    let ready = started.elapsed();
    println!(
        "{tools} tools: provider in {loaded:?} (peak RSS {peak_loaded}), a ready tool set in \
         {ready:?} in all (peak RSS {})",
        peak_rss()
    );
    let started = std::time::Instant::now();
    let declarations = set.declarations();
    println!(
        "then every declaration ({} bytes) in {:?} (peak RSS {})",
        declarations.len(),
        started.elapsed(),
        peak_rss()
    );
    // For execbox-mcp's `search_tools` timing (docs/benchmarks.md): the tools as JSON.
    if let Ok(dump) = std::env::var("EXECBOX_TOOLS_DUMP") {
        let tools: Vec<serde_json::Value> = p
            .provider()
            .tools()
            .iter()
            .map(|t| {
                json!({
                    "name": t.name(),
                    "description": t.get_description(),
                    "input": t.get_input_schema().map(|s| s.to_string()),
                    "output": t.get_output_schema().map(|s| s.to_string()),
                })
            })
            .collect();
        let all = json!({"description": p.provider().get_description(), "tools": tools});
        std::fs::write(&dump, all.to_string()).unwrap();
        println!("the tools written to {dump}");
    }
}

/// GitHub-sized providers stay cheap because a tool's schemas wait for its first use: a
/// tool set leaves them as text, `check_schemas` compiles them all.
#[test]
fn an_openapi_tool_set_parses_and_compiles_schemas_only_when_used() {
    let p = load("tracker-3.1.json", |_| {});
    let all: Vec<execbox_host::ToolSchema> = p
        .provider()
        .tools()
        .iter()
        .flat_map(|t| [t.input_tool_schema(), t.output_tool_schema()])
        .flatten()
        .cloned()
        .collect();
    let set = ToolSet::new(vec![p.provider().clone()]).unwrap();
    assert!(all.len() > 2);
    assert!(all
        .iter()
        .all(|s| s.is_deferred() && !s.is_parsed() && !s.is_compiled()));
    // The runner is not sent the declarations; they are built when asked for.
    assert_eq!(set.manifests()[0].types, None);
    set.check_schemas().unwrap();
    assert!(all.iter().all(|s| s.is_parsed() && s.is_compiled()));
}

/// The process's peak resident set (`VmHWM`), as `/proc` says it.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l[6..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}
