//! Support shared by the host crate's integration tests and benches: processes seen through
//! `/proc`, temporary folders, runner commands, tools files of shell scripts, and the CLI.
//!
//! Each test binary includes it with `mod support;` (the benches with `#[path]`), and each uses
//! a different part of it: what one binary leaves unused is not dead code, hence the `allow`.
#![allow(dead_code)]

pub mod capabilities;
pub mod cli;
pub mod conformance;
pub mod openapi;
pub mod otlp;
pub mod process;
pub mod runners;
pub mod scripts;
pub mod temp;
