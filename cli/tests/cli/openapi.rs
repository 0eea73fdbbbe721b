//! `openapi:` providers end to end: a tools file naming an OpenAPI document, through `execbox
//! check`, `types` (under `tsc --strict`) and `run`, against Prism (a mock server generated
//! from the document, which refuses a request the document does not allow) and against a
//! small server of ours for credentials; GitHub's whole description included.

use serde_json::Value;

use crate::support::cli::{command, text};
use crate::support::openapi::{github_description, installed, tsc_strict, EchoServer, Prism};
use crate::support::otlp::OtlpReceiver;
use crate::support::temp::TempDir;

const PETSTORE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../openapi/tests/fixtures/petstore-3.0.yaml"
);

/// `execbox ARGS` with `code` on stdin and `env` set, to its end.
fn execbox_with(args: &[&str], code: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = command(args);
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("start execbox");
    let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), code.as_bytes());
    crate::support::cli::wait_output(child, std::time::Duration::from_secs(120))
}

fn write(dir: &TempDir, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn petstore_calls_pass_prism_and_its_answers_pass_the_output_schemas() {
    let Some(npm) = installed() else { return };
    let dir = TempDir::new("openapi-petstore");
    let prism = Prism::start(npm, PETSTORE.as_ref(), dir.join("prism.log"));
    // Prism serves the paths as the document writes them, without its server's `/v1`.
    let tools_root = write(
        &dir,
        "root.yaml",
        &format!(
            "version: 1\nproviders:\n  pets:\n    openapi: {PETSTORE}\n    base_url: {}\n",
            prism.url()
        ),
    );
    let program = "\
        const listed = await pets.pets_list({ tags: ['cat', 'dog'], limit: 2 });\n\
        const created = await pets.pets_create({ body: { name: 'Rex', tag: null } });\n\
        const got = await pets['pets/get']({ petId: 'p-1' });\n\
        let refused;\n\
        try { await pets.pets_list({ limit: 500 }) } catch (e) { refused = [e.code, e.message] }\n\
        return { listed: Array.isArray(listed), created: typeof created.id, got: typeof got.name, refused };";
    let out = execbox_with(&["run", "-", "--tools", &tools_root], program, &[]);
    assert!(
        out.status.success(),
        "{}\n--- prism ---\n{}",
        text(&out.stderr),
        prism.log()
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["listed"], true, "{result}");
    assert_eq!(result["created"], "string", "{result}");
    assert_eq!(result["got"], "string", "{result}");
    // Checked against the input schema before any request.
    assert_eq!(result["refused"][0], "validation_error", "{result}");
    // Prism logs each request it received and whether the document allows it (the query's
    // encoding is checked against a server of ours, in openapi/tests/calls.rs).
    let log = prism.log();
    assert!(log.contains("[HTTP SERVER] get /pets ℹ"), "{log}");
    assert!(log.contains("[HTTP SERVER] post /pets ℹ"), "{log}");
    assert!(log.contains("[HTTP SERVER] get /pets/p-1 ℹ"), "{log}");
    assert_eq!(log.matches("Request received").count(), 3, "{log}");
    assert_eq!(
        log.matches("The request passed the validation rules")
            .count(),
        3,
        "{log}"
    );
}

#[test]
fn github_description_checks_types_under_tsc_strict_and_runs_against_prism() {
    let Some(npm) = installed() else { return };
    let dir = TempDir::new("openapi-github");
    let document = github_description(npm);
    let prism = Prism::start(npm, &document, dir.join("prism.log"));
    let tools = write(
        &dir,
        "tools.yaml",
        &format!(
            "version: 1\nproviders:\n  github:\n    openapi: {}\n    base_url: {}\n    headers: {{ X-GitHub-Api-Version: \"2022-11-28\" }}\n    auth:\n      bearer: {{ env: GITHUB_TOKEN }}\n",
            document.display(),
            prism.url()
        ),
    );
    let env = [("GITHUB_TOKEN", "ghp_planted0123456789")];

    let out = execbox_with(&["check", "--tools", &tools], "", &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("1 provider (github)"), "{said}");
    let count: usize = said
        .split("github), ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a tool count in {said:?}"));
    assert!(count > 1000, "{said}");

    let out = execbox_with(&["types", "--tools", &tools], "", &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let declarations = dir.join("github.d.ts");
    std::fs::write(&declarations, &out.stdout).unwrap();
    let types = text(&out.stdout);
    assert!(
        types.contains("function issues_create_comment("),
        "{}",
        &types[..2000]
    );
    if let Err(errors) = tsc_strict(npm, &declarations) {
        panic!(
            "tsc --strict refuses the declarations:\n{}",
            errors.lines().take(40).collect::<Vec<_>>().join("\n")
        );
    }

    let program = "\
        const issue = await github.issues_get({ owner: 'octo', repo: 'hello', issue_number: 1 });\n\
        const comment = await github['issues/create-comment']({ owner: 'octo', repo: 'hello', issue_number: 1, body: { body: 'Thanks!' } });\n\
        const repos = await github.repos_list_for_org({ org: 'octo', type: 'public', per_page: 2 });\n\
        return [typeof issue.number, typeof comment.id, Array.isArray(repos)];";
    let out = execbox_with(&["run", "-", "--tools", &tools], program, &env);
    assert!(
        out.status.success(),
        "{}\n--- prism ---\n{}",
        text(&out.stderr),
        prism.log()
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result, serde_json::json!(["number", "number", true]));
    let log = prism.log();
    assert!(
        log.contains("[HTTP SERVER] post /repos/octo/hello/issues/1/comments ℹ"),
        "{log}"
    );
    assert_eq!(log.matches("Request received").count(), 3, "{log}");
    assert_eq!(
        log.matches("The request passed the validation rules")
            .count(),
        3,
        "{log}"
    );
}

/// A small API over the [`EchoServer`]: one operation echoing the request's headers, one
/// answering 401 quoting the credential it got.
fn echo_document() -> &'static str {
    r#"{
  "openapi": "3.1.0",
  "info": { "title": "Echo", "version": "1" },
  "paths": {
    "/echo": { "get": { "operationId": "echo", "responses": { "200": { "description": "the headers",
      "content": { "application/json": { "schema": { "type": "object" } } } } } } },
    "/deny": { "get": { "operationId": "deny", "responses": { "200": { "description": "never" } } } }
  }
}"#
}

