//! One tool call: the input made into an HTTP request, sent under the provider's limits, and
//! the answer made into a value or a `ToolError`.
//!
//! Messages name the operation by its method and path template (`GET /pets/{petId}`) and a
//! server by its origin only, never a full URL: a query may carry an API key. Every message
//! and every answer passes the provider's [`Redactor`] before it leaves.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use execbox_host::{BoxFuture, ToolContext, ToolError, ToolHandler};
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, RETRY_AFTER,
};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Map, Value};

use crate::auth::{Auth, Redactor};
use crate::http::{
    describe_send_error, describe_send_error_at, encode, origin, quote_body, read_bounded,
    status_text, MAX_REDIRECTS, QUOTED_BODY_BYTES,
};
use crate::operations::{is_json, Location, Operation, Param, Style};

/// What every operation tool of one provider shares.
pub struct Shared {
    /// The client: rustls (ring), same-origin redirects only.
    pub client: reqwest::Client,
    /// The base URL, without a trailing `/`.
    pub base: String,
    /// The configured headers.
    pub headers: HeaderMap,
    /// The credentials.
    pub auth: Auth,
    /// The time limit of one call.
    pub timeout: Duration,
    /// The largest answer read.
    pub max_response_bytes: u64,
    /// The secrets to keep out of messages and answers.
    pub redactor: Redactor,
}

/// How much more than the quoted KiB an error body is read, so that any secret starting in
/// the quoted part is read whole before redaction (secrets are far shorter).
const REDACTION_MARGIN: usize = 16 * 1024;

/// The handler of one operation's tool.
pub struct OperationTool {
    pub(crate) shared: Arc<Shared>,
    pub(crate) op: Arc<Operation>,
}

