//! The HTTP client of streamable HTTP upstreams: rustls (ring) with the webpki roots, and the
//! leniency the reference clients have with servers in the wild.
//!
//! [`Tolerant`] accepts whatever a server answers to a message that expects no answer (a
//! notification, or our reply to its request): the official TypeScript client ignores an
//! HTTP 500 or a JSON body answering `notifications/initialized`, and servers built on its
//! stateless examples send both; the MCP SDK for Rust would close the connection instead.
//! Failures that mean something still count: the server cannot be reached, or the session is
//! gone (404). A sign-in (401) or more scope (403) asked for in answer to a notification is
//! left to the next request, which meets it too and says what to do.
//!
//! [`SignInClient`] carries the MCP SDK's OAuth requests with the SDK's own address policy,
//! and says why one failed (the SDK says only "Request failed").

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// The HTTP client: rustls with the ring provider and the webpki roots.
pub(crate) fn reqwest_client() -> Result<reqwest::Client, String> {
    tls_builder()?
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A client builder with rustls (ring) and the webpki roots.
pub(crate) fn tls_builder() -> Result<reqwest::ClientBuilder, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls))
}

/// Where a request may go, by the class of the address it connects to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddressClass {
    Public,
    Loopback,
    Private,
    /// Link-local (cloud instance metadata among them), unspecified, broadcast, multicast,
    /// benchmarking, `0.0.0.0/8`, Teredo and the like: never.
    Blocked,
}

impl AddressClass {
    fn of(ip: std::net::IpAddr) -> AddressClass {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped().or_else(|| embedded_ipv4(v6)) {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            },
            v4 => v4,
        };
        match ip {
            IpAddr::V4(v4) => {
                let [a, b, ..] = v4.octets();
                if v4.is_loopback() {
                    AddressClass::Loopback
                } else if v4.is_private() || (a == 100 && (64..=127).contains(&b)) {
                    AddressClass::Private
                } else if v4.is_link_local()
                    || v4.is_broadcast()
                    || v4.is_unspecified()
                    || v4.is_multicast()
                    || a == 0
                    || a >= 240
                    || (a == 198 && matches!(b, 18 | 19))
                {
                    AddressClass::Blocked
                } else {
                    AddressClass::Public
                }
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                if v6.is_loopback() {
                    AddressClass::Loopback
                } else if (s[0] & 0xfe00) == 0xfc00 {
                    AddressClass::Private
                } else if v6.is_unspecified()
                    || v6.is_multicast()
                    || (s[0] & 0xffc0) == 0xfe80
                    || s[..2] == [0x2001, 0]
                    || s[..3] == [0x64, 0xff9b, 1]
                {
                    AddressClass::Blocked
                } else {
                    AddressClass::Public
                }
            }
        }
    }
}

/// The IPv4 address inside an IPv4-compatible, NAT64 or 6to4 IPv6 address.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let low = std::net::Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s[..6] {
        [0, 0, 0, 0, 0, 0] if !v6.is_loopback() && !v6.is_unspecified() => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0] => Some(low),
        [0x2002, ..] => Some(std::net::Ipv4Addr::from(
            (u32::from(s[1]) << 16) | u32::from(s[2]),
        )),
        _ => None,
    }
}

/// The address policy of [`Guarded`]: public addresses, and loopback or private ones only
/// when the server's own URL names one (an IP literal of that class, or `localhost`), as the
/// MCP SDK's OAuth client decides.
#[derive(Clone, Debug)]
struct AddressPolicy {
    also: Vec<AddressClass>,
    /// The hosts of the proxies in `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`: a proxied
    /// request resolves only its proxy's name (the proxy resolves the target), as the MCP
    /// SDK's client has it too.
    proxies: Vec<String>,
}

