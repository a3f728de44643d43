//! The client against real servers: a scripted HTTP server for the retry rules, and the
//! test kit's in-process redrive server (real SQLite, a manual clock the client shares)
//! for everything else. Time moves only through the manual clock; waits end on signals.

// Test code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

mod breaker;
mod dead_letter_policy;
mod processor;
mod receiver;
mod recovery;
mod retry;
mod sender;
mod sessions;
mod support;
mod tls;
mod transactions;