impl ToolHandler for OperationTool {
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>> {
        let shared = self.shared.clone();
        let op = self.op.clone();
        Box::pin(async move {
            let label = format!("{} {}", op.method, op.path);
            let outcome = tokio::select! {
                outcome = call(&shared, &op, &label, input) => outcome,
                _ = ctx.cancel.cancelled() => Err(ToolError::cancelled()),
            };
            outcome.map_err(|mut e| {
                e.message = shared.redactor.redact(&e.message);
                e
            })
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.shared.timeout)
    }
}

async fn call(
    shared: &Shared,
    op: &Operation,
    label: &str,
    input: Value,
) -> Result<Value, ToolError> {
    let empty = Map::new();
    let input = match &input {
        Value::Object(map) => map,
        Value::Null => &empty,
        _ => {
            return Err(ToolError::validation(format!(
                "{label}: the input must be an object"
            )))
        }
    };
    let url = build_url(shared, op, input, label)?;
    let method = Method::from_bytes(op.method.as_bytes())
        .map_err(|_| ToolError::tool(format!("{label}: {:?} is not an HTTP method", op.method)))?;

    let token = match &shared.auth {
        Auth::OAuth2(source) => Some(
            source
                .token()
                .await
                .map_err(|m| ToolError::tool(format!("{label}: {m}")).with_reason("auth"))?,
        ),
        _ => None,
    };

    let mut request = shared
        .client
        .request(method, url)
        .headers(shared.headers.clone());
    let mut cookies = Vec::new();
    for p in &op.params {
        let Some(value) = input.get(&p.property).filter(|v| !v.is_null()) else {
            continue;
        };
        match p.location {
            Location::Header => {
                let text = simple(value, p.explode);
                let value = HeaderValue::from_str(&text).map_err(|_| {
                    ToolError::validation(format!(
                        "{label}: header parameter {} ({}) holds characters a header cannot carry",
                        p.name, p.property
                    ))
                })?;
                let name = HeaderName::from_bytes(p.name.as_bytes()).map_err(|_| {
                    ToolError::tool(format!("{label}: {:?} is not a valid header name", p.name))
                })?;
                // The credential's own header is the host's to set, never the guest's.
                if matches!(&shared.auth, Auth::Header(auth, _) if *auth == name) {
                    continue;
                }
                request = request.header(name, value);
            }
            Location::Cookie => {
                cookies.push(format!("{}={}", p.name, encode(&simple(value, false))))
            }
            Location::Path | Location::Query => {}
        }
    }
    if !cookies.is_empty() {
        request = request.header(reqwest::header::COOKIE, cookies.join("; "));
    }
    match (&shared.auth, &token) {
        (Auth::Header(name, value), _) => {
            request = request.header(name.clone(), sensitive(value.expose())?)
        }
        (_, Some(token)) => {
            request = request.header(
                reqwest::header::AUTHORIZATION,
                sensitive(&format!("Bearer {}", token.expose()))?,
            )
        }
        _ => {}
    }
    if let (Some(body), Some(value)) = (&op.body, input.get("body")) {
        let bytes = if body.json {
            serde_json::to_vec(value).map_err(|e| {
                ToolError::tool(format!("{label}: cannot write the body as JSON: {e}"))
            })?
        } else {
            match value {
                Value::String(s) => s.clone().into_bytes(),
                other => other.to_string().into_bytes(),
            }
        };
        request = request
            .header(CONTENT_TYPE, body.content_type.as_str())
            .body(bytes);
    }

    let response = match tokio::time::timeout(shared.timeout, async {
        let response = request
            .send()
            .await
            .map_err(|e| send_error(&e, label, &shared.base))?;
        answer(shared, label, response).await
    })
    .await
    {
        Ok(result) => result,
        Err(_) => Err(ToolError::timeout(format!(
            "{label}: no complete answer within {} ms (the provider's timeout_ms)",
            shared.timeout.as_millis()
        ))),
    };
    // A token the API refuses is not used again: the next call fetches a new one.
    if let (Err(e), Auth::OAuth2(source)) = (&response, &shared.auth) {
        if e.reason.as_deref() == Some("http_status") && e.message.contains(": HTTP 401 ") {
            source.forget().await;
        }
    }
    response
}

fn sensitive(text: &str) -> Result<HeaderValue, ToolError> {
    let mut value = HeaderValue::from_str(text)
        .map_err(|_| ToolError::tool("the credential cannot be sent in a header"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The request URL: the base, the path template filled in, the query.
fn build_url(
    shared: &Shared,
    op: &Operation,
    input: &Map<String, Value>,
    label: &str,
) -> Result<Url, ToolError> {
    let mut path = op.path.clone();
    let mut query = String::new();
    for p in &op.params {
        let value = input.get(&p.property).filter(|v| !v.is_null());
        match (p.location, value) {
            (Location::Path, Some(value)) => {
                let text = match value {
                    Value::Array(_) | Value::Object(_) => {
                        // simple style: each item encoded, the commas kept.
                        pieces(value, p.explode)
                            .iter()
                            .map(|s| encode(s))
                            .collect::<Vec<_>>()
                            .join(",")
                    }
                    scalar => encode(&scalar_text(scalar)),
                };
                // A `.` or `..` segment would move the request out of the operation's path
                // (URLs resolve dot segments, `%2e` included).
                if is_dot_segment(&text) {
                    return Err(ToolError::validation(format!(
                        "{label}: the path parameter {} is {text:?}, which would leave the \
                         operation's path; give a name, not a relative path",
                        p.name
                    )));
                }
                path = path.replace(&format!("{{{}}}", p.name), &text);
            }
            (Location::Path, None) => {
                return Err(ToolError::validation(format!(
                    "{label}: the path parameter {} is missing; give it as `{}`",
                    p.name, p.property
                )))
            }
            (Location::Query, Some(value)) => write_query(&mut query, p, value),
            _ => {}
        }
    }
    if let Auth::Query(name, key) = &shared.auth {
        // The key's own parameter is the host's to set, never the guest's (an exploded
        // object names its own parameters).
        let own = format!("{}=", encode(name));
        query = query
            .split('&')
            .filter(|pair| !pair.is_empty() && !pair.starts_with(&own))
            .collect::<Vec<_>>()
            .join("&");
        push_pair(&mut query, name, key.expose());
    }
    let mut url = format!("{}{}", shared.base, path);
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query);
    }
    let url = Url::parse(&url).map_err(|e| {
        ToolError::tool(format!(
            "{label}: the URL built from the input is not valid ({e})"
        ))
    })?;
    check_within_base(&shared.base, &url)
        .map_err(|why| ToolError::tool(format!("{label}: {why}")))?;
    Ok(url)
}

/// Whether a path segment, as encoded, is `.` or `..` (`%2e` counted as a dot).
fn is_dot_segment(encoded: &str) -> bool {
    let dots = encoded.to_ascii_lowercase().replace("%2e", ".");
    dots == "." || dots == ".."
}

/// A request goes to the base URL's origin, under its path: never elsewhere, whatever the
/// document's path templates or the input say (a credential goes with it).
pub(crate) fn check_within_base(base: &str, url: &Url) -> Result<(), String> {
    let base = Url::parse(base).map_err(|e| format!("the base URL is not valid ({e})"))?;
    let prefix = base.path().trim_end_matches('/');
    let path = url.path();
    let under = path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'));
    if url.origin() != base.origin() || !under {
        return Err(format!(
            "the request would go to {}{}, outside the API's base URL {}{}; execbox sends \
             requests under the base URL only",
            url.origin().ascii_serialization(),
            path,
            base.origin().ascii_serialization(),
            if prefix.is_empty() { "/" } else { prefix }
        ));
    }
    Ok(())
}

fn push_pair(query: &mut String, name: &str, value: &str) {
    if !query.is_empty() {
        query.push('&');
    }
    let _ = write!(query, "{}={}", encode(name), encode(value));
}

/// One query parameter, per its style and explode.
pub(crate) fn write_query(query: &mut String, p: &Param, value: &Value) {
    let delimiter = match p.style {
        Style::SpaceDelimited => "%20",
        Style::PipeDelimited => "|",
        _ => ",",
    };
    match value {
        Value::Array(items) => {
            if p.explode && p.style != Style::DeepObject {
                for item in items {
                    push_pair(query, &p.name, &scalar_text(item));
                }
            } else {
                let joined: Vec<String> = items.iter().map(|i| encode(&scalar_text(i))).collect();
                if !query.is_empty() {
                    query.push('&');
                }
                let _ = write!(query, "{}={}", encode(&p.name), joined.join(delimiter));
            }
        }
        Value::Object(map) => match (p.style, p.explode) {
            (Style::DeepObject, _) => {
                for (k, v) in map {
                    push_pair(query, &format!("{}[{k}]", p.name), &scalar_text(v));
                }
            }
            (_, true) => {
                for (k, v) in map {
                    push_pair(query, k, &scalar_text(v));
                }
            }
            (_, false) => {
                let joined: Vec<String> = map
                    .iter()
                    .flat_map(|(k, v)| [encode(k), encode(&scalar_text(v))])
                    .collect();
                if !query.is_empty() {
                    query.push('&');
                }
                let _ = write!(query, "{}={}", encode(&p.name), joined.join(delimiter));
            }
        },
        scalar => push_pair(query, &p.name, &scalar_text(scalar)),
    }
}

/// A scalar as text (`true`, `3`, `abc`); anything nested as JSON.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The pieces of a `simple` value: array items, or `k,v` (or `k=v` exploded) of an object.
fn pieces(value: &Value, explode: bool) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(scalar_text).collect(),
        Value::Object(map) if explode => map
            .iter()
            .map(|(k, v)| format!("{k}={}", scalar_text(v)))
            .collect(),
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| [k.clone(), scalar_text(v)])
            .collect(),
        scalar => vec![scalar_text(scalar)],
    }
}

