//! Who a request may come from: `Origin` (a browser page) and `Host` (the name it was sent
//! to), each matched against an allowlist.

/// An allowlist entry that cannot be understood; the message says how to write it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?}: {reason}")]
pub struct AllowlistError {
    /// The entry as given.
    pub entry: String,
    /// What is wrong, with an example of the right form.
    pub reason: String,
}

/// A port as an entry allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Port {
    Is(u16),
    Any,
}

/// Browser origins allowed to call a server; a request without `Origin` (every client that is
/// not a browser page) is not concerned.
///
/// An entry is `scheme://host[:port]`: `https://app.example.com` allows that origin on port
/// 443 only, `http://localhost:3000` port 3000 only, `http://localhost:*` any port (only when
/// written so), and `null` the opaque origin of sandboxed pages and files. Scheme and host
/// compare case-insensitively; an `Origin` without a port has its scheme's default port.
///
/// ```
/// use execbox_http::Origins;
///
/// let origins = Origins::parse(["https://app.example.com", "http://localhost:*"]).unwrap();
/// assert!(origins.allows("https://app.example.com"));
/// assert!(origins.allows("https://APP.example.com:443"));
/// assert!(!origins.allows("https://app.example.com:8443"));
/// assert!(!origins.allows("http://app.example.com"));
/// assert!(origins.allows("http://localhost:5173"));
/// assert!(Origins::parse(["app.example.com"]).is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    entries: Vec<Origin>,
    null: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Port,
}

impl Origins {
    /// No origin allowed: every request carrying `Origin` is refused.
    pub fn none() -> Origins {
        Origins::default()
    }

    /// Parses the entries; the first one that is not `scheme://host[:port]` (or `null`) is
    /// the error.
    pub fn parse(
        entries: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Origins, AllowlistError> {
        let mut origins = Origins::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.eq_ignore_ascii_case("null") {
                origins.null = true;
                continue;
            }
            let origin = parse_origin(entry, true).map_err(|reason| AllowlistError {
                entry: entry.to_owned(),
                reason,
            })?;
            origins.entries.push(origin);
        }
        Ok(origins)
    }

    /// Whether a request whose `Origin` header is `value` is allowed.
    pub fn allows(&self, value: &str) -> bool {
        let value = value.trim();
        if value.eq_ignore_ascii_case("null") {
            return self.null;
        }
        let Ok(origin) = parse_origin(value, false) else {
            return false;
        };
        self.entries.iter().any(|allowed| {
            allowed.scheme == origin.scheme
                && allowed.host == origin.host
                && (allowed.port == Port::Any || allowed.port == origin.port)
        })
    }

    /// Whether no origin is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && !self.null
    }
}

/// `scheme://host[:port]`, lowercased, the port defaulted by scheme; `*` as a port only in
/// an allowlist entry.
fn parse_origin(text: &str, entry: bool) -> Result<Origin, String> {
    let example = "write it as scheme://host[:port], e.g. https://app.example.com";
    let (scheme, rest) = text
        .split_once("://")
        .ok_or_else(|| format!("an origin needs a scheme; {example}"))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Err(format!("{scheme:?} is not a scheme; {example}"));
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) || rest.is_empty() {
        return Err(format!("an origin has no path, query or user; {example}"));
    }
    let (host, port) = split_host_port(rest)?;
    let port = match port {
        Some("*") if entry => Port::Any,
        Some(p) => Port::Is(
            p.parse()
                .map_err(|_| format!("{p:?} is not a port; {example}"))?,
        ),
        None => match scheme.as_str() {
            "http" | "ws" => Port::Is(80),
            "https" | "wss" => Port::Is(443),
            _ => return Err(format!("scheme {scheme} has no default port; give one")),
        },
    };
    Ok(Origin { scheme, host, port })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` → the host (lowercased, without brackets) and the
/// port text.
fn split_host_port(text: &str) -> Result<(String, Option<&str>), String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{text:?}: an IPv6 address needs its closing `]`"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("{text:?}: expected `:port` after `]`"))?,
            ),
        };
        return Ok((host.to_ascii_lowercase(), port));
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Ok((text.to_ascii_lowercase(), None)),
        Some((host, port)) => Ok((host.to_ascii_lowercase(), Some(port))),
        None => Ok((text.to_ascii_lowercase(), None)),
    }
}

/// The `Host` values a server answers to: loopback names always (`localhost`, `127.0.0.1`,
/// `::1`, any port), the address it listens on when that is a specific one, and the entries
/// given: `name` for any port, `name:port` for that port.
///
/// ```
/// use execbox_http::Hosts;
///
/// let hosts = Hosts::parse(["api.example.com", "internal:8080"]).unwrap();
/// assert!(hosts.allows("localhost:1234") && hosts.allows("[::1]:80"));
/// assert!(hosts.allows("API.example.com:443"));
/// assert!(hosts.allows("internal:8080") && !hosts.allows("internal:8081"));
/// assert!(!hosts.allows("evil.example"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hosts {
    entries: Vec<(String, Port)>,
}

