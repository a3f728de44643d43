//! Signature Version 4: any signature is accepted by default; with access keys configured,
//! requests must be signed by one of them.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use redrive_sqs::SqsConfig;

use crate::support::{TestServer, sdk_client};

#[tokio::test]
async fn with_access_keys_only_correct_signatures_are_accepted() {
    let config = SqsConfig {
        access_keys: vec![("AKIDTEST".to_owned(), "secret".to_owned())],
        ..SqsConfig::default()
    };
    let s = TestServer::start_with(config).await;
    // The support client signs with AKIDTEST / secret.
    s.sqs
        .create_queue()
        .queue_name("signed")
        .send()
        .await
        .unwrap();

    let wrong_secret = sdk_client(&s.sqs_url, "AKIDTEST", "not-the-secret");
    let e = wrong_secret.list_queues().send().await.unwrap_err();
    assert_eq!(e.code(), Some("SignatureDoesNotMatch"), "{e:?}");

    let unknown = sdk_client(&s.sqs_url, "AKIDOTHER", "secret");
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
    let s = TestServer::start().await;
    let other = sdk_client(&s.sqs_url, "ANYONE", "anything");
    other
        .create_queue()
        .queue_name("open")
        .send()
        .await
        .unwrap();
    s.stop().await;
}