/// A header value in `simple` style.
fn simple(value: &Value, explode: bool) -> String {
    pieces(value, explode).join(",")
}

fn send_error(e: &reqwest::Error, label: &str, base: &str) -> ToolError {
    ToolError::tool(format!(
        "{label}: {}",
        describe_send_error_at(e, &origin(base))
    ))
}

/// The answer made into the tool's result or error.
async fn answer(
    shared: &Shared,
    label: &str,
    response: reqwest::Response,
) -> Result<Value, ToolError> {
    let status = response.status();
    if status.is_redirection() {
        let target = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| response.url().join(l).ok())
            .map(|u| u.origin().ascii_serialization());
        return Err(match target {
            Some(target) => ToolError::tool(format!(
                "{label}: HTTP {}: the server redirected to another origin ({target}), which execbox \
                 does not follow (credentials stay with {}); set base_url to the API's own origin",
                status_text(status),
                origin(&shared.base)
            )),
            None => ToolError::tool(format!("{label}: HTTP {} without a usable Location header", status_text(status))),
        }
        .with_reason("http_status")
        .with_status(status.as_u16()));
    }
    if !status.is_success() {
        let retry_after = if matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after_ms)
        } else {
            None
        };
        // Read past the quoted KiB, so a secret the API echoes across the cut is whole when
        // it is redacted (the guest may choose where the cut falls).
        let body = read_bounded(response, (QUOTED_BODY_BYTES + REDACTION_MARGIN) as u64 + 1)
            .await
            .map(|(b, _)| b)
            .unwrap_or_default();
        let mut error = ToolError::tool(format!(
            "{label}: HTTP {}: {}",
            status_text(status),
            quote_body(
                shared
                    .redactor
                    .redact(&String::from_utf8_lossy(&body))
                    .as_bytes()
            )
        ))
        .with_reason("http_status")
        .with_status(status.as_u16());
        if let Some(ms) = retry_after {
            error = error.with_retry_after_ms(ms);
        }
        return Err(error);
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let too_large = |size: String| {
        ToolError::tool(format!(
            "{label}: the answer is {size}, more than the provider's max_response_bytes ({} bytes); \
             ask for less (a smaller page, a filter) or raise max_response_bytes",
            shared.max_response_bytes
        ))
    };
    if let Some(length) = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if length > shared.max_response_bytes {
            return Err(too_large(format!("{length} bytes")));
        }
    }
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let binary = !(is_json(&essence) || essence.starts_with("text/") || essence.is_empty());
    let (body, size) = if binary {
        count_bounded(response, shared.max_response_bytes).await
    } else {
        read_bounded(response, shared.max_response_bytes).await
    }
    .map_err(|e| ToolError::tool(format!("{label}: cannot read the answer: {e}")))?;
    if size > shared.max_response_bytes {
        return Err(too_large(format!(
            "over {} bytes",
            shared.max_response_bytes
        )));
    }
    let mut value = if body.is_empty() && (essence.is_empty() || is_json(&essence)) {
        Value::Null
    } else if binary {
        json!({"type": "binary", "mimeType": essence, "size": size})
    } else if is_json(&essence) {
        let text = String::from_utf8_lossy(&body);
        execbox_host::json::parse_json(&text).map_err(|e| {
            // Redacted whole, then cut: a cut first could keep a secret's start.
            let redacted = shared.redactor.redact(&text);
            let cut = redacted
                .char_indices()
                .nth(200)
                .map_or(redacted.as_str(), |(i, _)| &redacted[..i]);
            ToolError::tool(format!(
                "{label}: the answer says {essence} but is not valid JSON ({e}): {}",
                quote_body(cut.as_bytes())
            ))
        })?
    } else {
        Value::String(String::from_utf8_lossy(&body).into_owned())
    };
    shared.redactor.redact_value(&mut value);
    Ok(value)
}

