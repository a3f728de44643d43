//! The SQS endpoint driven by the real AWS SDK for Rust (`aws-sdk-sqs`) and by raw query
//! protocol requests, against an in-process server on 127.0.0.1 (redrive-testkit's
//! `TestServer`) over a real SQLite file, with time moved by a manual clock (no test
//! sleeps for timing rules).

// Test support code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

mod attempts;
mod auth;
mod batches;
mod dead_letters;
mod errors;
mod fifo;
mod limits;
mod messages;
mod moves;
mod query;
mod queues;
mod receipts;
mod support;
