//! Documents given by URL (`openapi: https://...`): fetched once when the provider is built,
//! over https (plain http on this machine only), within the provider's time limit and
//! [`MAX_DOCUMENT_BYTES`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::Url;

use crate::document::{Document, MAX_DOCUMENT_BYTES};
use crate::error::OpenApiError;
use crate::http::{describe_send_error_at, is_loopback, read_bounded, status_text, MAX_REDIRECTS};

/// Whether `openapi:` names a URL rather than a file.
pub fn is_url(source: &str) -> bool {
    let lower = source.get(..8).unwrap_or(source).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// Fetches and reads the document at `url`. Blocks: it runs on a thread of its own with a
/// runtime of its own, so it can be called from anywhere, an async runtime's thread included.
pub fn fetch_document(url: &str, timeout: Duration) -> Result<Document, OpenApiError> {
    let parsed = check_document_url(url)?;
    let shown = shown(&parsed);
    let name = shown.clone();
    let fetched = std::thread::Builder::new()
        .name("execbox-openapi-fetch".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the fetch: {e}"))?;
            runtime.block_on(async {
                match tokio::time::timeout(timeout, fetch(parsed, &name)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(format!(
                        "no complete answer within {} ms (the provider's timeout_ms); download \
                         the document and give its path, or raise timeout_ms",
                        timeout.as_millis()
                    )),
                }
            })
        })
        .map_err(|e| OpenApiError::document(&shown, format!("cannot start the fetch: {e}")))?
        .join()
        .map_err(|_| OpenApiError::document(&shown, "the fetch failed unexpectedly"))?;
    let bytes = fetched.map_err(|message| OpenApiError::document(&shown, message))?;
    Document::from_slice(&bytes, &shown)
}

/// The URL as messages show it: without its query, which may carry a key.
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// An https URL (http on this machine), without a user name or password.
fn check_document_url(text: &str) -> Result<Url, OpenApiError> {
    let bad = |m: String| OpenApiError::config("openapi", m);
    let url = Url::parse(text).map_err(|e| bad(format!("it is not an absolute URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "the URL holds a user name or password; download the document and give its path".into(),
        ));
    }
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        _ => Err(bad(format!(
            "{} is plain http: a document fetched unencrypted could be altered on the way, and \
             it decides what the tools send; use https (plain http is accepted for localhost only)",
            url.origin().ascii_serialization()
        ))),
    }
}

async fn fetch(url: Url, shown: &str) -> Result<Vec<u8>, String> {
    let origin = url.origin().ascii_serialization();
    let client = client()?;
    let response = client
        .get(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, application/yaml, text/yaml, */*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| describe_send_error_at(&e, &origin))?;
    let status = response.status();
    if status.is_redirection() {
        let to = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| response.url().join(l).ok())
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|| "somewhere else".into());
        return Err(format!(
            "HTTP {} fetching {shown}: a redirect to {to} is not followed (plain http to \
             another machine, or this machine from a remote document); give the document's \
             final https URL, or download it and give its path",
            status_text(status)
        ));
    }
    if !status.is_success() {
        return Err(format!(
            "HTTP {} fetching {shown}; check the URL, or download the document and give its path",
            status_text(status)
        ));
    }
    if let Some(length) = response.content_length() {
        if length > MAX_DOCUMENT_BYTES {
            return Err(too_large(length));
        }
    }
    let (body, size) = read_bounded(response, MAX_DOCUMENT_BYTES).await?;
    if size > MAX_DOCUMENT_BYTES {
        return Err(too_large(size));
    }
    Ok(body)
}

fn too_large(size: u64) -> String {
    format!("the document is {size} bytes or more, more than the {MAX_DOCUMENT_BYTES} a document may have")
}

/// The client of document fetches: rustls (ring) with the web's roots; redirects followed
/// (at most [`MAX_REDIRECTS`]) to https, or within this machine.
fn client() -> Result<reqwest::Client, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let redirects = Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        // This machine only when the document was asked of this machine: a remote server
        // cannot point execbox at a local service.
        let next = attempt.url();
        let local = attempt.previous().first().is_some_and(is_loopback);
        if (next.scheme() == "https" && (local || !is_loopback(next)))
            || (next.scheme() == "http" && is_loopback(next) && local)
        {
            attempt.follow()
        } else {
            // Not followed: `fetch` says where it led.
            attempt.stop()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(redirects)
        .user_agent(concat!("execbox/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}
