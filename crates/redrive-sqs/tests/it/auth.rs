//! Signature Version 4: any signature is accepted by default; with access keys configured,
//! requests must be signed by one of them, over the body received, within 15 minutes of
//! the broker's clock.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use redrive_core::Clock;
use redrive_sqs::SqsConfig;

use crate::support::{Payload, SqsServer, sdk_client, sdk_client_skewed, sha256_hex};

fn keyed() -> SqsConfig {
    SqsConfig {
        access_keys: vec![("AKIDTEST".to_owned(), "secret".to_owned())],
        ..SqsConfig::default()
    }
}

const JSON_CREATE: &[(&str, &str)] = &[
    ("x-amz-target", "AmazonSQS.CreateQueue"),
    ("content-type", "application/x-amz-json-1.0"),
];

async fn queue_names(s: &SqsServer) -> Vec<String> {
    s.sqs
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.rsplit('/').next().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn signatures_cover_the_body_received() {
    let s = SqsServer::start_with(keyed()).await;
    let now = s.clock().now();
    let signed_body = br#"{"QueueName":"signed"}"#;
    let other_body = br#"{"QueueName":"swapped"}"#;
    // The real signer, payload hash in the canonical request: accepted.
    let (st, _, text) = s
        .signed_raw("/", JSON_CREATE, signed_body, Payload::Signed, now)
        .await;
    assert_eq!(st, 200, "{text}");
    // A signed x-amz-content-sha256 equal to the body's hash: accepted.
    let (st, _, text) = s
        .signed_raw(
            "/",
            JSON_CREATE,
            br#"{"QueueName":"hashed"}"#,
            Payload::Claimed(&sha256_hex(br#"{"QueueName":"hashed"}"#)),
            now,
        )
        .await;
    assert_eq!(st, 200, "{text}");
    // A signature over one body's hash, sent with another body.
    let (st, qe, text) = s
        .signed_raw(
            "/",
            JSON_CREATE,
            other_body,
            Payload::Claimed(&sha256_hex(signed_body)),
            now,
        )
        .await;
    assert_eq!(st, 403, "{text}");
    assert_eq!(qe.as_deref(), Some("SignatureDoesNotMatch;Sender"));
    assert!(text.contains("SignatureDoesNotMatch"), "{text}");
    // UNSIGNED-PAYLOAD is S3's, not SQS's.
    let (st, _, text) = s
        .signed_raw("/", JSON_CREATE, other_body, Payload::Unsigned, now)
        .await;
    assert_eq!(st, 403, "{text}");
    assert!(text.contains("UNSIGNED-PAYLOAD"), "{text}");
    // A content hash header outside SignedHeaders is refused, even a true one.
    let (st, _, text) = s
        .signed_raw(
            "/",
            JSON_CREATE,
            other_body,
            Payload::HeaderAddedAfterSigning,
            now,
        )
        .await;
    assert_eq!(st, 403, "{text}");
    assert!(text.contains("SignedHeaders"), "{text}");
    let mut names = queue_names(&s).await;
    names.sort();
    assert_eq!(
        names,
        ["hashed", "signed"],
        "refused requests created nothing"
    );
    s.stop().await;
}

#[tokio::test]
async fn signatures_hold_15_minutes_either_way_on_the_broker_clock() {
    let s = SqsServer::start_with(keyed()).await;
    let minute = 60_000;
    for skew in [-14 * minute, 14 * minute] {
        sdk_client_skewed(&s.sqs_url, "AKIDTEST", "secret", s.clock(), skew)
            .list_queues()
            .send()
            .await
            .unwrap();
    }
    for (skew, says) in [
        (-16 * minute, "Signature expired"),
        (16 * minute, "Signature not yet current"),
    ] {
        let e = sdk_client_skewed(&s.sqs_url, "AKIDTEST", "secret", s.clock(), skew)
            .create_queue()
            .queue_name("late")
            .send()
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("SignatureDoesNotMatch"), "{e:?}");
        assert!(e.message().unwrap_or_default().contains(says), "{e:?}");
    }
    // An identical request replayed within the window is accepted, as AWS does; once the
    // broker's clock is past the window it is refused.
    let signed_at = s.clock().now();
    let body = br#"{"QueueName":"replayed"}"#;
    for _ in 0..2 {
        let (st, _, text) = s
            .signed_raw("/", JSON_CREATE, body, Payload::Signed, signed_at)
            .await;
        assert_eq!(st, 200, "{text}");
    }
    s.advance_secs(15 * 60 + 1);
    let (st, qe, text) = s
        .signed_raw("/", JSON_CREATE, body, Payload::Signed, signed_at)
        .await;
    assert_eq!(st, 403, "{text}");
    assert_eq!(qe.as_deref(), Some("SignatureDoesNotMatch;Sender"));
    assert!(text.contains("Signature expired"), "{text}");
    assert_eq!(queue_names(&s).await, ["replayed"]);
    s.stop().await;
}

#[tokio::test]
async fn with_access_keys_only_correct_signatures_are_accepted() {
    let s = SqsServer::start_with(keyed()).await;
    // The support client signs with AKIDTEST / secret.
    s.sqs
        .create_queue()
        .queue_name("signed")
        .send()
        .await
        .unwrap();

    let wrong_secret = sdk_client(&s.sqs_url, "AKIDTEST", "not-the-secret", s.clock());
    let e = wrong_secret.list_queues().send().await.unwrap_err();
    assert_eq!(e.code(), Some("SignatureDoesNotMatch"), "{e:?}");

    let unknown = sdk_client(&s.sqs_url, "AKIDOTHER", "secret", s.clock());
    let e = unknown
        .create_queue()
        .queue_name("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidClientTokenId"), "{e:?}");

    let unsigned = s
        .http
        .post(&s.sqs_url)
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .header("content-type", "application/x-amz-json-1.0")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403);
    let urls = s
        .sqs
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls
        .unwrap_or_default();
    assert_eq!(urls.len(), 1, "the refused create changed nothing");
    s.stop().await;
}

