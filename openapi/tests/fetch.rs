//! Documents given by URL: fetched once from a real local server, in JSON or YAML, following
//! same-machine redirects; a server that is down, slow, answers an error or too much makes a
//! clear error naming the document and what to do, within the provider's time limit.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use execbox_openapi::{OpenApiConfig, OpenApiError, OpenApiProvider, MAX_DOCUMENT_BYTES};

const PETSTORE: &str = include_str!("fixtures/petstore-3.0.yaml");

async fn serve() -> SocketAddr {
    let app = Router::new()
        .route("/petstore.yaml", get(|| async { PETSTORE }))
        .route(
            "/moved",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/petstore.yaml")]) }),
        )
        .route(
            "/to-plain-http",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://example.com/petstore.yaml")],
                )
            }),
        )
        .route(
            "/gone",
            get(|| async { (StatusCode::NOT_FOUND, "no such document") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                PETSTORE
            }),
        )
        .route("/huge", get(huge));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// More than a document may have, streamed without a length.
async fn huge() -> Response {
    let chunk = Bytes::from(vec![b' '; 1 << 20]);
    let chunks = (MAX_DOCUMENT_BYTES >> 20) + 2;
    let stream = futures_util::stream::iter(
        (0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
    );
    Body::from_stream(stream).into_response()
}

/// Builds provider `pets` from `url` on a blocking thread, as a front end would.
async fn load(url: String, timeout_ms: u64) -> Result<OpenApiProvider, OpenApiError> {
    tokio::task::spawn_blocking(move || {
        let mut config = OpenApiConfig::new(url);
        config.base_url = Some("http://127.0.0.1:9".into());
        config.timeout_ms = timeout_ms;
        OpenApiProvider::load("pets", &config, Path::new("/nonexistent"))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_is_fetched_by_url_and_through_a_redirect() {
    let addr = serve().await;
    for path in ["petstore.yaml", "moved"] {
        let pets = load(format!("http://{addr}/{path}"), 5_000)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(pets.provider().tools().len(), 5, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_of_the_server_is_a_clear_error() {
    let addr = serve().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cases = [
        (
            format!("http://{addr}/gone"),
            format!("the OpenAPI document http://{addr}/gone: HTTP 404 Not Found fetching http://{addr}/gone; check the URL, or download the document and give its path"),
        ),
        (
            format!("http://127.0.0.1:{closed}/api.json"),
            format!("the OpenAPI document http://127.0.0.1:{closed}/api.json: cannot connect to http://127.0.0.1:{closed}"),
        ),
        (
            format!("http://{addr}/huge"),
            format!("the document is {} bytes or more, more than the {MAX_DOCUMENT_BYTES} a document may have", MAX_DOCUMENT_BYTES + 1),
        ),
        (
            format!("http://{addr}/to-plain-http"),
            "HTTP 302 Found fetching http://127.0.0.1:PORT/to-plain-http: a redirect to http://example.com is not followed".replace("127.0.0.1:PORT", &addr.to_string()),
        ),
        (
            "http://example.com/api.json".to_string(),
            "openapi: http://example.com is plain http".to_string(),
        ),
        (
            format!("https://user:pw@{addr}/petstore.yaml"),
            "openapi: the URL holds a user name or password".to_string(),
        ),
    ];
    for (url, want) in cases {
        let got = load(url.clone(), 5_000).await.unwrap_err().to_string();
        assert!(got.contains(&want), "{url}\n  got: {got}\n want: {want}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_fails_within_the_time_limit() {
    let addr = serve().await;
    let started = Instant::now();
    let got = load(format!("http://{addr}/slow"), 300)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        got.contains("no complete answer within 300 ms (the provider's timeout_ms)"),
        "{got}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_of_a_url_never_appears_in_an_error() {
    let addr = serve().await;
    let got = load(format!("http://{addr}/gone?key=PLANTED-query-key"), 5_000)
        .await
        .unwrap_err()
        .to_string();
    assert!(!got.contains("PLANTED"), "{got}");
    assert!(got.contains("HTTP 404"), "{got}");
}