#[test]
fn a_planted_credential_reaches_the_api_and_nothing_else() {
    const SECRET: &str = "PLANTED-cred-7f3a9c1e5b";
    let server = EchoServer::start();
    let receiver = OtlpReceiver::start();
    let dir = TempDir::new("openapi-secret");
    let document = write(&dir, "echo.json", echo_document());
    let tools = write(
        &dir,
        "tools.yaml",
        &format!(
            "version: 1\nproviders:\n  api:\n    openapi: {document}\n    base_url: {}\n    auth:\n      bearer: {{ env: API_TOKEN }}\n",
            server.url
        ),
    );
    let policy = write(
        &dir,
        "policy.yaml",
        "version: 1\nprincipals:\n  alice: {}\n",
    );
    let audit = dir.join("audit.jsonl");
    let program = "\
        const echoed = await api.echo();\n\
        console.log('echoed', JSON.stringify(echoed));\n\
        try { await api.deny() } catch (e) { console.log('denied', e.code, e.reason, e.status, e.message) }\n\
        return echoed;";
    let out = execbox_with(
        &[
            "run",
            "-",
            "--json",
            "--tools",
            &tools,
            "--policy",
            &policy,
            "--principal",
            "alice",
            "--audit-log",
            audit.to_str().unwrap(),
        ],
        program,
        &[
            ("API_TOKEN", SECRET),
            ("RUST_LOG", "trace"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
            ("OTEL_SERVICE_NAME", "openapi-secret"),
        ],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The API got it...
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert!(
            request
                .headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == &format!("Bearer {SECRET}")),
            "{request:?}"
        );
    }
    // ...and nothing else did: not the guest (the echo is redacted), nor its logs, nor the
    // error the 401 quoted, nor the audit log, nor stderr at trace level, nor a span.
    let done: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        done["result"]["authorization"], "Bearer [redacted]",
        "{done}"
    );
    let denied = done["logs"][1].as_str().unwrap();
    assert!(
        denied.starts_with("denied tool_error http_status 401 "),
        "{denied}"
    );
    let audit = std::fs::read_to_string(&audit).unwrap();
    assert!(audit.contains("\"tool_call\""), "{audit}");
    let spans = receiver.wait_for(std::time::Duration::from_secs(10), |s| !s.is_empty());
    assert!(!spans.is_empty());
    for (what, seen) in [
        ("stdout", stdout.as_str()),
        ("stderr", stderr.as_str()),
        ("the audit log", audit.as_str()),
        ("the spans", &format!("{spans:?}")),
    ] {
        assert!(
            !seen.contains(SECRET),
            "the credential is in {what}:\n{seen}"
        );
        assert!(
            !seen.contains("cred-7f3a"),
            "part of the credential is in {what}:\n{seen}"
        );
    }
}

