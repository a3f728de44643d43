//! Push delivery against a real HTTP receiver on 127.0.0.1 (the test kit's `Receiver`,
//! whose answer the test chooses per request): request shapes, outcomes, and the
//! validation handshake. Timeouts run on tokio's paused clock; no test sleeps in real time.

// Test support code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

mod deliver;
mod network;
mod validate;

/// Delivery settings that allow the loopback receivers of these tests (push requests
/// reach no loopback address by default).
pub fn loopback_settings() -> redrive_push::DeliverySettings {
    redrive_push::DeliverySettings {
        network: redrive_testkit::loopback(),
        ..redrive_push::DeliverySettings::default()
    }
}
