//! The operations of a document, each read into what one tool needs: its name, description,
//! input and output schemas, and how an input becomes a request.
//!
//! **Names.** A tool is named by its `operationId`, or, without one, by its method and path
//! (`GET /pets/{petId}` → `get_pets_petId`); the host sanitises it for the guest
//! (`issues/create-comment` → `issues_create_comment`, with `__2`, `__3` for names that
//! collide after sanitising) and keeps the original as the tool's upstream name.
//!
//! **Input.** One object: each path, query, header and cookie parameter is a property by its
//! own name, and `body` is the request body. When names collide (two parameters of the same
//! name in different places, or a parameter named `body` beside a request body), every
//! parameter involved gets its location as a suffix: `id_path`, `id_query`, `body_query`
//! (the request body keeps `body`); a suffixed name still taken gets `_2`, `_3`, ...
//! Path-level parameters apply to every operation of the path; an operation's own parameter
//! of the same name and location replaces one.

use std::collections::HashSet;

use execbox_host::ToolSchema;
use serde_json::{json, Map, Value};

use crate::config::Operations;
use crate::document::Document;
use crate::schema::Inliner;

/// Header parameters that are no tool input: the client sets them.
const CLIENT_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "authorization",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
    "cookie",
];

/// The HTTP methods an OpenAPI path item may hold, in the order tools are made.
pub const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// In the path template (`/pets/{petId}`).
    Path,
    /// In the query string.
    Query,
    /// A request header.
    Header,
    /// In the `Cookie` header.
    Cookie,
}

impl Location {
    fn parse(text: &str) -> Option<Location> {
        match text {
            "path" => Some(Location::Path),
            "query" => Some(Location::Query),
            "header" => Some(Location::Header),
            "cookie" => Some(Location::Cookie),
            _ => None,
        }
    }

    /// `path`, `query`, `header` or `cookie`.
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
            Location::Cookie => "cookie",
        }
    }
}

/// How a query array or object is written (OpenAPI's `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `a=1&a=2` (exploded) or `a=1,2`; the query's default.
    Form,
    /// `a=1%202`.
    SpaceDelimited,
    /// `a=1|2`.
    PipeDelimited,
    /// `a[k]=v`.
    DeepObject,
    /// `1,2`: the path's and header's default.
    Simple,
}

/// One parameter of an operation.
#[derive(Debug, Clone)]
pub struct Param {
    /// The name in the request (the header or query name, the path template's `{name}`).
    pub name: String,
    /// The property of the tool's input that carries it.
    pub property: String,
    /// Where it goes.
    pub location: Location,
    /// How arrays and objects are written.
    pub style: Style,
    /// Whether arrays and objects are exploded.
    pub explode: bool,
}

/// The request body of an operation.
#[derive(Debug, Clone)]
pub struct Body {
    /// The media type sent.
    pub content_type: String,
    /// Whether it is JSON (else a string is sent as it is).
    pub json: bool,
    /// Whether the input must give it.
    pub required: bool,
}

/// One operation, read.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The tool's name before sanitising: the `operationId`, or method and path.
    pub name: String,
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path template, `/pets/{petId}`.
    pub path: String,
    /// `summary` and `description`, joined.
    pub description: Option<String>,
    /// The parameters, path-level ones merged in.
    pub params: Vec<Param>,
    /// The request body, if the operation takes one.
    pub body: Option<Body>,
    /// The tool's input schema, kept as JSON text ([`ToolSchema::deferred`]).
    pub input_schema: ToolSchema,
    /// The first 2xx JSON response's schema, kept as JSON text.
    pub output_schema: Option<ToolSchema>,
}

/// An operation left out, and why (for `execbox check` and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `METHOD /path`.
    pub operation: String,
    /// Why it is not a tool.
    pub reason: String,
}

