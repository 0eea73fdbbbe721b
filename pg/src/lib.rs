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
//! - the pool is bounded (`max_size` connections) and every wait is bounded on this side of
//!   the wire (a connection in 5 s, then the call's statements in [`DEFAULT_CALL_TIMEOUT`],
//!   5 s; TCP keepalives and `TCP_USER_TIMEOUT` on every socket), so a database that is down,
//!   stalled (`SIGSTOP`) or cut off gives an error in seconds, never a hang: the server's own
//!   `statement_timeout` is no bound when the server is what stalled. A connection that ran
//!   out of time is closed, and one that broke is replaced on its next use, so the process
//!   recovers by itself when the database comes back;
//! - errors name the database by its URL rebuilt from its parsed parts, the password as
//!   `***`, and say what to check; [`PgError::plain`] says what went wrong without naming the
//!   database, for answers to HTTP callers and models.

mod error;
mod listen;
mod migrate;
mod pool;
mod url;

pub use error::PgError;
pub use listen::{Listener, Notice};
pub use migrate::Migrations;
pub use pool::{
    Client, Pg, PoolOptions, DEFAULT_CALL_TIMEOUT, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL,
    KEEPALIVE_RETRIES, TCP_USER_TIMEOUT,
};
pub use tokio_postgres::{types, Error as DriverError, GenericClient, Row, Transaction};
pub use url::PgUrl;

#[cfg(feature = "testing")]
pub mod testing;
