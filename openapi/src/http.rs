//! HTTP helpers every other module shares: encoding, messages about servers and bodies
//! (origins only, never a full URL), bounded reads and the checks of URLs.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::{StatusCode, Url};

/// How much of an error answer's body a message quotes: 1 KiB.
pub const QUOTED_BODY_BYTES: usize = 1024;

/// The most redirects followed (within the origin) for one call.
pub const MAX_REDIRECTS: usize = 10;

/// Everything but RFC 3986's unreserved characters is percent-encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path parameter's value, a query name or value, percent-encoded.
pub fn encode(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

/// `application/x-www-form-urlencoded` (space as `%20`, which every server reads).
pub fn encode_form(text: &str) -> String {
    encode(text)
}

/// The origin of a URL, for messages: `https://api.example.com`.
pub fn origin(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => u.origin().ascii_serialization(),
        Err(_) => "the API".into(),
    }
}

/// Why a request could not be sent, without the URL (it may carry a key in its query).
pub fn describe_send_error(e: &reqwest::Error) -> String {
    let url = e
        .url()
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|| "the server".into());
    describe_send_error_at(e, &url)
}

pub fn describe_send_error_at(e: &reqwest::Error, origin: &str) -> String {
    let mut cause = None;
    let mut next = std::error::Error::source(e);
    while let Some(source) = next {
        cause = Some(source.to_string());
        next = source.source();
    }
    let cause = cause.unwrap_or_else(|| "the request failed".to_string());
    if e.is_redirect() {
        format!("{origin} redirected more than {MAX_REDIRECTS} times")
    } else if e.is_connect() {
        format!("cannot connect to {origin}: {cause}")
    } else if e.is_timeout() {
        format!("{origin} timed out: {cause}")
    } else {
        format!("the request to {origin} failed: {cause}")
    }
}

/// `404 Not Found`.
pub fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// At most [`QUOTED_BODY_BYTES`] of a body, as one line, or `(empty body)`.
pub fn quote_body(body: &[u8]) -> String {
    if body.is_empty() {
        return "(empty body)".into();
    }
    let cut = &body[..body.len().min(QUOTED_BODY_BYTES)];
    let text = String::from_utf8_lossy(cut);
    let mut out =
        execbox_host::process_output::escape_controls(text.trim_end_matches('\u{FFFD}'), false);
    if body.len() > QUOTED_BODY_BYTES {
        out.push('…');
    }
    out
}

/// Reads a body up to `max` bytes; returns what was read and the size seen (over `max` when
/// the body is larger: reading stops there).
pub async fn read_bounded(
    mut response: reqwest::Response,
    max: u64,
) -> Result<(Vec<u8>, u64), String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| describe_send_error(&e))?
    {
        let room = (max as usize).saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            return Ok((body, max + 1));
        }
    }
    let size = body.len() as u64;
    Ok((body, size))
}

/// Whether a host is this machine (plain http is accepted for credentials there only).
pub(crate) fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks a base URL (or a token URL): absolute, http or https, no query or fragment.
pub fn check_base_url(text: &str) -> Result<(), String> {
    // A URL is named by its origin only: its query or user part may hold a key.
    let url = Url::parse(text).map_err(|e| format!("it is not an absolute URL ({e})"))?;
    let shown = url.origin().ascii_serialization();
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "a {} URL is not an http or https URL",
            url.scheme()
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "the URL of {shown} has a query or a fragment (not shown); give the URL without \
             them, and a key under `auth`"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the URL holds a user name or password; give credentials under `auth`".into());
    }
    Ok(())
}

/// Refuses to send a credential over plain http beyond this machine.
pub fn check_credentials_transport(text: &str) -> Result<(), String> {
    let url = Url::parse(text).map_err(|e| format!("it is not an absolute URL ({e})"))?;
    if url.scheme() == "http" && !is_loopback(&url) {
        return Err(format!(
            "{} is plain http: the credential would cross the network unencrypted; use https \
             (plain http is accepted for localhost only)",
            url.origin().ascii_serialization()
        ));
    }
    Ok(())
}
