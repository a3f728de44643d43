//! The library half of the `redrive` package: what the operator CLI and the load tool
//! (`redrive-bench`) share — the HTTP client of the native API, exit codes, table and JSON
//! output, and command-line units. The binary (`main.rs`) is the server and the CLI.

pub mod client;
pub mod failure;
pub mod output;
pub mod progress;
pub mod units;
