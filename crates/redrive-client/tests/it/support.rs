//! What the tests share: a client on a test server's clock.

use std::sync::Arc;
use std::time::Duration;

use redrive_client::{Client, Jitter, RetryOptions};
use redrive_testkit::TestServer;

/// A client of `s` reading its manual clock, with predictable retries.
pub fn client(s: &TestServer) -> Client {
    log();
    Client::builder(&s.url)
        .clock(Arc::new(s.clock().clone()))
        .retry(fixed_retries())
        .build()
        .unwrap()
}

/// Retries without jitter: 100 ms, 200 ms, 400 ms.
pub fn fixed_retries() -> RetryOptions {
    RetryOptions::new()
        .max_retries(3)
        .delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(10))
        .jitter(Jitter::None)
}

/// With `REDRIVE_TEST_LOG` set (an env-filter directive such as `redrive_client=debug`),
/// the tests' tracing output is printed (captured per test, shown for a failure).
pub fn log() {
    if let Ok(filter) = std::env::var("REDRIVE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}
