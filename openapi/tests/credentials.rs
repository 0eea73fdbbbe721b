//! Credentials: each kind of auth against a real local server, the OAuth2 token endpoint down,
//! slow and wrong, and planted secrets that must never show in an error or `Debug` output.

mod support;

use std::sync::atomic::Ordering;

use execbox_openapi::{ApiKey, ApiKeyLocation, AuthConfig, Basic, ClientCredentials, Secret};
use serde_json::json;
use support::{call, provider, start, try_provider};

/// Sets every variable these tests read, once, before any test reads one: setting the
/// environment while another thread reads it is not safe.
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("EXECBOX_TEST_BEARER", "PLANTED-bearer-5c0ffee");
        std::env::set_var("EXECBOX_TEST_API_KEY", "PLANTED-key/with+chars");
        std::env::set_var("EXECBOX_TEST_CLIENT_SECRET", "PLANTED-client-secret-77");
        std::env::set_var("EXECBOX_TEST_WRONG_SECRET", "PLANTED-wrong-secret");
        std::env::set_var("EXECBOX_TEST_REMOTE_TOKEN", "PLANTED-remote");
    });
}

/// Asserts that `secret` shows nowhere in what a model or a log could read of `text`.
fn assert_hidden(text: &str, secret: &str) {
    assert!(!text.contains(secret), "the secret leaked: {text}");
}

#[tokio::test]
async fn bearer_tokens_go_in_the_authorization_header_and_nowhere_else() {
    init();
    let secret = "PLANTED-bearer-5c0ffee";
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| {
        c.auth = Some(AuthConfig::Bearer(Secret::Env(
            "EXECBOX_TEST_BEARER".into(),
        )))
    });
    let out = call(&p, "echo/get", json!({"id": "1"})).await.unwrap();
    assert_eq!(
        api.last().headers["authorization"],
        format!("Bearer {secret}")
    );
    assert_hidden(&out.to_string(), secret);
    // The server echoes the header in its error body: the message hides it.
    let err = call(&p, "status", json!({"code": 403})).await.unwrap_err();
    assert!(
        err.message.contains("authorization=Bearer [redacted]"),
        "{}",
        err.message
    );
    assert_hidden(&err.message, secret);
    assert_hidden(&format!("{p:?} {err:?}"), secret);
    // The guest pads the echoed URI so the secret straddles the quoted KiB's end: no part of
    // it shows, wherever the cut falls.
    let before = "denied: uri=/v1/status/403?retry=".len() + " authorization=Bearer ".len();
    for pad in (1000 - before - secret.len())..=(1030 - before) {
        let input = json!({"code": 403, "retry": "1".repeat(pad)});
        let err = call(&p, "status", input).await.unwrap_err();
        assert_hidden(&err.message, "PLANTED-");
        assert_hidden(&err.message, "5c0ffee");
    }
}

#[tokio::test]
async fn api_keys_go_in_a_header_or_the_query_and_never_into_messages() {
    init();
    let secret = "PLANTED-key/with+chars";
    let (api, addr, _, _) = start().await;
    let key = |location| {
        AuthConfig::ApiKey(ApiKey {
            location,
            name: "X-Api-Key".into(),
            env: Some("EXECBOX_TEST_API_KEY".into()),
            file: None,
        })
    };
    let p = provider(addr, |c| c.auth = Some(key(ApiKeyLocation::Header)));
    call(&p, "text", json!({})).await.unwrap();
    assert_eq!(api.last().headers["x-api-key"], secret);
    let err = call(&p, "status", json!({"code": 401})).await.unwrap_err();
    assert_hidden(&err.message, secret);

    let p = provider(addr, |c| c.auth = Some(key(ApiKeyLocation::Query)));
    call(&p, "echo/get", json!({"id": "1", "tags": ["a"]}))
        .await
        .unwrap();
    assert_eq!(
        api.last().query,
        "tags=a&X-Api-Key=PLANTED-key%2Fwith%2Bchars"
    );
    // The server echoes the whole URI, the key in its query: the message hides it, encoded too.
    let err = call(&p, "status", json!({"code": 500})).await.unwrap_err();
    assert!(
        err.message.contains("X-Api-Key=[redacted]"),
        "{}",
        err.message
    );
    assert_hidden(&err.message, "PLANTED-key%2Fwith%2Bchars");
    assert_hidden(&err.message, secret);
    // A server that cannot be reached: the message names the origin, not the URL.
    let port = support::closed_port().await;
    let p = provider(std::net::SocketAddr::from(([127, 0, 0, 1], port)), |c| {
        c.auth = Some(key(ApiKeyLocation::Query))
    });
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert_hidden(&err.message, "PLANTED");
    assert_hidden(&format!("{p:?}"), "PLANTED");
}

