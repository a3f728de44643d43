//! Test support shared by redrive's own test suites, so that each thing a test needs is
//! written once:
//!
//! - [`TestServer`]: the native API (and, when asked, the SQS endpoint) in process on
//!   127.0.0.1, over a SQLite file or a fresh PostgreSQL schema, on a [`ManualClock`] (or
//!   the system clock), with authentication on or off; built from the public constructors
//!   (`Broker::with_outgoing`, `redrive_server::run_with`, `redrive_sqs::router`), stopped
//!   gracefully by [`TestServer::stop`] or on drop. Its JSON helpers drive the native API.
//! - [`Receiver`]: a fake webhook endpoint that records every request, answers as the test
//!   scripts it, and wakes a waiting test when a request arrives
//!   ([`Receiver::wait_for`]): no polling.
//! - [`tls`]: a certificate authority made in the test and a TLS front on 127.0.0.1, for
//!   `https://` endpoints with real handshakes.
//! - [`recovery`]: the recovery fixtures: dead letters made as a consumer makes them, a
//!   type's register entry, a case acted on and worked to replay eligibility, the workers
//!   driven one pass at a time, and waits on a view.
//! - [`postgres`]: the PostgreSQL test database (`REDRIVE_TEST_POSTGRES_URL`), its skip
//!   rule (skipped with a line saying why; a failure under CI), fresh schemas and fresh
//!   databases that are dropped again.
//!
//! A dev-dependency only: no shipped crate depends on it (`tests/dev_only.rs`). The
//! process-level harness of the binary's tests (`redrive serve` as a child process) stays
//! in `crates/redrive/tests/it/support.rs`, its only user.
//!
//! [`ManualClock`]: redrive_core::ManualClock

// Test support: a failed setup step panics the test that asked for it, with the reason.
#![allow(clippy::unwrap_used)]

mod client;
pub mod postgres;
mod receiver;
pub mod recovery;
mod server;
pub mod tls;

use std::future::Future;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use redrive_core::Timestamp;

pub use client::assert_problem;
pub use receiver::{Delay, Receiver, Reply, Request};
pub use server::{Backend, Builder, TestServer, default_settings};

/// A fixed, realistic start time for manual clocks (2027-01-15T08:00:00Z).
pub const T0: Timestamp = Timestamp(1_800_000_000_000);

/// The admin token servers with authentication on are bootstrapped with.
pub const ADMIN: &str = "rdt_00000000000000000000000000000000000000000000000000000000000000aa";

/// How long a test waits for something it was promised (a request at a receiver, a long
/// poll parking) before it fails. A bound on a hung test in real time, never a timing rule:
/// the waits end on a signal.
pub const GUARD: Duration = Duration::from_secs(60);

/// Push endpoints on loopback allowed: where the tests' receivers listen (by default no
/// loopback or private address is).
pub fn loopback() -> redrive_broker::NetworkPolicy {
    redrive_broker::NetworkPolicy::allowing(&["127.0.0.0/8", "::1"])
        .expect("loopback networks parse")
}

/// A URL on 127.0.0.1 where nothing listens: a port that was bound and released.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("a bound address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/hook")
}

/// Runs `fut` to completion, failing the test if it has not completed after [`GUARD`] of
/// real time. The bound is kept by a thread of its own, so tokio's paused clock (which
/// jumps ahead whenever the runtime is idle) cannot end the wait early.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let (expire, expired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(GUARD) {
            let _ = expire.send(());
        }
    });
    tokio::select! {
        biased;
        out = fut => {
            drop(done);
            out
        }
        Ok(()) = expired => panic!("{what}: not within {GUARD:?}"),
    }
}