/// Reads every operation of `doc` that `filter` keeps, in document order.
pub fn read_operations(doc: &Document, filter: &Operations) -> (Vec<Operation>, Vec<Skipped>) {
    let mut operations = Vec::new();
    let mut skipped = Vec::new();
    let Some(paths) = doc.root().get("paths").and_then(Value::as_object) else {
        return (operations, skipped);
    };
    for (path, item) in paths {
        // OpenAPI paths start with `/`; anything else, appended to the base URL, could name
        // another host (`@evil/`, `:8080/`, `.evil.com/`).
        if !path.starts_with('/') || path.starts_with("//") {
            skipped.push(Skipped {
                operation: path.escape_debug().to_string(),
                reason: "a path must start with a single `/` (OpenAPI 3, section 4.8.8)".into(),
            });
            continue;
        }
        let item = match doc.deref(item) {
            Ok(item) => item,
            Err(reason) => {
                skipped.push(Skipped {
                    operation: path.clone(),
                    reason,
                });
                continue;
            }
        };
        let shared = item.get("parameters");
        for method in METHODS {
            let Some(op) = item.get(*method) else {
                continue;
            };
            let name = match op.get("operationId").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_string(),
                _ => name_from(method, path),
            };
            let tags: Vec<String> = op
                .get("tags")
                .and_then(Value::as_array)
                .map(|t| {
                    t.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            if !filter_keeps(filter, &name, &tags) {
                continue;
            }
            let label = format!("{} {path}", method.to_uppercase());
            match read_operation(doc, method, path, name, shared, op) {
                Ok(operation) => operations.push(operation),
                Err(reason) => skipped.push(Skipped {
                    operation: label,
                    reason,
                }),
            }
        }
    }
    (operations, skipped)
}

/// `GET /pets/{petId}` → `get_pets_petId` (before the host's sanitising).
pub fn name_from(method: &str, path: &str) -> String {
    let mut name = method.to_lowercase();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        name.push('_');
        name.push_str(segment.trim_start_matches('{').trim_end_matches('}'));
    }
    name
}

/// Whether an operation passes `include` and `exclude`: a glob matches the `operationId`
/// (or the name made from method and path), its sanitised form, or one of the tags.
pub fn filter_keeps(filter: &Operations, name: &str, tags: &[String]) -> bool {
    let safe = execbox_host::sanitize_tool_name(name);
    let matches = |pattern: &String| {
        glob(pattern, name) || glob(pattern, &safe) || tags.iter().any(|t| glob(pattern, t))
    };
    (filter.include.is_empty() || filter.include.iter().any(matches))
        && !filter.exclude.iter().any(matches)
}