impl Hosts {
    /// Parses the entries (`name`, `name:port`, `[v6]:port`).
    pub fn parse(
        entries: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Hosts, AllowlistError> {
        let mut hosts = Hosts::default();
        for entry in entries {
            hosts.add(entry.as_ref())?;
        }
        Ok(hosts)
    }

    /// Adds one entry.
    pub fn add(&mut self, entry: &str) -> Result<(), AllowlistError> {
        let error = |reason: String| AllowlistError {
            entry: entry.to_owned(),
            reason,
        };
        let (host, port) = split_host_port(entry).map_err(error)?;
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(error(
                "write a host name, or name:port, e.g. api.example.com or api.example.com:8080"
                    .into(),
            ));
        }
        let port = match port {
            None | Some("*") => Port::Any,
            Some(p) => Port::Is(
                p.parse()
                    .map_err(|_| error(format!("{p:?} is not a port")))?,
            ),
        };
        self.entries.push((host, port));
        Ok(())
    }

    /// Also answers to the address listened on, when it is a specific (not unspecified)
    /// address.
    pub fn with_bound(mut self, addr: std::net::SocketAddr) -> Hosts {
        if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
            self.entries
                .push((addr.ip().to_string(), Port::Is(addr.port())));
        }
        self
    }

    /// Whether a request whose `Host` header is `value` is for this server.
    pub fn allows(&self, value: &str) -> bool {
        let Ok((host, port)) = split_host_port(value) else {
            return false;
        };
        // A host name, an IPv4 address, or an IPv6 one (the only kind in brackets); a port of
        // digits that fits. Nothing else is a Host, loopback or not.
        let bracketed = value.trim().starts_with('[');
        if host.is_empty()
            || host.contains(['@', '/', '\\', ' ', '?', '#'])
            || bracketed != host.contains(':')
        {
            return false;
        }
        let port = match port {
            None => 80,
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u16>() {
                Ok(p) => p,
                Err(_) => return false,
            },
            Some(_) => return false,
        };
        if matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1") {
            return true;
        }
        self.entries
            .iter()
            .any(|(h, p)| *h == host && (*p == Port::Any || *p == Port::Is(port)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_scheme_host_and_port_exactly() {
        let o = Origins::parse(["https://app.example.com", "http://dev.example:3000"]).unwrap();
        assert!(o.allows("https://app.example.com"));
        assert!(o.allows("https://app.example.com:443"));
        assert!(!o.allows("https://app.example.com:444"), "another port");
        assert!(!o.allows("http://app.example.com"), "another scheme");
        assert!(!o.allows("https://app.example.com.evil"), "another host");
        assert!(o.allows("http://dev.example:3000"));
        assert!(
            !o.allows("http://dev.example"),
            "the default port is not 3000"
        );
        assert!(!o.allows("null"));
        assert!(!o.allows("garbage"));
        assert!(!Origins::none().allows("https://app.example.com"));
    }

    #[test]
    fn a_wildcard_port_only_when_written_and_null_only_when_listed() {
        let o = Origins::parse(["http://localhost:*", "null"]).unwrap();
        assert!(o.allows("http://localhost:5173") && o.allows("http://localhost"));
        assert!(!o.allows("https://localhost:5173"));
        assert!(o.allows("null"));
        // `*` is an entry's word, never a request's.
        assert!(!o.allows("http://localhost:*"));
    }

    #[test]
    fn bad_entries_say_how_to_write_them() {
        let e = Origins::parse(["app.example.com"]).unwrap_err();
        assert!(e.to_string().contains("needs a scheme"), "{e}");
        assert!(Origins::parse(["https://a.example/path"]).is_err());
        assert!(Origins::parse(["https://a.example:http"]).is_err());
        assert!(Origins::parse(["foo://a.example"]).is_err());
        assert!(Hosts::parse(["a.example:x"]).is_err());
    }

    #[test]
    fn hosts_allow_loopback_the_bound_address_and_entries() {
        let hosts = Hosts::parse(["api.example.com", "internal:8080"])
            .unwrap()
            .with_bound("10.1.2.3:9000".parse().unwrap());
        assert!(hosts.allows("localhost") && hosts.allows("127.0.0.1:9") && hosts.allows("[::1]"));
        assert!(hosts.allows("10.1.2.3:9000") && !hosts.allows("10.1.2.3:9001"));
        assert!(hosts.allows("api.example.com:1"));
        assert!(!hosts.allows("internal") && hosts.allows("internal:8080"));
        assert!(!hosts.allows("evil.example:8080"));
        assert!(!hosts.allows("localhost.evil.example"));
        // Malformed values with a loopback part are not loopback.
        for bad in [
            "localhost:80@evil",
            "127.0.0.1:80/evil",
            "[localhost]",
            "localhost:abc",
            "localhost:99999",
            "",
        ] {
            assert!(!hosts.allows(bad), "{bad:?}");
        }
    }
}