impl AddressPolicy {
    fn for_base(base: &url::Url) -> AddressPolicy {
        let also = match base.host() {
            Some(url::Host::Ipv4(v4)) => vec![AddressClass::of(v4.into())],
            Some(url::Host::Ipv6(v6)) => vec![AddressClass::of(v6.into())],
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                if d == "localhost" || d.ends_with(".localhost") {
                    vec![AddressClass::Loopback]
                } else {
                    Vec::new()
                }
            }
            None => Vec::new(),
        };
        let proxies = [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .filter_map(|proxy| {
            let proxy = if proxy.contains("://") {
                proxy
            } else {
                format!("http://{proxy}")
            };
            url::Url::parse(&proxy)
                .ok()?
                .host_str()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
        })
        .collect();
        AddressPolicy { also, proxies }
    }

    fn allows_ip(&self, ip: std::net::IpAddr) -> bool {
        match AddressClass::of(ip) {
            AddressClass::Public => true,
            AddressClass::Blocked => false,
            class => self.also.contains(&class),
        }
    }

    /// Whether `url` may be requested: an IP literal is checked here (no name is resolved
    /// for it); a name is checked by the resolver.
    fn allows_url(&self, url: &url::Url) -> bool {
        match url.host() {
            Some(url::Host::Ipv4(v4)) => self.allows_ip(v4.into()),
            Some(url::Host::Ipv6(v6)) => self.allows_ip(v6.into()),
            Some(url::Host::Domain(_)) => true,
            None => false,
        }
    }
}