#[tokio::test]
async fn basic_auth_reads_its_secrets_from_files_and_hides_the_encoding() {
    init();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("basic-user"), "alice\n").unwrap();
    std::fs::write(dir.join("basic-password"), "PLANTED-pw-42\n").unwrap();
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| {
        c.auth = Some(AuthConfig::Basic(Basic {
            username: Secret::File("basic-user".into()),
            password: Secret::File("basic-password".into()),
        }))
    });
    let out = call(&p, "echo/get", json!({"id": "1"})).await.unwrap();
    let encoded = "YWxpY2U6UExBTlRFRC1wdy00Mg=="; // alice:PLANTED-pw-42
    assert_eq!(
        api.last().headers["authorization"],
        format!("Basic {encoded}")
    );
    assert_eq!(out["authorization"], "Basic [redacted]");
    let err = call(&p, "status", json!({"code": 401})).await.unwrap_err();
    assert_hidden(&err.message, encoded);
    assert_hidden(&format!("{p:?}"), "PLANTED-pw-42");
}

fn oauth(addr: std::net::SocketAddr, path: &str) -> AuthConfig {
    AuthConfig::Oauth2ClientCredentials(ClientCredentials {
        token_url: format!("http://{addr}{path}"),
        client_id: support::CLIENT_ID.into(),
        client_secret: Secret::Env("EXECBOX_TEST_CLIENT_SECRET".into()),
        scopes: vec!["read".into(), "write".into()],
    })
}

fn set_client_secret() -> &'static str {
    init();
    "PLANTED-client-secret-77"
}

#[tokio::test]
async fn oauth2_tokens_are_fetched_once_and_cached_until_they_expire() {
    let secret = set_client_secret();
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| c.auth = Some(oauth(addr, "/token")));
    for _ in 0..3 {
        let out = call(&p, "echo/get", json!({"id": "1"})).await.unwrap();
        assert_eq!(out["authorization"], "Bearer [redacted]");
    }
    assert_eq!(api.token_requests.load(Ordering::SeqCst), 1);
    assert!(api
        .seen()
        .iter()
        .all(|s| s.headers["authorization"] == "Bearer tok-1"));

    // A token that expires at once is fetched again for every call.
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| c.auth = Some(oauth(addr, "/token-expired")));
    call(&p, "text", json!({})).await.unwrap();
    call(&p, "text", json!({})).await.unwrap();
    assert_eq!(api.token_requests.load(Ordering::SeqCst), 2);
    assert_eq!(api.last().headers["authorization"], "Bearer tok-2");
    assert_hidden(&format!("{p:?}"), secret);
}

