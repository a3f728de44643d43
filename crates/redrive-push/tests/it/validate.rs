//! The CloudEvents webhook validation handshake against endpoints that agree, refuse,
//! misanswer or are not there.

use std::time::Duration;

use redrive_push::{
    AllowedRate, UrlError, Validated, ValidationError, http_client, validate_endpoint,
    validate_endpoint_with_rate,
};
use redrive_testkit::{Receiver, Reply, refused_url};

use crate::loopback_settings;

const ORIGIN: &str = "redrive.example.com";
const TIMEOUT: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    http_client(&loopback_settings()).unwrap()
}

/// An endpoint that echoes the requested origin, as the spec's example does.
async fn echoing() -> Receiver {
    Receiver::start(|_, req| {
        Reply::status(200)
            .header(
                "webhook-allowed-origin",
                req.header("webhook-request-origin"),
            )
            .header("allow", "GET,POST,OPTIONS")
    })
    .await
}

#[tokio::test]
async fn an_endpoint_echoing_the_origin_is_valid() {
    let rx = echoing().await;
    assert_eq!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Ok(())
    );
    let seen = rx.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "OPTIONS");
    assert_eq!(seen[0].path, "/hook");
    assert_eq!(seen[0].header("webhook-request-origin"), ORIGIN);
    assert!(seen[0].header("webhook-request-rate").is_empty());
}

#[tokio::test]
async fn a_wildcard_origin_is_valid_and_the_allowed_rate_is_reported() {
    let rx = Receiver::start(|_, _| {
        Reply::status(204)
            .header("webhook-allowed-origin", "*")
            .header("webhook-allowed-rate", "60")
    })
    .await;
    let validated = validate_endpoint_with_rate(&client(), &rx.url, ORIGIN, Some(120), TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        validated,
        Validated {
            allowed_rate: Some(AllowedRate::PerMinute(60))
        }
    );
    assert_eq!(rx.requests()[0].header("webhook-request-rate"), "120");
}

#[tokio::test]
async fn another_origin_is_refused() {
    let rx = Receiver::start(|_, _| {
        Reply::status(200).header("webhook-allowed-origin", "someone-else.example.com")
    })
    .await;
    assert_eq!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Err(ValidationError::MismatchedAllowedOrigin {
            expected: ORIGIN.into(),
            allowed: "someone-else.example.com".into(),
        })
    );
}

#[tokio::test]
async fn a_2xx_without_the_allowed_origin_is_refused() {
    let rx = Receiver::always(200).await;
    assert_eq!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Err(ValidationError::MissingAllowedOrigin)
    );
}

#[tokio::test]
async fn a_404_is_refused_with_its_status() {
    let rx = Receiver::always(404).await;
    assert_eq!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Err(ValidationError::Status(404))
    );
}

#[tokio::test]
async fn an_allow_header_without_post_is_refused() {
    let rx = Receiver::start(|_, _| {
        Reply::status(200)
            .header("webhook-allowed-origin", "*")
            .header("allow", "GET, OPTIONS")
    })
    .await;
    assert!(matches!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Err(ValidationError::PostNotAllowed(_))
    ));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_refused() {
    assert!(matches!(
        validate_endpoint(&client(), &refused_url(), ORIGIN, TIMEOUT).await,
        Err(ValidationError::Unreachable(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_silent_endpoint_times_out() {
    let rx = Receiver::start(|_, _| {
        Reply::status(200)
            .header("webhook-allowed-origin", "*")
            .after(Duration::from_secs(60))
    })
    .await;
    assert_eq!(
        validate_endpoint(&client(), &rx.url, ORIGIN, TIMEOUT).await,
        Err(ValidationError::Timeout(TIMEOUT))
    );
}

#[tokio::test]
async fn urls_are_checked_before_anything_is_sent() {
    for (url, expected) in [
        ("ftp://example.com/x", UrlError::Scheme("ftp".into())),
        ("http://user:pw@127.0.0.1/x", UrlError::UserInfo),
    ] {
        assert_eq!(
            validate_endpoint(&client(), url, ORIGIN, TIMEOUT).await,
            Err(ValidationError::InvalidUrl(expected))
        );
    }
}