/// A glob: `*` matches any run of characters (`/` included), `?` one character; the rest is
/// literal and case-sensitive. Linear in the text (no backtracking blow-up).
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn read_operation(
    doc: &Document,
    method: &str,
    path: &str,
    name: String,
    shared: Option<&Value>,
    op: &Value,
) -> Result<Operation, String> {
    // Path-level parameters first; an operation's own one of the same name and place wins.
    let mut raw: Vec<(&Value, String, Location)> = Vec::new();
    for list in [shared, op.get("parameters")].into_iter().flatten() {
        let Some(list) = list.as_array() else {
            continue;
        };
        for p in list {
            let p = doc.deref(p)?;
            let Some(pname) = p.get("name").and_then(Value::as_str) else {
                return Err("a parameter has no `name`".into());
            };
            let Some(location) = p
                .get("in")
                .and_then(Value::as_str)
                .and_then(Location::parse)
            else {
                return Err(format!(
                    "parameter {pname:?} has no valid `in` (path, query, header or cookie)"
                ));
            };
            if location == Location::Header
                && CLIENT_HEADERS.contains(&pname.to_ascii_lowercase().as_str())
            {
                // OpenAPI: `Accept`, `Content-Type` and `Authorization` header parameters are
                // ignored (the client sets them); so are the headers that frame or route the
                // request, which the guest must not set.
                continue;
            }
            if let Some(i) = raw
                .iter()
                .position(|(_, n, l)| *l == location && n == pname)
            {
                raw.remove(i);
            }
            raw.push((p, pname.to_string(), location));
        }
    }

    // The request body: JSON when there is a JSON media type, else text/* or
    // application/octet-stream as a string; multipart and forms are not supported yet.
    let mut body_schema = None;
    let mut body = None;
    if let Some(request_body) = op.get("requestBody") {
        let request_body = doc.deref(request_body)?;
        let required = request_body.get("required") == Some(&Value::Bool(true));
        let content = request_body.get("content").and_then(Value::as_object);
        let chosen = content.and_then(|c| {
            c.iter().find(|(t, _)| is_json(t)).or_else(|| {
                c.iter()
                    .find(|(t, _)| t.starts_with("text/") || *t == "application/octet-stream")
            })
        });
        match chosen {
            Some((content_type, media)) => {
                let json = is_json(content_type);
                let schema = if json {
                    media
                        .get("schema")
                        .map(|s| Inliner::new(doc).schema(s))
                        .unwrap_or(json!({}))
                } else {
                    json!({"type": "string"})
                };
                body_schema = Some(schema);
                body = Some(Body {
                    content_type: content_type.clone(),
                    json,
                    required,
                });
            }
            None => {
                let types: Vec<&str> = content
                    .map(|c| c.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                if required || !types.is_empty() {
                    return Err(format!(
                        "its request body is {}, which execbox does not send yet (JSON, text and \
                         application/octet-stream only)",
                        if types.is_empty() {
                            "of no media type".to_string()
                        } else {
                            types.join(", ")
                        }
                    ));
                }
            }
        }
    }

    let properties_names = property_names(&raw, body.is_some());
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params = Vec::new();
    for ((p, pname, location), property) in raw.iter().zip(properties_names) {
        let param_required =
            location == &Location::Path || p.get("required") == Some(&Value::Bool(true));
        let mut schema = match p.get("schema") {
            Some(s) => Inliner::new(doc).schema(s),
            None => {
                // `content` instead of `schema`: its one media type's schema.
                p.get("content")
                    .and_then(Value::as_object)
                    .and_then(|c| c.values().next())
                    .and_then(|m| m.get("schema"))
                    .map(|s| Inliner::new(doc).schema(s))
                    .unwrap_or(json!({}))
            }
        };
        if let (Value::Object(s), Some(d)) = (&mut schema, p.get("description")) {
            s.entry("description").or_insert_with(|| d.clone());
        }
        if let (Value::Object(s), Some(true)) =
            (&mut schema, p.get("deprecated").and_then(Value::as_bool))
        {
            s.insert("deprecated".into(), Value::Bool(true));
        }
        let style = match p.get("style").and_then(Value::as_str) {
            Some("form") => Style::Form,
            Some("spaceDelimited") => Style::SpaceDelimited,
            Some("pipeDelimited") => Style::PipeDelimited,
            Some("deepObject") => Style::DeepObject,
            Some("simple") => Style::Simple,
            Some(other) if *location == Location::Path => {
                return Err(format!(
                    "path parameter {pname:?} has style {other:?}; execbox supports simple only"
                ))
            }
            _ if matches!(location, Location::Query | Location::Cookie) => Style::Form,
            _ => Style::Simple,
        };
        let explode = p
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == Style::Form);
        if param_required {
            required.push(Value::String(property.clone()));
        }
        properties.insert(property.clone(), schema);
        params.push(Param {
            name: pname.clone(),
            property,
            location: *location,
            style,
            explode,
        });
    }
    for p in params.iter().filter(|p| p.location == Location::Path) {
        if !path.contains(&format!("{{{}}}", p.name)) {
            return Err(format!(
                "path parameter {:?} is not in the path template",
                p.name
            ));
        }
    }
    if let Some(schema) = body_schema {
        if body.as_ref().is_some_and(|b| b.required) {
            required.push("body".into());
        }
        properties.insert("body".into(), schema);
    }
    let mut input = Map::new();
    input.insert(
        "type".into(),
        if required.is_empty() {
            json!(["object", "null"])
        } else {
            json!("object")
        },
    );
    input.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        input.insert("required".into(), Value::Array(required));
    }
    input.insert("additionalProperties".into(), Value::Bool(false));

    let summary = op
        .get("summary")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let details = op
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let description = match (summary, details) {
        (Some(s), Some(d)) if d.starts_with(s) => Some(d.to_string()),
        (Some(s), Some(d)) => Some(format!("{s}\n\n{d}")),
        (Some(s), None) => Some(s.to_string()),
        (None, Some(d)) => Some(d.to_string()),
        (None, None) => None,
    };

    Ok(Operation {
        name,
        method: method.to_uppercase(),
        path: path.to_string(),
        description,
        params,
        body,
        input_schema: deferred(Value::Object(input)),
        output_schema: output_schema(doc, op)?.map(deferred),
    })
}