impl reqwest::dns::Resolve for AddressPolicy {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let lookup = host.clone();
            let found: Vec<std::net::SocketAddr> = tokio::task::spawn_blocking(move || {
                std::net::ToSocketAddrs::to_socket_addrs(&(lookup.as_str(), 0)).map(|a| a.collect())
            })
            .await??;
            if policy
                .proxies
                .contains(&host.trim_end_matches('.').to_ascii_lowercase())
            {
                return Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs);
            }
            let kept: Vec<std::net::SocketAddr> = found
                .into_iter()
                .filter(|a| policy.allows_ip(a.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "{host} resolves only to addresses execbox does not send sign-in requests to \
                     (loopback, private, link-local or reserved ones)"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An HTTP client for sign-in requests execbox makes itself, to places a remote party named
/// (a token endpoint from an authorization server's metadata): the address policy of the MCP
/// SDK's own OAuth client (no link-local address such as cloud instance metadata; loopback
/// and private addresses only for a server that is at one itself), no redirects (a token
/// endpoint answers, it does not send the request on), 30 s per request.
pub(crate) struct Guarded {
    /// The client; request only URLs [`Guarded::check`] allowed.
    pub client: reqwest::Client,
    policy: AddressPolicy,
}

impl Guarded {
    /// The client for the sign-in of the MCP server at `base`.
    pub fn new(base: &str) -> Result<Guarded, String> {
        let base = url::Url::parse(base).map_err(|e| format!("{base} is not a URL: {e}"))?;
        let policy = AddressPolicy::for_base(&base);
        let client = tls_builder()?
            .dns_resolver(Arc::new(policy.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Guarded { client, policy })
    }

    /// Refuses `url` when its host is an address the policy does not allow.
    pub fn check(&self, url: &str) -> Result<(), String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("{url} is not a URL: {e}"))?;
        if self.policy.allows_url(&parsed) {
            Ok(())
        } else {
            Err(format!(
                "{} is a loopback, private, link-local or reserved address: execbox does not send \
                 sign-in requests there for this server",
                parsed.host_str().unwrap_or_default()
            ))
        }
    }
}

/// The longest body [`SignInClient`] reads, as the MCP SDK's own OAuth client.
const MAX_SIGN_IN_BODY: usize = 1024 * 1024;

/// How many redirects [`SignInClient`] follows when a request lets it.
const MAX_SIGN_IN_REDIRECTS: usize = 10;

/// How long one request of [`SignInClient`] may take, body included.
const SIGN_IN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The HTTP client of the MCP SDK's OAuth requests (discovery, registration, token requests):
/// the address policy of the SDK's own client ([`AddressPolicy`], checked on the request and
/// on every redirect it follows), the request's redirect policy (follow at most 10, or none),
/// 30 s per request and bodies of at most 1 MiB. It remembers its last failure in plain words
/// naming the endpoint ([`SignInClient::failure_since`]): the SDK reports a failed token
/// request only as "Request failed".
pub(crate) struct SignInClient {
    follow: reqwest::Client,
    stop: reqwest::Client,
    policy: AddressPolicy,
    timeout: std::time::Duration,
    /// How many requests failed so far, and the words of the last failure.
    failures: std::sync::Mutex<(u64, Option<String>)>,
}

impl SignInClient {
    /// The client for the sign-in of the MCP server at `base`.
    pub fn new(base: &str) -> Result<Arc<SignInClient>, String> {
        SignInClient::with_timeout(base, SIGN_IN_TIMEOUT)
    }

    fn with_timeout(base: &str, timeout: std::time::Duration) -> Result<Arc<SignInClient>, String> {
        let parsed = url::Url::parse(base).map_err(|e| format!("{base} is not a URL: {e}"))?;
        let policy = AddressPolicy::for_base(&parsed);
        let checked = policy.clone();
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            if !checked.allows_url(attempt.url()) {
                let refused = refused_address(attempt.url());
                attempt.error(refused)
            } else if attempt.previous().len() > MAX_SIGN_IN_REDIRECTS {
                attempt.error(format!("more than {MAX_SIGN_IN_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        let build = |redirect: reqwest::redirect::Policy| {
            tls_builder()?
                .dns_resolver(Arc::new(policy.clone()))
                .redirect(redirect)
                .timeout(timeout)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        };
        Ok(Arc::new(SignInClient {
            follow: build(follow)?,
            stop: build(reqwest::redirect::Policy::none())?,
            policy,
            timeout,
            failures: std::sync::Mutex::new((0, None)),
        }))
    }

    /// A mark to pass to [`SignInClient::failure_since`].
    pub fn mark(&self) -> u64 {
        self.failures.lock().map(|f| f.0).unwrap_or_default()
    }

    /// Why the last request that failed after `mark` failed, in plain words.
    pub fn failure_since(&self, mark: u64) -> Option<String> {
        let failures = self.failures.lock().ok()?;
        (failures.0 > mark).then(|| failures.1.clone()).flatten()
    }

    fn remember(&self, failure: &str) {
        tracing::debug!("a sign-in request failed: {failure}");
        if let Ok(mut failures) = self.failures.lock() {
            failures.0 += 1;
            failures.1 = Some(failure.to_owned());
        }
    }

    /// Sends `request`, remembering why when it fails.
    async fn run(
        &self,
        request: oauth2::HttpRequest,
        redirects: rmcp::transport::auth::OAuthHttpRedirectPolicy,
    ) -> Result<oauth2::HttpResponse, String> {
        let answer = self.send(request, redirects).await;
        if let Err(failure) = &answer {
            self.remember(failure);
        }
        answer
    }

    async fn send(
        &self,
        request: oauth2::HttpRequest,
        redirects: rmcp::transport::auth::OAuthHttpRedirectPolicy,
    ) -> Result<oauth2::HttpResponse, String> {
        use futures_util::StreamExt as _;
        use rmcp::transport::auth::OAuthHttpRedirectPolicy;
        let client = match redirects {
            OAuthHttpRedirectPolicy::Stop => &self.stop,
            _ => &self.follow,
        };
        let endpoint = format!("{} {}", endpoint_kind(&request), shown_url(request.uri()));
        let request = reqwest::Request::try_from(request)
            .map_err(|e| format!("cannot send a request to {endpoint}: {e}"))?;
        if !self.policy.allows_url(request.url()) {
            return Err(format!(
                "cannot send a request to {endpoint}: {}",
                refused_address(request.url())
            ));
        }
        let exchange = async {
            let response = client.execute(request).await?;
            let mut answer = oauth2::http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let mut body = Vec::new();
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk?;
                if chunk.len() > MAX_SIGN_IN_BODY - body.len() {
                    return Ok(Err(format!(
                        "{endpoint} answered with more than {} KiB",
                        MAX_SIGN_IN_BODY / 1024
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, reqwest::Error>(
                answer
                    .body(body)
                    .map_err(|e| format!("{endpoint} answered oddly: {e}")),
            )
        };
        let stalled = || {
            format!(
                "cannot reach {endpoint}: it did not answer within {}s",
                self.timeout.as_secs()
            )
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(stalled()),
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) if e.is_timeout() => Err(stalled()),
            Ok(Err(e)) => Err(format!(
                "cannot reach {endpoint}: {}",
                transport_failure(e.without_url())
            )),
        }
    }
}

impl rmcp::transport::auth::OAuthHttpClient for SignInClient {
    fn execute(
        &self,
        request: rmcp::transport::auth::OAuthHttpRequest,
    ) -> rmcp::transport::auth::OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            self.run(request.request, request.redirect_policy)
                .await
                .map_err(Into::into)
        })
    }
}

/// What a sign-in request goes to: a form is posted to a token endpoint, JSON to a
/// registration endpoint; the rest reads metadata.
fn endpoint_kind(request: &oauth2::HttpRequest) -> &'static str {
    let form = request
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    match (request.method().as_str(), form) {
        ("POST", true) => "the token endpoint",
        ("POST", false) => "the registration endpoint",
        _ => "the authorization server's metadata at",
    }
}

/// `uri` without its query (which may carry a code) and credentials: scheme, host, port and
/// path.
fn shown_url(uri: &oauth2::http::Uri) -> String {
    let path = uri.path();
    match uri.host() {
        Some(host) => {
            let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            let scheme = uri.scheme_str().unwrap_or("https");
            let shown = format!("{scheme}://{host}{port}{path}");
            crate::oauth::untrusted::shown(&shown, 300)
        }
        None => crate::oauth::untrusted::shown(path, 300),
    }
}

/// Why a request that reached no answer failed, in plain words: `connection refused` rather
/// than reqwest's "error sending request". Without the URL: its query may carry a code.
fn transport_failure(error: reqwest::Error) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            let said = match io.kind() {
                ErrorKind::ConnectionRefused => Some("connection refused"),
                ErrorKind::ConnectionReset => Some("the connection was reset"),
                ErrorKind::ConnectionAborted => Some("the connection was aborted"),
                ErrorKind::TimedOut => Some("the connection timed out"),
                ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => {
                    Some("the host is unreachable")
                }
                _ => None,
            };
            if let Some(said) = said {
                return said.to_owned();
            }
        }
        cause = e.source();
    }
    // Other causes (a name that does not resolve, a refused address, TLS) name themselves.
    crate::plain::plain_error(&error, 300)
}

