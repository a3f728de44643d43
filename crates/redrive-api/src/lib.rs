//! Wire types of redrive's native HTTP/JSON API and its stable error codes.
//!
//! Shared by the server and by every client (the `redrive` CLI, the load tool), so the two
//! sides cannot drift. Times are RFC 3339 strings in UTC; durations are milliseconds.
//! Bodies travel as `body` plus `body_encoding` (`utf8`, the default, or `base64`).
//!
//! # Layout
//! - [`problem`]: the RFC 9457 problem document and the table of error codes.
//! - [`queue`]: queue create / update / show / list.
//! - [`message`]: send, receive, peek, settle, sessions.
//! - [`dead_letter`]: the dead-letter store.
//! - [`failure`]: failures by signature across dead-letter stores.
//! - [`topic`]: topics, subscriptions and publishing.
//! - [`transaction`]: a group of sends and settlements across queues, all or nothing.
//! - [`access`]: tokens and the audit log.
//! - [`register`]: the idempotency register of replayable message types.
//! - [`case`]: recovery cases, intents and effect authorities.
//! - [`replay`]: where each queue's dead letters stand with automatic replay.
//! - [`overview`]: who the caller is, the overview of every entity, a queue's series.

pub mod access;
pub mod case;
pub mod dead_letter;
pub mod failure;
pub mod message;
pub mod overview;
pub mod problem;
pub mod queue;
pub mod register;
pub mod replay;
pub mod topic;
pub mod transaction;

pub use problem::{ErrorCode, Problem};

/// The OpenAPI 3.1 document of the native API (served at `GET /openapi.json`).
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");
