//! Signing in to HTTP upstreams with OAuth 2.1, as the MCP authorization specification says:
//! protected resource metadata (RFC 9728), authorization server metadata (RFC 8414, with the
//! OpenID and 2025-03-26 fallbacks), a pre-registered client, a client ID metadata document
//! or dynamic registration (RFC 7591), PKCE S256, `state`, resource indicators (RFC 8707),
//! scope selection and step-up; or the client credentials grant for headless deployments.
//! The discovery, registration and token requests are the MCP SDK's (`rmcp`'s auth).
//!
//! - [`config`]: the `oauth` field of `mcp.json`;
//! - [`store`]: the token files in the user's state folder;
//! - [`login`]: `execbox mcp login`, with the browser and a loopback redirect listener;
//! - [`session`]: the tokens on every request of a running `execbox mcp`;
//! - [`jwt`]: `private_key_jwt` client assertions;
//! - [`untrusted`]: what servers send, checked before it is opened or sent to, and escaped
//!   before it is shown.

pub mod config;
pub(crate) mod jwt;
pub mod login;
pub(crate) mod session;
pub mod store;
pub(crate) mod untrusted;

pub use config::{Grant, OAuthConfig, Secret, SigningAlgorithm};
pub use login::{sign_in, sign_out, SignInOptions, SignedIn};
pub use store::token_dir;
