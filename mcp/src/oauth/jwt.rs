//! `private_key_jwt` client authentication (RFC 7523) for the client credentials grant: a
//! short-lived assertion signed with the client's key (ES256 or RS256, by ring), exchanged at
//! the token endpoint. The request is ours, not the MCP SDK's, so it goes through
//! [`Guarded`]: the SDK's address policy, no redirects (a 307 would re-send the assertion
//! elsewhere), 30 s.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SecureRandom as _;
use serde_json::{json, Value};

use super::config::SigningAlgorithm;
use super::untrusted::shown;
use crate::http_client::Guarded;

/// How long an assertion is valid.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(300);

/// The token endpoint's answer may not be larger than this.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

/// A client's signing key.
pub(crate) struct SigningKey {
    algorithm: SigningAlgorithm,
    der: Vec<u8>,
}

impl SigningKey {
    /// Reads a PKCS#8 PEM key (`-----BEGIN PRIVATE KEY-----`) for `algorithm`, checking it signs.
    pub fn from_pem(pem: &str, algorithm: SigningAlgorithm) -> Result<SigningKey, String> {
        let body: String = pem
            .lines()
            .map(str::trim)
            .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
            .skip(1)
            .take_while(|l| !l.starts_with("-----END"))
            .collect();
        if body.is_empty() {
            return Err(
                "oauth.private_key: expected a PKCS#8 PEM key (-----BEGIN PRIVATE KEY-----); \
                 convert another with `openssl pkcs8 -topk8 -nocrypt -in KEY`"
                    .into(),
            );
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| format!("oauth.private_key: the PEM body is not base64 ({e})"))?;
        let key = SigningKey { algorithm, der };
        key.sign(b"check")
            .map_err(|e| format!("oauth.private_key: {e}"))?;
        Ok(key)
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        let rng = ring::rand::SystemRandom::new();
        match self.algorithm {
            SigningAlgorithm::Es256 => {
                let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
                    &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &self.der,
                    &rng,
                )
                .map_err(|e| format!("not a P-256 key for ES256 ({e})"))?;
                pair.sign(&rng, message)
                    .map(|s| s.as_ref().to_vec())
                    .map_err(|e| format!("cannot sign ({e})"))
            }
            SigningAlgorithm::Rs256 => {
                let pair = ring::signature::RsaKeyPair::from_pkcs8(&self.der)
                    .map_err(|e| format!("not an RSA key for RS256 ({e})"))?;
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(
                    &ring::signature::RSA_PKCS1_SHA256,
                    &rng,
                    message,
                    &mut signature,
                )
                .map_err(|e| format!("cannot sign ({e})"))?;
                Ok(signature)
            }
        }
    }

    /// A client assertion of `client_id` for `audience` (the authorization server's issuer).
    pub fn assertion(&self, client_id: &str, audience: &str) -> Result<String, String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut jti = [0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut jti)
            .map_err(|_| "no randomness for the assertion's id".to_string())?;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let header = json!({"alg": self.algorithm.name(), "typ": "JWT"});
        let claims = json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME.as_secs(),
            "jti": jti.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        });
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self.sign(input.as_bytes())?;
        Ok(format!("{input}.{}", b64(&signature)))
    }
}