#[test]
fn the_policy_applies_to_openapi_tools_as_to_any_tool() {
    let server = EchoServer::start();
    let dir = TempDir::new("openapi-policy");
    let document = write(&dir, "echo.json", echo_document());
    let tools = write(
        &dir,
        "tools.yaml",
        &format!(
            "version: 1\nproviders:\n  api:\n    openapi: {document}\n    base_url: {}\n    permissions: [api:read]\n    rate_limit: {{ requests: 1, window: 1h }}\n",
            server.url
        ),
    );
    let policy = write(
        &dir,
        "policy.yaml",
        "version: 1\nprincipals:\n  reader: { permissions: [\"api:read\"] }\n  nobody: {}\n",
    );
    // A principal that may call none of a provider's tools has no such namespace at all.
    let program = "\
        if (typeof api === 'undefined') return ['no namespace'];\n\
        await api.echo();\n\
        try { await api.echo() } catch (e) { return [typeof api.echo, e.reason] }";
    let run = |principal: &str| {
        let out = execbox_with(
            &[
                "run",
                "-",
                "--tools",
                &tools,
                "--policy",
                &policy,
                "--principal",
                principal,
            ],
            program,
            &[],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(
        run("reader"),
        serde_json::json!(["function", "rate_limited"])
    );
    assert_eq!(run("nobody"), serde_json::json!(["no namespace"]));
    assert_eq!(server.seen.lock().unwrap().len(), 1);
}

#[test]
fn tools_file_mistakes_in_an_openapi_provider_name_the_line_and_the_field() {
    let dir = TempDir::new("openapi-mistakes");
    let document = write(&dir, "echo.json", echo_document());
    let cases = [
        (
            format!("    openapi: {document}\n    baseurl: http://127.0.0.1:9\n"),
            "tools.yaml:5:14: providers.api: unknown field `baseurl`; did you mean `base_url`?",
        ),
        (
            format!("    openapi: {document}\n    base_url: http://127.0.0.1:9\n    auth:\n      bearer: {{ env: EXECBOX_TEST_UNSET_TOKEN }}\n"),
            "tools.yaml:7:7: providers.api.auth.bearer: the environment variable EXECBOX_TEST_UNSET_TOKEN is not set",
        ),
        (
            format!("    openapi: {document}\n    auth:\n      baerer: {{ env: T }}\n"),
            "providers.api.auth: unknown kind `baerer`; did you mean `bearer`?",
        ),
        (
            "    openapi: ./missing.json\n".to_string(),
            "tools.yaml:4:14: providers.api.openapi: cannot read the OpenAPI document",
        ),
        (
            "    openapi: http://example.com/api.json\n".to_string(),
            "providers.api.openapi: http://example.com is plain http",
        ),
        (
            "    tools: {}\n    base_url: http://x\n".to_string(),
            "`base_url` is a field of `openapi` providers, and this provider has `tools`",
        ),
        (
            format!("    openapi: {document}\n    timeout_ms: fast\n"),
            "providers.api.timeout_ms: invalid type: string \"fast\", expected a whole number",
        ),
    ];
    for (provider, expected) in cases {
        let tools = write(
            &dir,
            "tools.yaml",
            &format!("version: 1\nproviders:\n  api:\n{provider}"),
        );
        let out = execbox_with(&["check", "--tools", &tools], "", &[]);
        assert_eq!(out.status.code(), Some(2), "{provider}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{provider}\n{stderr}");
    }
}