/// `schema` kept as its JSON text, parsed and compiled only when the tool is used: a tool's
/// `Value` takes about ten times the memory of its text, and a large document has thousands.
fn deferred(schema: Value) -> ToolSchema {
    let text = serde_json::to_string(&schema).expect("a JSON value serialises");
    ToolSchema::deferred(text).unwrap_or_else(|_| ToolSchema::new(schema))
}

/// The input property of each parameter, by the collision rule of the module docs.
fn property_names(raw: &[(&Value, String, Location)], has_body: bool) -> Vec<String> {
    let clashes = |name: &str, me: usize| {
        (has_body && name == "body")
            || raw
                .iter()
                .enumerate()
                .any(|(i, (_, n, _))| i != me && n == name)
    };
    let mut taken: HashSet<String> = HashSet::new();
    if has_body {
        taken.insert("body".into());
    }
    let wanted: Vec<String> = raw
        .iter()
        .enumerate()
        .map(|(i, (_, name, location))| {
            if clashes(name, i) {
                format!("{name}_{}", location.as_str())
            } else {
                name.clone()
            }
        })
        .collect();
    // Unsuffixed names first, so a literal `id_query` keeps its name over a suffixed one.
    let mut out = vec![String::new(); raw.len()];
    let order = (0..raw.len())
        .filter(|i| wanted[*i] == raw[*i].1)
        .chain((0..raw.len()).filter(|i| wanted[*i] != raw[*i].1));
    for i in order.collect::<Vec<_>>() {
        let mut candidate = wanted[i].clone();
        let mut n = 2;
        while taken.contains(&candidate) {
            candidate = format!("{}_{n}", wanted[i]);
            n += 1;
        }
        taken.insert(candidate.clone());
        out[i] = candidate;
    }
    out
}

