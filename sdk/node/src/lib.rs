//! The native half of the npm package `execbox`: the host core (`execbox-host`) behind Node-API.
//!
//! The public API is the package's JavaScript (`index.cjs`, typed by `index.d.ts`); it wraps the
//! five classes this addon exports, which users never see:
//! - [`NativeTools`](tools::NativeTools): a [`ToolSet`](execbox_host::ToolSet) built from the
//!   tool specs the JavaScript checked, whose handlers forward each call to one JavaScript
//!   dispatcher (a threadsafe function) and wait for its answer (`complete`);
//! - [`NativeExecutor`](executor::NativeExecutor): a [`PooledExecutor`](execbox_host::PooledExecutor)
//!   of the shipped `execbox-runner`, whose `execute` returns a Promise of the result;
//! - [`NativeCancel`](executor::NativeCancel): the cancellation token an `AbortSignal` fires;
//! - [`NativePolicy`](policy::NativePolicy): an `execbox-policy` enforcement guarding the tool
//!   calls of the executions given it, whose approver is a JavaScript function asked the way
//!   tools are called (and answered through `completeApproval`);
//! - [`NativeOpenApi`](openapi::NativeOpenApi): an OpenAPI document's operations as tools
//!   (`execbox-openapi`), joined to a tool set as one more namespace.
//!
//! Values cross as JSON text both ways; executions and tool-call plumbing run on napi's Tokio
//! runtime, tool handlers on the Node main thread.

// The `#[napi]` macros expand to `unsafe` Node-API glue (registration, value conversion); this
// crate writes no `unsafe` of its own.
#![allow(unsafe_code)]
// Under `cfg(test)` (`cargo clippy --all-targets`) napi-derive leaves out the registration that
// makes the exported functions used.
#![cfg_attr(test, allow(dead_code))]

mod executor;
mod limits;
mod openapi;
mod pending;
mod policy;
mod result;
mod tools;
