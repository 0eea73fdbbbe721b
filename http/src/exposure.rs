//! The exposure rule of every server: never listen beyond loopback without a bearer token.
//!
//! One function ([`check_exposure`]) and one message, used by `execbox serve`, `execbox mcp
//! --http` and the runner's `--listen` before they bind: whoever can reach a port served
//! without a token can run code with the server's tools.

use std::net::SocketAddr;

/// A server about to listen beyond loopback without a bearer token; see [`check_exposure`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to listen on {} without a bearer token: it is not a loopback address, so anyone \
     who can reach it could run code with this server's tools; {how}, or listen on 127.0.0.1",
    list(.addrs)
)]
pub struct Exposed {
    /// The addresses asked for that are not loopback (`0.0.0.0` and `::` are not).
    pub addrs: Vec<SocketAddr>,
    /// How this server is given a token, e.g. `give --token-file FILE (or EXECBOX_TOKEN)`.
    pub how: &'static str,
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The exposure rule: a server may listen on `addrs` without a bearer token (`authenticated`
/// false) only when every one of them is a loopback address; otherwise [`Exposed`], whose
/// message tells how to give this server a token (`how`, e.g. `give --token-file FILE (or
/// EXECBOX_TOKEN)`). An unspecified address (`0.0.0.0`, `::`) is every address, and an
/// IPv4-mapped one (`::ffff:127.0.0.1`) is not taken for loopback; an empty list is exposed
/// to nothing.
///
/// ```
/// use execbox_http::check_exposure;
/// let local = "127.0.0.1:8080".parse().unwrap();
/// let any = "0.0.0.0:8080".parse().unwrap();
/// assert!(check_exposure(&[local], false, "give a token").is_ok());
/// assert!(check_exposure(&[any], true, "give a token").is_ok());
/// let refused = check_exposure(&[local, any], false, "give a token").unwrap_err();
/// assert_eq!(refused.addrs, vec![any]);
/// ```
pub fn check_exposure(
    addrs: &[SocketAddr],
    authenticated: bool,
    how: &'static str,
) -> Result<(), Exposed> {
    let exposed: Vec<SocketAddr> = addrs
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .copied()
        .collect();
    if authenticated || exposed.is_empty() {
        return Ok(());
    }
    Err(Exposed {
        addrs: exposed,
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_loopback_may_go_without_a_token() {
        for loopback in ["127.0.0.1:7000", "127.8.9.10:7000", "[::1]:7000"] {
            assert!(
                check_exposure(&[addr(loopback)], false, "x").is_ok(),
                "{loopback}"
            );
        }
        for exposed in [
            "0.0.0.0:7000",
            "[::]:7000",
            "10.1.2.3:7000",
            "[::ffff:127.0.0.1]:7000",
        ] {
            let refused = check_exposure(&[addr(exposed)], false, "x").unwrap_err();
            assert_eq!(refused.addrs, vec![addr(exposed)]);
            assert!(
                check_exposure(&[addr(exposed)], true, "x").is_ok(),
                "{exposed}"
            );
        }
    }

    #[test]
    fn the_message_names_every_exposed_address_and_how_to_give_a_token() {
        let refused = check_exposure(
            &[addr("127.0.0.1:1"), addr("0.0.0.0:1"), addr("[::]:1")],
            false,
            "give --token-file FILE",
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.starts_with("refusing to listen on 0.0.0.0:1, [::]:1 without a bearer token"),
            "{refused}"
        );
        assert!(
            refused.ends_with("give --token-file FILE, or listen on 127.0.0.1"),
            "{refused}"
        );
    }
}
