//! [`PgUrl`]: a `postgres://` URL, parsed once, that never prints its password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use tokio_postgres::config::{Host, SslMode};

use super::PgError;

/// A PostgreSQL connection URL (`postgres://` or `postgresql://`, with libpq's query
/// parameters such as `sslmode`, plus `sslrootcert=FILE` for a private CA).
///
/// `Display` and `Debug` show it rebuilt from what was parsed (user, hosts and ports, database,
/// `sslmode` and `sslrootcert`), never from the text given: the password, wherever it was
/// written and whatever it holds (`/`, `?`, `#`, percent-escapes), is shown as `***`, so it can
/// go in logs and in errors an operator reads. Answers to HTTP callers and to models name no
/// database at all (see `PgError::plain`).
#[derive(Clone)]
pub struct PgUrl {
    config: std::sync::Arc<tokio_postgres::Config>,
    shown: String,
    root_cert: Option<PathBuf>,
}

/// What a URL is expected to look like, for its errors.
const EXPECTED: &str = "expected postgres://USER:PASSWORD@HOST:PORT/DATABASE, with any `@`, `/`, `?`, `#` or `%` in the user name or password percent-encoded (%40, %2F, %3F, %23, %25)";

impl PgUrl {
    /// Whether `text` is meant as a PostgreSQL URL (it starts with `postgres://` or
    /// `postgresql://`), so that a caller can tell it from a file path before parsing it.
    pub fn is_url(text: &str) -> bool {
        scheme(text).is_some()
    }

    /// Parses `text` as the driver reads it (the user name and password run up to the first
    /// `@`); the error says what is wrong without repeating the password.
    pub fn parse(text: &str) -> Result<PgUrl, PgError> {
        let Some(scheme) = scheme(text) else {
            return Err(PgError::Url {
                url: "(not a postgres:// URL)".into(),
                reason: EXPECTED.into(),
            });
        };
        let rest = &text[scheme.len() + 3..];
        let after_credentials = rest.split_once('@').map_or(rest, |(_, after)| after);
        let authority = after_credentials
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        if authority.contains('@') {
            // The driver would take what follows the first `@` for the host: a password with
            // an `@` of its own would be cut in two, and its end shown as a host name.
            return Err(PgError::Url {
                url: sketch(scheme, rest),
                reason: format!("it has more than one `@` before its host; {EXPECTED}"),
            });
        }
        // `sslrootcert` is libpq's, not tokio-postgres's: take it out before parsing. The
        // query starts at the first `?` after the credentials (a password may hold a `?`).
        let credentials_len = text.len() - after_credentials.len();
        let (base, query) = match after_credentials.split_once('?') {
            Some((before, query)) => (&text[..credentials_len + before.len()], query),
            None => (text, ""),
        };
        let mut root_cert = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslrootcert", path)) => root_cert = Some(PathBuf::from(path)),
                _ => kept.push(pair),
            }
        }
        let rebuilt = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config = tokio_postgres::Config::from_str(&rebuilt).map_err(|e| {
            // The driver's words name the option at fault, never its value.
            let why = match std::error::Error::source(&e) {
                Some(source) => format!("{e}: {source}"),
                None => e.to_string(),
            };
            PgError::Url {
                url: sketch(scheme, rest),
                reason: format!("{why}; {EXPECTED}"),
            }
        })?;
        if config.get_hosts().is_empty() {
            return Err(PgError::Url {
                url: sketch(scheme, rest),
                reason: format!("it names no host; {EXPECTED}"),
            });
        }
        if config.get_application_name().is_none() {
            config.application_name("execbox");
        }
        let shown = shown(scheme, &config, root_cert.as_ref());
        Ok(PgUrl {
            config: std::sync::Arc::new(config),
            shown,
            root_cert,
        })
    }

    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// What identifies the database and its credentials (the whole parsed configuration, the
    /// password included: never shown, only compared).
    pub(crate) fn config_key(&self) -> String {
        format!(
            "{:?}|{:?}|{:?}",
            self.config,
            self.config.get_password(),
            self.root_cert
        )
    }

    pub(crate) fn root_cert(&self) -> Option<&PathBuf> {
        self.root_cert.as_ref()
    }
}

