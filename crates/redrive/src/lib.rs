//! The library half of the `redrive` package: what the operator CLI and the load tool
//! (`redrive-bench`) share — exit codes, table and JSON output, and command-line units.
//! Both speak to a server through `redrive-client`. The binary (`main.rs`) is the server
//! and the CLI.

pub mod failure;
pub mod output;
pub mod progress;
pub mod units;
