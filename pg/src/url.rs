//! [`PgUrl`]: a `postgres://` URL, parsed once, that never prints its password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use super::PgError;

/// A PostgreSQL connection URL (`postgres://` or `postgresql://`, with libpq's query
/// parameters such as `sslmode`, plus `sslrootcert=FILE` for a private CA).
///
/// `Display` and `Debug` show it with the password replaced by `***`, so it can go in logs and
/// error messages.
#[derive(Clone)]
pub struct PgUrl {
    config: std::sync::Arc<tokio_postgres::Config>,
    shown: String,
    root_cert: Option<PathBuf>,
}

impl PgUrl {
    /// Whether `text` is meant as a PostgreSQL URL (it starts with `postgres://` or
    /// `postgresql://`), so that a caller can tell it from a file path before parsing it.
    pub fn is_url(text: &str) -> bool {
        let lower = text.get(..13).unwrap_or(text).to_ascii_lowercase();
        lower.starts_with("postgres://") || lower.starts_with("postgresql://")
    }

    /// Parses `text`; the error says what is wrong without repeating the password.
    pub fn parse(text: &str) -> Result<PgUrl, PgError> {
        let shown = redact(text);
        if !PgUrl::is_url(text) {
            return Err(PgError::Url {
                url: shown,
                reason: "expected postgres://USER:PASSWORD@HOST:PORT/DATABASE".into(),
            });
        }
        // `sslrootcert` is libpq's, not tokio-postgres's: take it out before parsing.
        let (base, query) = match text.split_once('?') {
            Some((base, query)) => (base, query),
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
        let mut config = tokio_postgres::Config::from_str(&rebuilt).map_err(|e| PgError::Url {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        if config.get_hosts().is_empty() {
            return Err(PgError::Url {
                url: shown,
                reason: "it names no host".into(),
            });
        }
        if config.get_application_name().is_none() {
            config.application_name("execbox");
        }
        Ok(PgUrl {
            config: std::sync::Arc::new(config),
            shown,
            root_cert,
        })
    }

    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// What identifies the database and its credentials (the whole parsed configuration).
    pub(crate) fn config_key(&self) -> String {
        format!("{:?}|{:?}", self.config, self.root_cert)
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

/// `text` with the password of its user info (and any `password=` parameter) as `***`.
fn redact(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                let start = scheme_end + 3 + colon + 1;
                let end = scheme_end + 3 + at;
                out.replace_range(start..end, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let url =
            PgUrl::parse("postgres://execbox:s3cret@db.internal:5432/execbox?sslmode=require")
                .unwrap();
        assert_eq!(
            url.to_string(),
            "postgres://execbox:***@db.internal:5432/execbox?sslmode=require"
        );
        assert_eq!(format!("{url:?}"), url.to_string());
        let url = PgUrl::parse("postgresql://u@h/db?password=s3cret&sslmode=disable").unwrap();
        assert!(!url.to_string().contains("s3cret"), "{url}");
        let e = PgUrl::parse("postgres://u:s3cret@h:notaport/db").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(
            e.to_string().contains("postgres://u:***@h:notaport/db"),
            "{e}"
        );
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
    }
}