impl FromStr for PgUrl {
    type Err = PgError;
    fn from_str(s: &str) -> Result<PgUrl, PgError> {
        PgUrl::parse(s)
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// The scheme of `text` (`postgres` or `postgresql`, in lower case) when it is a URL.
fn scheme(text: &str) -> Option<&'static str> {
    let lower = text.get(..13).unwrap_or(text).to_ascii_lowercase();
    if lower.starts_with("postgresql://") {
        Some("postgresql")
    } else if lower.starts_with("postgres://") {
        Some("postgres")
    } else {
        None
    }
}

/// The URL as shown: rebuilt from the parsed configuration, the password as `***`.
fn shown(scheme: &str, config: &tokio_postgres::Config, root_cert: Option<&PathBuf>) -> String {
    let mut out = format!("{scheme}://");
    let password = config.get_password().is_some();
    if let Some(user) = config.get_user() {
        out.push_str(&encode(user));
    }
    if password {
        out.push_str(":***");
    }
    if config.get_user().is_some() || password {
        out.push('@');
    }
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
                Host::Tcp(name) => encode(name),
                Host::Unix(path) => encode(&path.to_string_lossy()),
            };
            match ports.get(i).or(ports.first()) {
                Some(port) => format!("{name}:{port}"),
                None => name,
            }
        })
        .collect();
    out.push_str(&hosts.join(","));
    if let Some(db) = config.get_dbname() {
        out.push('/');
        out.push_str(&encode(db));
    }
    let mut params = Vec::new();
    match config.get_ssl_mode() {
        SslMode::Disable => params.push("sslmode=disable".to_string()),
        SslMode::Require => params.push("sslmode=require".to_string()),
        _ => {}
    }
    if let Some(path) = root_cert {
        params.push(format!(
            "sslrootcert={}",
            encode(&path.to_string_lossy()).replace("%2F", "/")
        ));
    }
    if !params.is_empty() {
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// What can be shown of a URL that did not parse: the user name as the driver would read it
/// (up to the first `:` before the first `@`), `***` for a password, and the host names and
/// database only where they are plain names; anything else is `…`.
fn sketch(scheme: &str, rest: &str) -> String {
    let mut out = format!("{scheme}://");
    let after = match rest.split_once('@') {
        Some((credentials, after)) => {
            match credentials.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{}:***@", plain(user))),
                None => out.push_str(&format!("{}@", plain(credentials))),
            }
            after
        }
        None => rest,
    };
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let hosts: Vec<String> = after[..end]
        .split(',')
        .map(|chunk| plain(chunk.split(':').next().unwrap_or_default()))
        .collect();
    out.push_str(&hosts.join(","));
    if let Some(path) = after[end..].strip_prefix('/') {
        out.push('/');
        out.push_str(&plain(path.split('?').next().unwrap_or_default()));
    }
    out
}

/// `text` when it is a plain name (letters, digits, `.`, `-`, `_`), else `…`.
fn plain(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        text.to_string()
    } else {
        "…".to_string()
    }
}

