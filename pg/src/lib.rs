//! PostgreSQL for execbox's shared state: a URL that hides its password, a bounded pool on a
//! runtime of its own, versioned migrations, and a LISTEN connection that says when it lost
//! notifications.
//!
//! Every store that can live in PostgreSQL (the capabilities' executions, the policy's rate
//! limits, observed results and audit) reaches the database through one [`Pg`]:
//! - its connections and their I/O run on the `Pg`'s own small runtime, so a caller on any
//!   runtime, on a blocking thread or on a plain thread can use it ([`Pg::run`] from async
//!   code, [`Pg::block`] from sync code), and dropping a caller's runtime never strands a
//!   connection;
//! - the pool is bounded (`max_size` connections) and every wait is bounded (a connection in
//!   5 s, a statement in `statement_timeout`), so a database that is down gives an error in
//!   seconds, never a hang; a connection that broke is replaced on its next use, so the
//!   process recovers by itself when the database comes back;
//! - errors name the database by its URL with the password hidden, and say what to check.

mod error;
mod listen;
mod migrate;
mod pool;
mod url;

pub use error::PgError;
pub use listen::{Listener, Notice};
pub use migrate::Migrations;
pub use pool::{Pg, PoolOptions};
pub use tokio_postgres::{types, Error as DriverError, GenericClient, Row, Transaction};
pub use url::PgUrl;

#[cfg(feature = "testing")]
pub mod testing;

/// The connection type [`Pg::run`] lends (a pooled `tokio_postgres::Client`).
pub type Client = deadpool_postgres::Object;
