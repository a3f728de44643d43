//! Push delivery against a real HTTP receiver on 127.0.0.1 (an axum app whose answer the
//! test chooses per request): request shapes, outcomes, and the validation handshake.
//! Timeouts run on tokio's paused clock; no test sleeps in real time.

// Test support code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

mod deliver;
mod network;
mod receiver;
mod validate;