#[tokio::test]
async fn the_token_endpoint_down_slow_or_wrong_gives_a_clear_error() {
    let secret = set_client_secret();
    let (api, addr, _, _) = start().await;

    let port = support::closed_port().await;
    let down = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let p = provider(addr, |c| c.auth = Some(oauth(down, "/token")));
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert_eq!(err.reason.as_deref(), Some("auth"));
    assert!(err.message.starts_with(&format!("GET /text: cannot get an OAuth2 token from http://127.0.0.1:{port}/token: cannot connect")), "{}", err.message);

    let p = provider(addr, |c| {
        c.auth = Some(oauth(addr, "/token-slow"));
        c.timeout_ms = 300;
    });
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert!(
        err.message
            .contains("/token-slow did not answer within 300 ms"),
        "{}",
        err.message
    );

    let p = provider(addr, |c| c.auth = Some(oauth(addr, "/token-not-json")));
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert!(
        err.message.contains(
            "answered something that is not JSON; expected JSON with a string `access_token`"
        ),
        "{}",
        err.message
    );

    let p = provider(addr, |c| c.auth = Some(oauth(addr, "/token-no-access")));
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert!(
        err.message.contains("answered without an `access_token`"),
        "{}",
        err.message
    );

    // Wrong client credentials: the endpoint's 401 is quoted, the secret is not.
    let p = provider(addr, |c| {
        c.auth = Some(AuthConfig::Oauth2ClientCredentials(ClientCredentials {
            token_url: format!("http://{addr}/token"),
            client_id: support::CLIENT_ID.into(),
            client_secret: Secret::Env("EXECBOX_TEST_WRONG_SECRET".into()),
            scopes: vec![],
        }))
    });
    let err = call(&p, "text", json!({})).await.unwrap_err();
    assert!(
        err.message
            .contains("refused the client credentials: HTTP 401 Unauthorized"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("[redacted]"),
        "the endpoint echoed the credential: {}",
        err.message
    );
    assert_hidden(&err.message, "PLANTED-wrong-secret");
    assert_hidden(&err.message, secret);
    // No call reached the API without a token.
    assert!(api.seen().is_empty(), "{:?}", api.seen());
}

#[tokio::test]
async fn missing_secrets_and_plain_http_beyond_loopback_are_refused_at_load() {
    init();
    let (_, addr, _, _) = start().await;
    let err = try_provider(addr, |c| {
        c.auth = Some(AuthConfig::Bearer(Secret::Env(
            "EXECBOX_TEST_SURELY_UNSET".into(),
        )))
    })
    .unwrap_err()
    .to_string();
    assert_eq!(err, "auth.bearer: the environment variable EXECBOX_TEST_SURELY_UNSET is not set; export it, or give the secret as `file: PATH`");
    let err = try_provider(addr, |c| {
        c.base_url = Some("http://api.example.com".into());
        c.auth = Some(AuthConfig::Bearer(Secret::Env(
            "EXECBOX_TEST_REMOTE_TOKEN".into(),
        )));
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("base_url: http://api.example.com is plain http"),
        "{err}"
    );
    assert_hidden(&err, "PLANTED");
}

#[tokio::test]
async fn a_token_the_api_refuses_is_forgotten_and_fetched_again() {
    set_client_secret();
    let (api, addr, _, _) = start().await;
    let p = provider(addr, |c| c.auth = Some(oauth(addr, "/token")));
    let err = call(&p, "status", json!({"code": 401})).await.unwrap_err();
    assert_eq!(err.reason.as_deref(), Some("http_status"));
    assert_eq!(api.token_requests.load(Ordering::SeqCst), 1);
    call(&p, "text", json!({})).await.unwrap();
    assert_eq!(api.token_requests.load(Ordering::SeqCst), 2);
    assert_eq!(api.last().headers["authorization"], "Bearer tok-2");
    // Another status keeps the token.
    let _ = call(&p, "status", json!({"code": 404})).await.unwrap_err();
    call(&p, "text", json!({})).await.unwrap();
    assert_eq!(api.token_requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_guest_can_neither_shadow_nor_duplicate_the_key() {
    init();
    let secret = "PLANTED-key/with+chars";
    let (api, addr, _, _) = start().await;
    // A document that lets the guest set a header named as the key, an exploded object in
    // the query (whose keys name their own parameters), and framing headers.
    let mut document = support::document();
    document["paths"]["/echo/{id}"]["get"]["parameters"] = json!([
        {"name": "X-Api-Key", "in": "header", "schema": {"type": "string"}},
        {"name": "Host", "in": "header", "schema": {"type": "string"}},
        {"name": "Transfer-Encoding", "in": "header", "schema": {"type": "string"}},
        {"name": "filter", "in": "query", "style": "form", "explode": true,
         "schema": {"type": "object", "additionalProperties": {"type": "string"}}}
    ]);
    let doc = execbox_openapi::Document::from_value(document, "test.json").unwrap();
    for location in [ApiKeyLocation::Header, ApiKeyLocation::Query] {
        let mut config = execbox_openapi::OpenApiConfig::new("test.json");
        config.base_url = Some(format!("http://{addr}/v1"));
        config.auth = Some(AuthConfig::ApiKey(ApiKey {
            location,
            name: "X-Api-Key".into(),
            env: Some("EXECBOX_TEST_API_KEY".into()),
            file: None,
        }));
        let p = execbox_openapi::OpenApiProvider::from_document(
            "api",
            &doc,
            &config,
            std::path::Path::new("."),
        )
        .unwrap();
        let get = p
            .provider()
            .tools()
            .iter()
            .find(|t| t.name() == "echo/get")
            .unwrap();
        // Host and Transfer-Encoding are not the guest's: no input of the tool.
        let schema = get.get_input_schema().unwrap().to_string();
        assert!(
            !schema.contains("Host") && !schema.contains("Transfer-Encoding"),
            "{schema}"
        );
        call(
            &p,
            "echo/get",
            json!({"id": "1", "X-Api-Key": "guest", "filter": {"X-Api-Key": "guest", "a": "b"}}),
        )
        .await
        .unwrap();
        let seen = api.last();
        match location {
            ApiKeyLocation::Header => {
                assert_eq!(seen.headers["x-api-key"], secret);
                assert!(!format!("{:?}", seen.headers).contains("guest"), "{seen:?}");
            }
            ApiKeyLocation::Query => {
                assert_eq!(seen.query, "a=b&X-Api-Key=PLANTED-key%2Fwith%2Bchars")
            }
        }
    }
}
