//! What an MCP server or an authorization server sends, made safe to act on or to show.
//!
//! - [`check_endpoints`]: the authorization server's endpoints must be `https://` URLs
//!   (`http://` only when the MCP server itself is reached over plain HTTP): the browser is
//!   never opened on another kind of URL (`file:`, or a scheme the desktop hands to some
//!   program), and a code, a token or a client secret never travels in clear from the sign-in
//!   of an `https://` server.
//! - [`shown`]: text a server wrote (an `error_description`, a registration's answer, a
//!   client ID) on one line, bounded, with control characters escaped, so it cannot move the
//!   cursor, recolour or retitle the terminal `execbox mcp login` prints to, nor break the
//!   layout of what a model reads.

use rmcp::transport::auth::AuthorizationMetadata;

/// Checks the endpoints of `metadata`, found for the MCP server at `server_url`.
pub(crate) fn check_endpoints(
    server_url: &str,
    metadata: &AuthorizationMetadata,
) -> Result<(), String> {
    check_endpoint(
        server_url,
        "authorization_endpoint",
        &metadata.authorization_endpoint,
    )?;
    check_endpoint(server_url, "token_endpoint", &metadata.token_endpoint)?;
    if let Some(registration) = &metadata.registration_endpoint {
        check_endpoint(server_url, "registration_endpoint", registration)?;
    }
    Ok(())
}

/// Checks that `metadata` is of the authorization server `pinned` (the `oauth` field's
/// `issuer`), when one is.
pub(crate) fn check_issuer(
    pinned: Option<&str>,
    metadata: &AuthorizationMetadata,
) -> Result<(), String> {
    let Some(pinned) = pinned else { return Ok(()) };
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    match metadata.issuer.as_deref() {
        Some(found) if same(found, pinned) => Ok(()),
        found => {
            Err(format!(
            "the MCP server names the authorization server {}, not {pinned:?} (the \"issuer\" of \
             its \"oauth\" field): execbox signs in with no other. If the server moved, correct \
             \"issuer\"",
            shown(&format!("{:?}", found.unwrap_or("(without an issuer)")), 200)
        ))
        }
    }
}

/// Checks one endpoint (`field` of the metadata) of the MCP server at `server_url`.
pub(crate) fn check_endpoint(server_url: &str, field: &str, value: &str) -> Result<(), String> {
    let plain_allowed = url::Url::parse(server_url).is_ok_and(|u| u.scheme() == "http");
    let allowed = url::Url::parse(value).is_ok_and(|u| {
        let scheme = u.scheme() == "https" || (plain_allowed && u.scheme() == "http");
        scheme && u.host_str().is_some_and(|h| !h.is_empty())
    });
    if allowed {
        return Ok(());
    }
    Err(format!(
        "the authorization server's {field} is {}, not an https:// URL{}: execbox opens and \
         sends nothing there; ask the server's operator to correct its metadata",
        shown(&format!("{value:?}"), 200),
        if plain_allowed { " or http:// URL" } else { "" }
    ))
}

/// `text` on one line, at most `max` characters, with control and direction-changing
/// characters escaped (`\u{1b}`).
pub(crate) fn shown(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in crate::content::one_line(text, max).chars() {
        let hidden = c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if hidden {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(authorization: &str, token: &str) -> AuthorizationMetadata {
        let mut m = AuthorizationMetadata::default();
        m.authorization_endpoint = authorization.into();
        m.token_endpoint = token.into();
        m
    }

    #[test]
    fn endpoints_that_are_not_https_are_refused_before_anything_opens_them() {
        let https = "https://mcp.example/mcp";
        let good = metadata("https://as.example/authorize", "https://as.example/token");
        check_endpoints(https, &good).unwrap();
        for (authorization, token) in [
            // The browser would hand these to whatever program claims the scheme.
            ("file:///etc/passwd", "https://as.example/token"),
            ("ms-msdt:/id PCWDiagnostic", "https://as.example/token"),
            ("javascript:alert(1)", "https://as.example/token"),
            // Codes, tokens and secrets in clear from an https:// server's sign-in.
            ("http://as.example/authorize", "https://as.example/token"),
            ("https://as.example/authorize", "http://as.example/token"),
            ("https://as.example/authorize", "not a url"),
        ] {
            let error = check_endpoints(https, &metadata(authorization, token)).unwrap_err();
            assert!(error.contains("not an https:// URL"), "{error}");
        }
        let mut registration = good.clone();
        registration.registration_endpoint = Some("http://as.example/register".into());
        assert!(check_endpoints(https, &registration)
            .unwrap_err()
            .starts_with("the authorization server's registration_endpoint"));
        // A server the user reaches over plain HTTP (a local one) may name plain endpoints,
        // but never another scheme.
        let plain = "http://127.0.0.1:8080/mcp";
        check_endpoints(
            plain,
            &metadata(
                "http://127.0.0.1:9000/authorize",
                "http://127.0.0.1:9000/token",
            ),
        )
        .unwrap();
        assert!(
            check_endpoints(plain, &metadata("file:///x", "http://127.0.0.1:9000/token")).is_err()
        );
    }

    #[test]
    fn shown_text_cannot_drive_the_terminal() {
        let text = "bad\u{1b}]0;owned\u{7}\u{1b}[2J\r\nline\u{202e}txt";
        let out = shown(text, 100);
        assert!(!out.chars().any(|c| c.is_control()), "{out:?}");
        assert!(!out.contains('\u{202e}'));
        assert!(out.contains("\\u{1b}"), "{out}");
        assert_eq!(shown(&"x".repeat(1000), 10).chars().count(), 11);
    }

    #[test]
    fn a_pinned_issuer_is_the_only_one_signed_in_with() {
        let metadata = |issuer: Option<&str>| {
            let mut metadata = AuthorizationMetadata::default();
            metadata.issuer = issuer.map(str::to_owned);
            metadata
        };
        let pinned = Some("https://login.example.com/");
        assert!(check_issuer(pinned, &metadata(Some("https://login.example.com"))).is_ok());
        assert!(check_issuer(None, &metadata(Some("https://evil.example"))).is_ok());
        let error = check_issuer(pinned, &metadata(Some("https://evil.example"))).unwrap_err();
        assert!(
            error.contains("\"https://evil.example\"") && error.contains("issuer"),
            "{error}"
        );
        assert!(check_issuer(pinned, &metadata(None)).is_err());
    }
}