/// Why a request to `url` is not sent.
fn refused_address(url: &url::Url) -> String {
    format!(
        "{} is a loopback, private, link-local or reserved address: execbox does not send \
         sign-in requests there for this server",
        url.host_str().unwrap_or_default()
    )
}

/// A redirect policy that follows at most 10 redirects, and only within the origin (scheme,
/// host, port) the request started from: a server cannot send execbox's request, with the
/// headers configured for it, to another host.
pub(crate) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let origin = |u: &url::Url| {
            (
                u.scheme().to_owned(),
                u.host_str().map(str::to_ascii_lowercase),
                u.port_or_known_default(),
            )
        };
        let first = attempt.previous().first().map(origin);
        if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else if first.as_ref() != Some(&origin(attempt.url())) {
            attempt.stop()
        } else {
            attempt.follow()
        }
    })
}

/// Makes the process's TLS provider ring's, for the HTTP clients the MCP SDK builds itself
/// (its OAuth discovery and token requests).
pub(crate) fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// An HTTP client that tolerates odd answers to messages that expect none (see the module).
#[derive(Clone)]
pub(crate) struct Tolerant<C>(pub C);

/// Whether `message` expects no answer from the server.
fn expects_no_answer(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        ClientJsonRpcMessage::Notification(_)
            | ClientJsonRpcMessage::Response(_)
            | ClientJsonRpcMessage::Error(_)
    )
}

