//! Push requests reach no loopback, private or metadata address unless allowed: a name
//! that resolves to one is refused by the client's resolver at connect time, an IP
//! literal before connecting, and both are connection errors with the reason.

use std::sync::Arc;
use std::time::Duration;

use redrive_core::{ManualClock, Timestamp};
use redrive_events::{AttemptOutcome, CloudEvent};
use redrive_push::{
    Deliverer, DeliveryMode, DeliverySettings, NetworkPolicy, PushTarget, ValidationError,
    http_client, validate_endpoint,
};
use redrive_testkit::{Receiver, Reply};
use serde_json::json;

use crate::loopback_settings;

const NOW: Timestamp = Timestamp(1_795_986_000_000);

fn event() -> CloudEvent {
    CloudEvent::from_json(json!({
        "specversion": "1.0", "id": "e-1", "source": "/s", "type": "t",
    }))
    .unwrap()
}

fn target(url: &str) -> PushTarget {
    PushTarget::new(url, "s", DeliveryMode::Structured, Duration::from_secs(5))
}

fn deliverer(settings: DeliverySettings) -> Deliverer {
    Deliverer::new(settings, Arc::new(ManualClock::new(NOW))).unwrap()
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_at_connect_time() {
    let rx = Receiver::start(|_, _| Reply::status(200)).await;
    // The same receiver, by a name that resolves to a loopback address.
    let by_name = rx.url.replace("127.0.0.1", "localhost");
    let d = deliverer(DeliverySettings::default())
        .deliver_detailed(&target(&by_name), &[event()], 1)
        .await;
    assert_eq!(d.outcome, AttemptOutcome::ConnectionError);
    let why = d.error.unwrap();
    assert!(why.contains("loopback"), "{why}");
    assert!(rx.requests().is_empty(), "nothing reached the receiver");
    // The validation handshake goes through the same resolver.
    let client = http_client(&DeliverySettings::default()).unwrap();
    let v = validate_endpoint(&client, &by_name, "o", Duration::from_secs(5)).await;
    assert!(matches!(v, Err(ValidationError::Unreachable(_))), "{v:?}");
    assert!(rx.requests().is_empty());
    // Allowed explicitly: delivered.
    let d = deliverer(loopback_settings())
        .deliver_detailed(&target(&by_name), &[event()], 1)
        .await;
    assert!(
        matches!(d.outcome, AttemptOutcome::Status { status: 200, .. }),
        "{d:?}"
    );
    assert_eq!(rx.requests().len(), 1);
}

#[tokio::test]
async fn an_ip_literal_to_a_forbidden_address_is_not_sent() {
    let rx = Receiver::start(|_, _| Reply::status(200)).await;
    for settings in [
        DeliverySettings::default(),
        DeliverySettings {
            network: NetworkPolicy::allowing(&["10.0.0.0/8"]).unwrap(),
            ..DeliverySettings::default()
        },
    ] {
        let d = deliverer(settings);
        let got = d.deliver_detailed(&target(&rx.url), &[event()], 1).await;
        assert_eq!(got.outcome, AttemptOutcome::ConnectionError);
        assert!(got.error.unwrap().contains("127.0.0.1"));
        let mapped = rx.url.replace("127.0.0.1", "[::ffff:127.0.0.1]");
        let got = d.deliver_detailed(&target(&mapped), &[event()], 1).await;
        assert_eq!(got.outcome, AttemptOutcome::ConnectionError, "{mapped}");
    }
    assert!(rx.requests().is_empty());
    let by_name = NetworkPolicy::allowing(&["localhost"]).unwrap();
    let url = rx.url.replace("127.0.0.1", "localhost");
    let d = deliverer(DeliverySettings {
        network: by_name,
        ..DeliverySettings::default()
    });
    let got = d.deliver_detailed(&target(&url), &[event()], 1).await;
    assert!(
        matches!(got.outcome, AttemptOutcome::Status { status: 200, .. }),
        "{got:?}"
    );
}

#[tokio::test]
async fn creation_checks_every_address_of_the_host() {
    let none = NetworkPolicy::default();
    for url in [
        "http://127.0.0.1:9/x",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/",
        "http://[::1]/",
        "http://localhost:9/",
    ] {
        assert!(none.check_url(url).await.is_err(), "{url}");
    }
    let loopback = NetworkPolicy::allowing(&["127.0.0.0/8", "::1"]).unwrap();
    assert!(loopback.check_url("http://localhost:9/").await.is_ok());
    assert!(loopback.check_url("http://169.254.169.254/").await.is_err());
}