/// Whether a media type is JSON: `application/json` or any `+json`.
pub fn is_json(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The schema of the first 2xx response with a JSON media type, if any.
fn output_schema(doc: &Document, op: &Value) -> Result<Option<Value>, String> {
    let Some(responses) = op.get("responses").and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut codes: Vec<&String> = responses.keys().filter(|c| c.starts_with('2')).collect();
    codes.sort();
    for code in codes {
        let response = doc.deref(&responses[code])?;
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            continue;
        };
        if let Some((_, media)) = content.iter().find(|(t, _)| is_json(t)) {
            return Ok(media.get("schema").map(|s| Inliner::new(doc).schema(s)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(paths: Value) -> Document {
        Document::from_value(
            json!({"openapi": "3.1.0", "paths": paths, "components": {
                "parameters": {"Owner": {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}}},
                "schemas": {"Comment": {"type": "object", "required": ["body"], "properties": {"body": {"type": "string"}}}}
            }}),
            "test",
        )
        .unwrap()
    }

    fn ops(d: &Document) -> Vec<Operation> {
        let (ops, skipped) = read_operations(d, &Operations::default());
        assert!(skipped.is_empty(), "{skipped:?}");
        ops
    }

    #[test]
    fn a_path_that_does_not_start_with_one_slash_is_no_tool() {
        let get = json!({"get": {"responses": {"200": {"description": "ok"}}}});
        let d = doc(json!({
            "@evil.example/x": get, ":8443/x": get, ".evil.com/x": get, "//evil/x": get,
            "/fine\n": get, "/ok": get
        }));
        let (ops, skipped) = read_operations(&d, &Operations::default());
        let kept: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(kept, ["/fine\n", "/ok"]);
        assert_eq!(skipped.len(), 4, "{skipped:?}");
        assert!(skipped
            .iter()
            .all(|s| s.reason.contains("must start with a single `/`")));
    }

    #[test]
    fn names_come_from_operation_ids_or_method_and_path() {
        let d = doc(json!({
            "/repos/{owner}/issues/{n}/comments": {
                "post": {"operationId": "issues/create-comment"},
                "get": {}
            }
        }));
        let names: Vec<String> = ops(&d).into_iter().map(|o| o.name).collect();
        assert_eq!(
            names,
            ["get_repos_owner_issues_n_comments", "issues/create-comment"]
        );
        assert_eq!(
            execbox_host::assign_safe_names(names.iter().map(String::as_str)),
            ["get_repos_owner_issues_n_comments", "issues_create_comment"]
        );
    }

    #[test]
    fn parameters_merge_path_level_ones_and_become_properties() {
        let d = doc(json!({
            "/repos/{owner}/issues": {
                "parameters": [{"$ref": "#/components/parameters/Owner"}, {"name": "per_page", "in": "query", "schema": {"type": "integer"}}],
                "post": {
                    "operationId": "issues/create",
                    "summary": "Create an issue",
                    "description": "Any user with pull access can create an issue.",
                    "parameters": [{"name": "per_page", "in": "query", "required": true, "schema": {"type": "integer", "maximum": 100}}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Comment"}}}},
                    "responses": {"201": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Comment"}}}}}
                }
            }
        }));
        let op = &ops(&d)[0];
        assert_eq!(
            op.description.as_deref(),
            Some("Create an issue\n\nAny user with pull access can create an issue.")
        );
        assert!(op.input_schema.is_deferred() && !op.input_schema.is_parsed());
        assert_eq!(
            op.input_schema.value(),
            &json!({
                "type": "object",
                "properties": {
                    "owner": {"type": "string"},
                    "per_page": {"type": "integer", "maximum": 100},
                    "body": {"type": "object", "required": ["body"], "properties": {"body": {"type": "string"}}}
                },
                "required": ["owner", "per_page", "body"],
                "additionalProperties": false
            })
        );
        assert_eq!(
            op.output_schema.as_ref().unwrap().value()["required"],
            json!(["body"])
        );
    }

    #[test]
    fn colliding_names_are_suffixed_by_location() {
        let d = doc(json!({
            "/things/{id}": {
                "put": {
                    "parameters": [
                        {"name": "id", "in": "path", "required": true},
                        {"name": "id", "in": "query"},
                        {"name": "id", "in": "header"},
                        {"name": "body", "in": "query"},
                        {"name": "id_query", "in": "cookie"}
                    ],
                    "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}
                }
            }
        }));
        let op = &ops(&d)[0];
        let props: Vec<(&str, &str)> = op
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.property.as_str()))
            .collect();
        assert_eq!(
            props,
            [
                ("id", "id_path"),
                ("id", "id_query_2"),
                ("id", "id_header"),
                ("body", "body_query"),
                ("id_query", "id_query")
            ]
        );
        let keys: Vec<&String> = op.input_schema.value()["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(
            keys,
            [
                "id_path",
                "id_query_2",
                "id_header",
                "body_query",
                "id_query",
                "body"
            ]
        );
        // Without a request body, a parameter named `body` keeps its name.
        let d = doc(json!({"/x": {"get": {"parameters": [{"name": "body", "in": "query"}]}}}));
        assert_eq!(ops(&d)[0].params[0].property, "body");
    }

    #[test]
    fn filters_match_operation_ids_safe_names_and_tags() {
        let f = |include: &[&str], exclude: &[&str]| Operations {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        };
        let tags = vec!["issues".to_string()];
        assert!(filter_keeps(&f(&[], &[]), "repos/delete", &[]));
        assert!(filter_keeps(
            &f(&["issues/*"], &[]),
            "issues/create-comment",
            &[]
        ));
        assert!(filter_keeps(
            &f(&["issues_create*"], &[]),
            "issues/create-comment",
            &[]
        ));
        assert!(filter_keeps(&f(&["issues"], &[]), "anything", &tags));
        assert!(!filter_keeps(
            &f(&["issues/*"], &["*delete*"]),
            "issues/delete-comment",
            &[]
        ));
        assert!(!filter_keeps(&f(&["repos/get*"], &[]), "issues/get", &[]));
        let d = doc(
            json!({"/a": {"get": {"operationId": "a/list", "tags": ["alpha"]}, "delete": {"operationId": "a/delete"}}}),
        );
        let (ops, _) = read_operations(&d, &f(&["alpha", "a/*"], &["*delete"]));
        assert_eq!(
            ops.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
            ["a/list"]
        );
    }

    #[test]
    fn globs_match_linearly() {
        assert!(glob("*", ""));
        assert!(glob("a*b?d", "axxbcd"));
        assert!(!glob("a*b?d", "axxbd"));
        assert!(glob("*delete*", "repos/delete-hook"));
        assert!(!glob("issues/*", "pulls/list"));
        let long = "a".repeat(10_000);
        assert!(!glob("*a*a*a*a*a*b", &long));
    }

    #[test]
    fn query_styles_are_read_with_their_defaults() {
        let d = doc(json!({"/s": {"get": {"parameters": [
            {"name": "a", "in": "query"},
            {"name": "b", "in": "query", "style": "form", "explode": false},
            {"name": "c", "in": "query", "style": "spaceDelimited"},
            {"name": "d", "in": "query", "style": "pipeDelimited"},
            {"name": "e", "in": "query", "style": "deepObject", "explode": true},
            {"name": "f", "in": "header"}
        ]}}}));
        let styles: Vec<(Style, bool)> = ops(&d)[0]
            .params
            .iter()
            .map(|p| (p.style, p.explode))
            .collect();
        assert_eq!(
            styles,
            [
                (Style::Form, true),
                (Style::Form, false),
                (Style::SpaceDelimited, false),
                (Style::PipeDelimited, false),
                (Style::DeepObject, true),
                (Style::Simple, false)
            ]
        );
    }

    #[test]
    fn unsupported_bodies_and_broken_operations_are_skipped_with_a_reason() {
        let d = doc(json!({
            "/upload": {"post": {"requestBody": {"required": true, "content": {"multipart/form-data": {}}}}},
            "/bad/{x}": {"get": {"parameters": [{"name": "y", "in": "path"}]}},
            "/ok": {"get": {"parameters": [{"$ref": "#/components/parameters/Missing"}]}}
        }));
        let (ops, skipped) = read_operations(&d, &Operations::default());
        assert!(ops.is_empty());
        assert_eq!(skipped.len(), 3);
        assert!(
            skipped[0].reason.contains("multipart/form-data"),
            "{:?}",
            skipped[0]
        );
        assert!(
            skipped[1].reason.contains("not in the path template"),
            "{:?}",
            skipped[1]
        );
        assert!(
            skipped[2].reason.contains("points at nothing"),
            "{:?}",
            skipped[2]
        );
    }
}
