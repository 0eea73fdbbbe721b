//! Bearer tokens: reading `Authorization`, and comparing secrets in constant time.

use subtle::ConstantTimeEq as _;

/// The token of an `Authorization: Bearer TOKEN` value; the scheme is matched
/// case-insensitively (RFC 9110), surrounding spaces are ignored.
///
/// ```
/// assert_eq!(execbox_http::bearer("Bearer abc"), Some("abc"));
/// assert_eq!(execbox_http::bearer("bEaReR  abc "), Some("abc"));
/// assert_eq!(execbox_http::bearer("Basic abc"), None);
/// ```
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether `offered` is `secret`, in time that depends on neither's bytes nor length: both
/// are hashed with a key drawn at start-up (SipHash), the digests compared in constant time,
/// and only equal digests (the right secret, or a 2^-64 collision) go on to the byte
/// comparison.
pub fn same_secret(offered: &str, secret: &str) -> bool {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(std::hash::RandomState::new);
    let digests: bool = key
        .hash_one(offered.as_bytes())
        .ct_eq(&key.hash_one(secret.as_bytes()))
        .into();
    digests && offered.as_bytes() == secret.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_whatever_their_length() {
        assert!(same_secret("s3cret", "s3cret"));
        assert!(!same_secret("s3creT", "s3cret"));
        assert!(!same_secret("s3cre", "s3cret"));
        assert!(!same_secret("s3crets", "s3cret"));
        assert!(!same_secret("", "s3cret"));
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_an_empty_token_is_none() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER abc"), Some("abc"));
        assert_eq!(bearer("bearer"), None);
        assert_eq!(bearer("Bearer    "), None);
        assert_eq!(bearer("Token abc"), None);
    }
}