#[tokio::test]
async fn without_access_keys_any_signature_is_accepted() {
    let s = SqsServer::start().await;
    let other = sdk_client(&s.sqs_url, "ANYONE", "anything", s.clock());
    other
        .create_queue()
        .queue_name("open")
        .send()
        .await
        .unwrap();
    s.stop().await;
}

/// Creates a token with SQS credentials through the native API; returns (id, key, secret).
async fn sqs_token(s: &SqsServer, name: &str, grants: &[&str]) -> (String, String, String) {
    let r = s
        .http
        .post(format!("{}/v1/tokens", s.url))
        .bearer_auth(redrive_testkit::ADMIN)
        .json(&serde_json::json!({"name": name, "grants": grants, "sqs": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["sqs_access_key_id"].as_str().unwrap().to_owned(),
        v["sqs_secret_access_key"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn token_credentials_hold_their_grants_over_sqs_and_stop_when_revoked() {
    let s = SqsServer::start_with_access(
        SqsConfig::default(),
        redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        },
    )
    .await;
    // Unsigned or unknown credentials are refused once authentication is on.
    let stranger = sdk_client(&s.sqs_url, "ANYONE", "anything", s.clock());
    let e = stranger.list_queues().send().await.unwrap_err();
    assert_eq!(crate::support::code(&e), "InvalidClientTokenId");

    let (_, ops_key, ops_secret) = sqs_token(&s, "ops", &["operator"]).await;
    let ops = sdk_client(&s.sqs_url, &ops_key, &ops_secret, s.clock());
    let orders = ops
        .create_queue()
        .queue_name("orders")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    ops.create_queue()
        .queue_name("payments")
        .send()
        .await
        .unwrap();

    let (shop_id, key, secret) = sqs_token(&s, "shop", &["producer:orders"]).await;
    let shop = sdk_client(&s.sqs_url, &key, &secret, s.clock());
    let url = shop
        .get_queue_url()
        .queue_name("orders")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert_eq!(url, orders);
    shop.send_message()
        .queue_url(&url)
        .message_body("hello")
        .send()
        .await
        .unwrap();
    let e = shop
        .delete_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::support::code(&e), "AccessDenied");
    let e = shop
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::support::code(&e), "AccessDenied");
    let e = shop
        .get_queue_url()
        .queue_name("payments")
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::support::code(&e), "AccessDenied");
    // A wrong secret for a real key id is still a bad signature.
    let forged = sdk_client(&s.sqs_url, &key, "not-the-secret", s.clock());
    let e = forged
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::support::code(&e), "SignatureDoesNotMatch");

    let r = s
        .http
        .post(format!("{}/v1/tokens/{shop_id}/revoke", s.url))
        .bearer_auth(redrive_testkit::ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let e = shop
        .send_message()
        .queue_url(&url)
        .message_body("after")
        .send()
        .await
        .unwrap_err();
    assert_eq!(crate::support::code(&e), "InvalidClientTokenId");

    // The refusals are in the audit log, under the token.
    let log: serde_json::Value = s
        .http
        .get(format!("{}/v1/audit?actor={shop_id}", s.url))
        .bearer_auth(redrive_testkit::ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let actions: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"denied:DeleteEntity"), "{actions:?}");
    assert!(actions.contains(&"denied:Receive"), "{actions:?}");
    s.stop().await;
}