/// Asks `token_endpoint` for an access token with a client assertion; the answer's JSON.
pub(crate) async fn exchange(
    client: &Guarded,
    token_endpoint: &str,
    assertion: &str,
    scopes: &[String],
    resource: &str,
) -> Result<Value, String> {
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        (
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
        ),
        ("client_assertion", assertion.to_owned()),
        ("resource", resource.to_owned()),
    ];
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    client.check(token_endpoint)?;
    let response = client
        .client
        .post(token_endpoint)
        .header(reqwest::header::ACCEPT, "application/json")
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| {
            format!(
                "the token endpoint {token_endpoint} cannot be reached: {}",
                shown(&crate::plain::plain_error(&e, 300), 300)
            )
        })?;
    let status = response.status();
    let mut body = Vec::new();
    let mut response = response;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the token endpoint's answer: {e}"))?
    {
        if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
            return Err(format!(
                "the token endpoint's answer is larger than {MAX_TOKEN_RESPONSE_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        let error = value.get("error").and_then(Value::as_str).unwrap_or("");
        let description = value
            .get("error_description")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(format!(
            "the token endpoint refused the client's credentials (HTTP {}{}{})",
            status.as_u16(),
            if error.is_empty() {
                String::new()
            } else {
                format!(", {}", shown(error, 100))
            },
            if description.is_empty() {
                String::new()
            } else {
                format!(": {}", shown(description, 200))
            }
        ));
    }
    if value.get("access_token").and_then(Value::as_str).is_none() {
        return Err("the token endpoint's answer has no access_token".into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(der: &[u8]) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n")
    }

    #[test]
    fn an_es256_assertion_verifies_with_the_public_key() {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        let key = SigningKey::from_pem(&pem(pkcs8.as_ref()), SigningAlgorithm::Es256).unwrap();
        let jwt = key.assertion("svc", "https://auth.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |s: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .unwrap()
        };
        let claims: Value = serde_json::from_slice(&decode(parts[1])).unwrap();
        assert_eq!(claims["iss"], "svc");
        assert_eq!(claims["sub"], "svc");
        assert_eq!(claims["aud"], "https://auth.example");
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .unwrap();
        use ring::signature::KeyPair as _;
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            pair.public_key().as_ref(),
        );
        let signed = format!("{}.{}", parts[0], parts[1]);
        public.verify(signed.as_bytes(), &decode(parts[2])).unwrap();
    }

    /// A token endpoint on 127.0.0.1 that redirects to `/elsewhere`; the number of requests
    /// `/elsewhere` got.
    async fn redirecting_token_endpoint() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>)
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(|| async {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, "/elsewhere")],
                    )
                }),
            )
            .route(
                "/elsewhere",
                axum::routing::post(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { axum::Json(json!({"access_token": "x", "token_type": "Bearer"})) }
                }),
            );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://127.0.0.1:{port}"), hits)
    }

    #[tokio::test]
    async fn the_assertion_goes_to_the_token_endpoint_only_never_through_a_redirect() {
        // Before: our own reqwest client followed a 307 and re-sent the assertion there.
        let (base, hits) = redirecting_token_endpoint().await;
        let client = Guarded::new(&format!("{base}/mcp")).unwrap();
        let error = exchange(&client, &format!("{base}/token"), "a.b.c", &[], "r")
            .await
            .unwrap_err();
        assert!(error.contains("HTTP 307"), "{error}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_token_endpoint_at_an_internal_address_is_never_requested() {
        // Before: metadata naming cloud instance metadata or a loopback service made execbox
        // post there; the MCP SDK's own requests refuse such addresses.
        let (base, _) = redirecting_token_endpoint().await;
        let public = Guarded::new("https://mcp.example.com/mcp").unwrap();
        for endpoint in [
            "http://169.254.169.254/latest/api/token".to_owned(),
            "http://[::ffff:169.254.169.254]/token".to_owned(),
            "http://10.0.0.8/token".to_owned(),
            format!("{base}/token"),
        ] {
            let error = exchange(&public, &endpoint, "a.b.c", &[], "r")
                .await
                .unwrap_err();
            assert!(
                error.contains("does not send sign-in requests"),
                "{endpoint}: {error}"
            );
        }
        // A name is checked where it resolves.
        let port = base.rsplit(':').next().unwrap();
        let error = exchange(
            &public,
            &format!("http://localhost:{port}/token"),
            "a.b.c",
            &[],
            "r",
        )
        .await
        .unwrap_err();
        assert!(error.contains("cannot be reached"), "{error}");
        // Link-local stays refused even for a server on loopback.
        let local = Guarded::new(&format!("{base}/mcp")).unwrap();
        assert!(local.check("http://169.254.169.254/").is_err());
        local.check(&format!("{base}/token")).unwrap();
    }

    #[test]
    fn a_wrong_key_is_refused_saying_what_is_expected() {
        let error = SigningKey::from_pem("not a key", SigningAlgorithm::Es256)
            .err()
            .unwrap();
        assert!(error.contains("BEGIN PRIVATE KEY"), "{error}");
        let error = SigningKey::from_pem(&pem(b"garbage"), SigningAlgorithm::Es256)
            .err()
            .unwrap();
        assert!(error.contains("not a P-256 key"), "{error}");
    }
}
