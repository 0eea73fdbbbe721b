//! Errors of the MCP SDK and its transports in plain words: what a model or a person reads
//! never carries a Rust type name (`rmcp::transport::worker::WorkerTransport<…>`).

use std::error::Error;

use super::content::one_line;

/// The most telling words of `error`: its deepest cause that says something once type names
/// are taken out (`tcp connect error: Connection refused (os error 111)`), else its own text
/// so cleaned; at most `max` characters.
pub fn plain_error(error: &(dyn Error + 'static), max: usize) -> String {
    let mut best = without_type_names(&error.to_string());
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = without_type_names(&e.to_string());
        if !text.is_empty() {
            best = text;
        }
        cause = e.source();
    }
    if best.is_empty() {
        best = "an error without a message".into();
    }
    one_line(&best, max)
}

/// `text` without words that are Rust paths (`a::b`, `[a::b<C>]`), and without what such a
/// word leaves behind (`Transport [] error:`).
pub fn without_type_names(text: &str) -> String {
    let kept: Vec<&str> = text
        .split_whitespace()
        .filter(|word| !word.contains("::"))
        .collect();
    let joined = kept.join(" ");
    joined
        .replace("Transport error: ", "")
        .replace("Transport error:", "")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::Client>>] error: Client error, when send initialize request")
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("tcp connect error: Connection refused (os error 111)")
        }
    }
    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }
    impl Error for Inner {}

    #[test]
    fn type_names_never_show() {
        assert_eq!(
            plain_error(&Outer(Inner), 200),
            "tcp connect error: Connection refused (os error 111)"
        );
        let text = without_type_names(&Outer(Inner).to_string());
        assert_eq!(
            text,
            "Send message error Client error, when send initialize request"
        );
        assert!(!text.contains("::"));
    }
}