/// `text` percent-encoded but for unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a password can be written, and what the driver reads of it: none of it
    /// shows, in the URL or in an error.
    #[test]
    fn a_password_never_shows_whatever_it_holds() {
        let cases: &[(&str, &[u8], &str)] = &[
            (
                "postgres://execbox:s3cret@db.internal:5432/execbox?sslmode=require",
                b"s3cret",
                "postgres://execbox:***@db.internal:5432/execbox?sslmode=require",
            ),
            // base64: `/` and `+`; the driver reads the password up to the first `@`.
            (
                "postgres://execbox:Zq9/Xk+Wv==@db:5432/execbox",
                b"Zq9/Xk+Wv==",
                "postgres://execbox:***@db:5432/execbox",
            ),
            (
                "postgres://execbox:Zq9?Xk=Wv&Yj@db/execbox?sslmode=disable",
                b"Zq9?Xk=Wv&Yj",
                "postgres://execbox:***@db:5432/execbox?sslmode=disable",
            ),
            (
                "postgresql://execbox:Zq9#Xk/Wv?Yj@db/execbox",
                b"Zq9#Xk/Wv?Yj",
                "postgresql://execbox:***@db:5432/execbox",
            ),
            (
                "postgres://execbox:Zq9%2FXk%40Wv%3F@db/execbox",
                b"Zq9/Xk@Wv?",
                "postgres://execbox:***@db:5432/execbox",
            ),
            (
                "postgresql://u@h/db?password=Zq9/Xk?Wv&sslmode=disable",
                b"Zq9/Xk?Wv",
                "postgresql://u:***@h:5432/db?sslmode=disable",
            ),
        ];
        for (text, password, expected) in cases {
            let url = PgUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.config().get_password(), Some(*password), "{text}");
            assert_eq!(url.to_string(), *expected, "{text}");
            assert_eq!(format!("{url:?}"), *expected, "{text}");
            let secret = String::from_utf8_lossy(password);
            for part in secret.split(['/', '?', '#', '@', '&', '=', '+']) {
                if part.len() > 1 {
                    assert!(!url.to_string().contains(part), "{url} shows {part}");
                }
            }
        }
    }

    #[test]
    fn an_unusable_url_is_refused_without_its_password() {
        for (text, shown) in [
            ("postgres://u:s3cret@h:notaport/db", "postgres://u:***@h/db"),
            // An `@` in the password, not encoded: the driver would take `cret@h` for the
            // host and show it in its errors.
            ("postgres://u:s3@cret@h/db", "postgres://u:***@…/db"),
            ("postgres://u:s3/cr?et@h:x/db", "postgres://u:***@h/db"),
            ("postgres://u:s3cret/db", "postgres://u/db"),
            ("postgres://u:s3cret@/db", "postgres://u:***@/db"),
        ] {
            let e = PgUrl::parse(text).unwrap_err().to_string();
            for secret in ["s3cret", "s3", "cret", "cr?et"] {
                assert!(!e.contains(secret), "{text}: {e}");
            }
            assert!(
                e.starts_with(&format!("database URL {shown}: ")),
                "{text}: {e}"
            );
            assert!(e.contains("percent-encoded"), "{e}");
        }
        let e = PgUrl::parse("mysql://u:s3cret@h/db")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn hosts_ports_and_sockets_are_shown_as_parsed() {
        let url = PgUrl::parse("postgres://u:p@a:1,b:2,[::1]:3/db").unwrap();
        assert_eq!(url.to_string(), "postgres://u:***@a:1,b:2,[::1]:3/db");
        let url = PgUrl::parse("postgres://u@/db?host=%2Fvar%2Frun%2Fpostgresql").unwrap();
        assert_eq!(url.to_string(), "postgres://u@%2Fvar%2Frun%2Fpostgresql/db");
    }

    #[test]
    fn only_postgres_schemes_are_urls() {
        assert!(PgUrl::is_url("postgres://h/db"));
        assert!(PgUrl::is_url("PostgreSQL://h/db"));
        assert!(!PgUrl::is_url("state.db"));
        assert!(!PgUrl::is_url("/var/lib/execbox/postgres://x"));
        assert!(!PgUrl::is_url("ñ"));
    }

    #[test]
    fn sslrootcert_is_kept_for_tls_and_not_given_to_the_driver() {
        let url =
            PgUrl::parse("postgres://u@h/db?sslmode=require&sslrootcert=/etc/ca.pem").unwrap();
        assert_eq!(url.root_cert(), Some(&PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            url.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(url.config().get_application_name(), Some("execbox"));
        assert_eq!(
            url.to_string(),
            "postgres://u@h:5432/db?sslmode=require&sslrootcert=/etc/ca.pem"
        );
    }

    #[test]
    fn two_passwords_are_two_pools() {
        let a = PgUrl::parse("postgres://u:one@h/db").unwrap();
        let b = PgUrl::parse("postgres://u:two@h/db").unwrap();
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(a.config_key(), b.config_key());
    }
}
