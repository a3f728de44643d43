//! Receipt handles that carry a lock token no delivery can have: a handle of the right
//! shape and checksum (the checksum is no secret, so anyone can make one) whose token is
//! past its length answers exactly as one whose token is well formed but held by nobody:
//! `DeleteMessage` succeeds without deleting (a stale handle), `ChangeMessageVisibility`
//! answers `MessageNotInflight`, each batch entry on its own; nothing changes.

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry as CvEntry, DeleteMessageBatchRequestEntry as DEntry,
};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::{Digest, Sha256};

use crate::support::{SqsServer, code};

/// A receipt handle for `token` on `queue`, made as the endpoint's documentation of the
/// format says: base64 of `rh1`, the name's length and the name, the token, and the first
/// 8 bytes of SHA-256 over `redrive-sqs receipt handle\0` and all of that.
fn handle(queue: &str, token: &str) -> String {
    let mut bytes = b"rh1".to_vec();
    bytes.push(u8::try_from(queue.len()).unwrap());
    bytes.extend_from_slice(queue.as_bytes());
    bytes.extend_from_slice(token.as_bytes());
    let mut h = Sha256::new();
    h.update(b"redrive-sqs receipt handle\0");
    h.update(&bytes);
    bytes.extend_from_slice(&h.finalize()[..8]);
    B64.encode(bytes)
}

/// What each settlement answers for `h` on `url`: the single calls' error codes and
/// messages (`None` for success), then each batch's successful and failed entries.
async fn answers(s: &SqsServer, url: &str, h: &str) -> Vec<String> {
    let delete = s
        .sqs
        .delete_message()
        .queue_url(url)
        .receipt_handle(h)
        .send()
        .await
        .map_err(|e| e.into_service_error());
    let change = s
        .sqs
        .change_message_visibility()
        .queue_url(url)
        .receipt_handle(h)
        .visibility_timeout(30)
        .send()
        .await
        .map_err(|e| e.into_service_error());
    let d = s
        .sqs
        .delete_message_batch()
        .queue_url(url)
        .entries(DEntry::builder().id("e").receipt_handle(h).build().unwrap())
        .send()
        .await
        .unwrap();
    let cv = s
        .sqs
        .change_message_visibility_batch()
        .queue_url(url)
        .entries(
            CvEntry::builder()
                .id("e")
                .receipt_handle(h)
                .visibility_timeout(0)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    vec![
        format!(
            "{:?}",
            delete.as_ref().err().map(|e| (code(e), e.to_string()))
        ),
        format!(
            "{:?}",
            change.as_ref().err().map(|e| (code(e), e.to_string()))
        ),
        format!("{:?} {:?}", d.successful, d.failed),
        format!("{:?} {:?}", cv.successful, cv.failed),
    ]
}

#[tokio::test]
async fn a_handle_whose_token_no_delivery_can_have_is_a_stale_one() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("tokens", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("kept")
        .send()
        .await
        .unwrap();
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(60)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let held = got[0].receipt_handle.clone().unwrap();

    // Well formed, held by nobody (the endpoint's own encoding matches this one).
    let unknown = answers(
        &s,
        &url,
        &handle("tokens", &format!("lk_{}.1", "0".repeat(32))),
    )
    .await;
    assert_eq!(
        unknown[0], "None",
        "a stale handle deletes nothing, without an error"
    );
    assert!(unknown[1].contains("MessageNotInflight"), "{}", unknown[1]);
    assert!(
        unknown[2].starts_with("[DeleteMessageBatchResultEntry"),
        "{}",
        unknown[2]
    );
    assert!(unknown[3].contains("MessageNotInflight"), "{}", unknown[3]);

    for token in [
        format!("lk_{}", "a".repeat(65)),
        format!("lk_{}.1", "0".repeat(80)),
    ] {
        assert_eq!(
            answers(&s, &url, &handle("tokens", &token)).await,
            unknown,
            "{token}"
        );
    }

    // Nothing changed: the message is still in flight under its handle.
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "1"
    );
    s.sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&held)
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "0"
    );
    s.stop().await;
}
