//! End-to-end tests of the `redrive` binary: they spawn the real compiled binary as a
//! server on a temporary data directory and drive it with the CLI and over HTTP.
//!
//! # Layout
//! - `support`: start/stop a server process, run CLI commands, tiny HTTP probes.
//! - `cli`: the operator commands end to end.
//! - `cli_cases`: recovery cases, intents and effect authorities end to end.
//! - `cli_access`: tokens, roles, revocation and the audit log end to end.
//! - `cli_failures`: failures by signature and the dead-letter list's filters.
//! - `cli_replay`: dead-letter import, export and restore, replay status, retention.
//! - `cli_sessions`: a queue's sessions listed, as a table and as JSON.
//! - `cli_topics`: the topic, subscription and publish commands end to end.
//! - `config`: configuration layering and refusal of unknown keys.
//! - `crash`: SIGKILL under concurrent load, restart, and the durability check.
//! - `crash_transactions`: SIGKILL while transactions apply; every group all or nothing.
//! - `docs`: every command block of README.md and docs/*.md, run against a real server.
//! - `logs`: request and broker-operation spans in the debug log.
//! - `multinode`: three nodes on one PostgreSQL database through a node crash.
//! - `tls`: the CLI against a TLS server (`--ca-file`), an https push endpoint, bad CA bundles.

// Helpers outside `#[test]` functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod cli;
mod cli_access;
mod cli_cases;
mod cli_failures;
mod cli_groups;
mod cli_history;
mod cli_replay;
mod cli_sessions;
mod cli_topics;
mod cli_usage;
mod config;
mod crash;
mod crash_transactions;
mod docs;
mod logs;
mod multinode;
mod register;
mod support;
mod tls;