/// Counts a body's bytes up to `max` without keeping them.
async fn count_bounded(
    mut response: reqwest::Response,
    max: u64,
) -> Result<(Vec<u8>, u64), String> {
    let mut size = 0u64;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| describe_send_error(&e))?
    {
        size += chunk.len() as u64;
        if size > max {
            return Ok((Vec::new(), size));
        }
    }
    Ok((Vec::new(), size))
}

/// `Retry-After` as milliseconds from now: delay-seconds, or an HTTP date (0 when past).
pub fn retry_after_ms(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1000));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(
        date.duration_since(SystemTime::now())
            .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
            .unwrap_or(0),
    )
}

/// The redirect policy: follow within the origin of the first request only, at most
/// [`MAX_REDIRECTS`] times; another origin's redirect is handed back as the answer.
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error("too many redirects");
        }
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{check_base_url, check_credentials_transport};

    fn param(style: Style, explode: bool) -> Param {
        Param {
            name: "c".into(),
            property: "c".into(),
            location: Location::Query,
            style,
            explode,
        }
    }

    fn query(style: Style, explode: bool, value: Value) -> String {
        let mut q = String::new();
        write_query(&mut q, &param(style, explode), &value);
        q
    }

    #[test]
    fn query_arrays_follow_style_and_explode() {
        let arr = json!(["blue", "black", "a b"]);
        assert_eq!(
            query(Style::Form, true, arr.clone()),
            "c=blue&c=black&c=a%20b"
        );
        assert_eq!(query(Style::Form, false, arr.clone()), "c=blue,black,a%20b");
        assert_eq!(
            query(Style::SpaceDelimited, false, arr.clone()),
            "c=blue%20black%20a%20b"
        );
        assert_eq!(
            query(Style::PipeDelimited, false, arr.clone()),
            "c=blue|black|a%20b"
        );
        assert_eq!(
            query(Style::PipeDelimited, true, arr),
            "c=blue&c=black&c=a%20b"
        );
        let obj = json!({"R": 100, "G": 200});
        assert_eq!(query(Style::Form, true, obj.clone()), "R=100&G=200");
        assert_eq!(query(Style::Form, false, obj.clone()), "c=R,100,G,200");
        assert_eq!(
            query(Style::DeepObject, true, obj),
            "c%5BR%5D=100&c%5BG%5D=200"
        );
        assert_eq!(query(Style::Form, true, json!(true)), "c=true");
        assert_eq!(query(Style::Form, true, json!("x&y=z")), "c=x%26y%3Dz");
    }

    #[test]
    fn path_values_are_percent_encoded() {
        assert_eq!(encode("a/b c?d#é"), "a%2Fb%20c%3Fd%23%C3%A9");
        assert_eq!(encode("safe-._~"), "safe-._~");
        assert_eq!(simple(&json!(["a", 1]), false), "a,1");
        assert_eq!(simple(&json!({"k": "v"}), true), "k=v");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after_ms("7"), Some(7000));
        assert_eq!(retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT"), Some(0));
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let ms = retry_after_ms(&later).unwrap();
        assert!((100_000..=120_000).contains(&ms), "{ms}");
        assert_eq!(retry_after_ms("soon"), None);
    }

    #[test]
    fn requests_stay_under_the_base_url() {
        let at = |url: &str| Url::parse(url).unwrap();
        let base = "https://api.example.com/v1";
        assert!(check_within_base(base, &at("https://api.example.com/v1/pets?x=1")).is_ok());
        assert!(check_within_base(base, &at("https://api.example.com/v1")).is_ok());
        for outside in [
            "https://api.example.com/v2/pets",
            "https://api.example.com/v1x/pets",
            "https://api.example.com.evil.com/v1/pets",
            "https://api.example.com:8443/v1/pets",
            "http://api.example.com/v1/pets",
        ] {
            let e = check_within_base(base, &at(outside)).unwrap_err();
            assert!(
                e.contains("outside the API's base URL https://api.example.com/v1"),
                "{e}"
            );
        }
        assert!(
            check_within_base("https://api.example.com", &at("https://api.example.com/x")).is_ok()
        );
        for dots in [".", "..", "%2e", "%2E%2e", ".%2E"] {
            assert!(is_dot_segment(dots), "{dots}");
        }
        for name in ["...", ".a", "a..", "%2e%2e%2e"] {
            assert!(!is_dot_segment(name), "{name}");
        }
    }

    #[test]
    fn bodies_are_quoted_on_one_line_and_cut() {
        assert_eq!(quote_body(b""), "(empty body)");
        assert_eq!(
            quote_body(b"{\"message\":\"Not Found\"}\n"),
            "{\"message\":\"Not Found\"}\\n"
        );
        let long = vec![b'x'; 5000];
        let quoted = quote_body(&long);
        assert_eq!(quoted.chars().count(), QUOTED_BODY_BYTES + 1);
    }

    #[test]
    fn base_urls_and_plain_http_credentials_are_checked() {
        assert!(check_base_url("https://api.github.com").is_ok());
        assert!(check_base_url("http://127.0.0.1:8080/v1").is_ok());
        assert!(check_base_url("ftp://x")
            .unwrap_err()
            .contains("http or https"));
        assert!(check_base_url("/v1").unwrap_err().contains("absolute"));
        assert!(check_base_url("https://u:p@x")
            .unwrap_err()
            .contains("under `auth`"));
        // A key in a URL's query is never shown.
        let e = check_base_url("https://api.example.com/v1?api_key=PLANTED").unwrap_err();
        assert!(
            !e.contains("PLANTED") && e.contains("https://api.example.com"),
            "{e}"
        );
        assert!(check_credentials_transport("http://localhost:1/").is_ok());
        assert!(check_credentials_transport("http://[::1]:1/").is_ok());
        assert!(check_credentials_transport("http://api.example.com")
            .unwrap_err()
            .contains("plain http"));
    }
}