/// The answer to a message that expects none, whatever the server sent, unless it means
/// something: no connection, a sign-in or scope wanted, the session gone.
fn tolerate<E: std::error::Error + Send + Sync + 'static>(
    method: &str,
    answer: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
    match answer {
        Ok(StreamableHttpPostResponse::Accepted) => Ok(StreamableHttpPostResponse::Accepted),
        Ok(_) => {
            tracing::debug!(
                method,
                "the server answered a message that expects no answer; ignored"
            );
            Ok(StreamableHttpPostResponse::Accepted)
        }
        // A 401 or 403 is tolerated too: the SDK would end the connection on it with no word of
        // why, while the next request meets the same refusal and says to sign in.
        Err(
            e @ (StreamableHttpError::Client(_)
            | StreamableHttpError::Io(_)
            | StreamableHttpError::SessionExpired),
        ) => Err(e),
        Err(e) => {
            tracing::debug!(method, "the server failed a message that expects no answer ({e}); ignored, as the reference clients do");
            Ok(StreamableHttpPostResponse::Accepted)
        }
    }
}

fn method_of(message: &ClientJsonRpcMessage) -> String {
    match message {
        ClientJsonRpcMessage::Notification(n) => serde_json::to_value(&n.notification)
            .ok()
            .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "a notification".into()),
        ClientJsonRpcMessage::Response(_) => "a response".into(),
        ClientJsonRpcMessage::Error(_) => "an error response".into(),
        _ => "a request".into(),
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Tolerant<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let lenient = expects_no_answer(&message).then(|| method_of(&message));
        let answer = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        match lenient {
            Some(method) => tolerate(&method, answer),
            None => answer,
        }
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let lenient = expects_no_answer(&message).then(|| method_of(&message));
        let answer = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        match lenient {
            Some(method) => tolerate(&method, answer),
            None => answer,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_classed_as_the_mcp_sdk_classes_them() {
        let class = |ip: &str| AddressClass::of(ip.parse().unwrap());
        for ip in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "0.0.0.0",
            "fe80::1",
            "224.0.0.1",
            "198.18.0.1",
        ] {
            assert_eq!(class(ip), AddressClass::Blocked, "{ip}");
        }
        assert_eq!(class("127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("::1"), AddressClass::Loopback);
        assert_eq!(class("10.1.2.3"), AddressClass::Private);
        assert_eq!(class("fd00::1"), AddressClass::Private);
        assert_eq!(class("100.64.0.1"), AddressClass::Private);
        assert_eq!(class("93.184.216.34"), AddressClass::Public);
        let policy = |base: &str| AddressPolicy::for_base(&url::Url::parse(base).unwrap());
        let public = policy("https://mcp.example.com/mcp");
        assert!(!public.allows_ip("127.0.0.1".parse().unwrap()));
        assert!(!public.allows_ip("10.0.0.1".parse().unwrap()));
        assert!(public.allows_ip("93.184.216.34".parse().unwrap()));
        assert!(policy("http://localhost:3000/mcp").allows_ip("127.0.0.1".parse().unwrap()));
        let private = policy("http://10.0.0.5/mcp");
        assert!(private.allows_ip("10.9.9.9".parse().unwrap()));
        assert!(!private.allows_ip("127.0.0.1".parse().unwrap()));
        assert!(!private.allows_ip("169.254.169.254".parse().unwrap()));
    }

    /// A form posted to `url`, as the MCP SDK posts a token request.
    fn token_request(url: &str) -> oauth2::HttpRequest {
        oauth2::http::Request::builder()
            .method("POST")
            .uri(url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(b"grant_type=refresh_token&refresh_token=SECRET-REFRESH".to_vec())
            .unwrap()
    }

    #[tokio::test]
    async fn a_token_endpoint_that_refuses_or_stalls_is_named_with_why() {
        use rmcp::transport::auth::OAuthHttpRedirectPolicy::Stop;
        // Refused: a port nothing listens on any more.
        let closed = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let base = format!("http://127.0.0.1:{port}/mcp");
        let client = SignInClient::with_timeout(&base, std::time::Duration::from_secs(1)).unwrap();
        let mark = client.mark();
        assert_eq!(client.failure_since(mark), None);
        let token = format!("http://127.0.0.1:{port}/token?code=SECRET-CODE");
        let refused = client.run(token_request(&token), Stop).await.unwrap_err();
        assert_eq!(
            refused,
            format!(
                "cannot reach the token endpoint http://127.0.0.1:{port}/token: connection refused"
            )
        );
        assert_eq!(client.failure_since(mark), Some(refused));
        let mark = client.mark();
        assert_eq!(client.failure_since(mark), None);

        // Stalled: accepted, never answered.
        let stalled = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = stalled.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((connection, _)) = stalled.accept().await {
                open.push(connection);
            }
        });
        let token = format!("http://127.0.0.1:{port}/token");
        let started = std::time::Instant::now();
        let failure = client.run(token_request(&token), Stop).await.unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            failure,
            format!(
                "cannot reach the token endpoint http://127.0.0.1:{port}/token: it did not \
                 answer within 1s"
            )
        );
        assert_eq!(client.failure_since(mark), Some(failure.clone()));
        assert!(!failure.contains("SECRET"));
        held.abort();
    }

    #[tokio::test]
    async fn a_sign_in_request_is_not_redirected_to_a_link_local_address() {
        use rmcp::transport::auth::OAuthHttpRedirectPolicy::{Follow, Stop};
        let app = axum::Router::new().route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::FOUND,
                    [(
                        axum::http::header::LOCATION,
                        "http://169.254.169.254/latest/meta-data/",
                    )],
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = SignInClient::new(&format!("http://127.0.0.1:{port}/mcp")).unwrap();
        let metadata = || {
            oauth2::http::Request::builder()
                .uri(format!(
                    "http://127.0.0.1:{port}/.well-known/oauth-authorization-server"
                ))
                .body(Vec::new())
                .unwrap()
        };
        let refused = client.run(metadata(), Follow).await.unwrap_err();
        assert!(
            refused.contains("169.254.169.254 is a loopback, private, link-local or reserved"),
            "{refused}"
        );
        // Not followed at all when the request says so: the redirect itself is the answer.
        let answer = client.run(metadata(), Stop).await.unwrap();
        assert_eq!(answer.status(), 302);
        // Nor sent there directly.
        let direct = oauth2::http::Request::builder()
            .uri("http://169.254.169.254/latest/meta-data/")
            .body(Vec::new())
            .unwrap();
        let refused = client.run(direct, Follow).await.unwrap_err();
        assert!(refused.contains("link-local"), "{refused}");
    }

    #[tokio::test]
    async fn redirects_are_followed_within_their_origin_only() {
        let app = axum::Router::new()
            .route(
                "/same",
                axum::routing::post(|| async {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, "/landed")],
                    )
                }),
            )
            .route("/landed", axum::routing::post(|| async { "landed" }));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = app.route(
            "/other",
            axum::routing::post(move || async move {
                (
                    axum::http::StatusCode::TEMPORARY_REDIRECT,
                    [(
                        axum::http::header::LOCATION,
                        format!("http://localhost:{port}/landed"),
                    )],
                )
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = tls_builder()
            .unwrap()
            .redirect(same_origin_redirects())
            .build()
            .unwrap();
        let same = client
            .post(format!("http://127.0.0.1:{port}/same"))
            .send()
            .await
            .unwrap();
        assert_eq!(same.status(), 200);
        // Another host (a name for the same address, here): not followed.
        let other = client
            .post(format!("http://127.0.0.1:{port}/other"))
            .send()
            .await
            .unwrap();
        assert_eq!(other.status(), 307);
    }
}
