//! `ReceiveRequestAttemptId` on FIFO queues, as the `ReceiveMessage` API reference
//! documents it: a retry with the same id within 5 minutes returns the same messages and
//! receipt handles and resets their visibility timeout, unless a message was deleted or had
//! its visibility changed (then the retry is a new receive); ids are independent of each
//! other, of queues and of callers; a standard queue accepts the id and ignores it. Time is
//! the manual clock's.

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName as S};
use redrive_sqs::SqsConfig;

use crate::support::{SqsServer, code, sdk_client};

/// One received message: (MessageId, body, ReceiptHandle, ApproximateReceiveCount).
type Got = (String, String, String, String);

async fn fifo(s: &SqsServer, name: &str) -> String {
    s.sqs_queue(
        name,
        &[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")],
    )
    .await
}

async fn send(s: &SqsServer, url: &str, body: &str, group: &str) -> String {
    let mut req = s.sqs.send_message().queue_url(url).message_body(body);
    if url.ends_with(".fifo") {
        req = req.message_group_id(group);
    }
    req.send().await.unwrap().message_id.unwrap()
}

/// A receive with `attempt` (if any), up to `max` messages, the given visibility timeout.
async fn receive_with(
    client: &aws_sdk_sqs::Client,
    url: &str,
    attempt: Option<&str>,
    max: i32,
    visibility: i32,
) -> Vec<Got> {
    client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(max)
        .visibility_timeout(visibility)
        .set_receive_request_attempt_id(attempt.map(str::to_owned))
        .message_system_attribute_names(S::ApproximateReceiveCount)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let count = m.attributes.as_ref().unwrap()[&S::ApproximateReceiveCount].clone();
            (
                m.message_id.unwrap(),
                m.body.unwrap(),
                m.receipt_handle.unwrap(),
                count,
            )
        })
        .collect()
}

async fn receive(s: &SqsServer, url: &str, attempt: Option<&str>, max: i32) -> Vec<Got> {
    receive_with(&s.sqs, url, attempt, max, 30).await
}

fn bodies(got: &[Got]) -> Vec<&str> {
    got.iter().map(|g| g.1.as_str()).collect()
}

/// Every message of `queue` was deleted: none is visible, none is held.
async fn assert_empty(s: &SqsServer, queue: &str) {
    let view = s.native_get(&format!("/v1/queues/{queue}")).await;
    assert_eq!(view["counts"]["active"], 0, "{view}");
    assert_eq!(view["counts"]["locked"], 0, "{view}");
}

async fn delete(s: &SqsServer, url: &str, handle: &str) {
    s.sqs
        .delete_message()
        .queue_url(url)
        .receipt_handle(handle)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_retry_with_the_same_attempt_id_returns_the_same_messages_and_receipt_handles() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "retry.fifo").await;
    send(&s, &url, "a1", "A").await;
    send(&s, &url, "a2", "A").await;
    send(&s, &url, "b1", "B").await;
    let first = receive(&s, &url, Some("attempt-1"), 10).await;
    assert_eq!(bodies(&first), ["a1", "a2", "b1"]);
    s.advance_secs(20);
    let again = receive(&s, &url, Some("attempt-1"), 10).await;
    assert_eq!(
        again, first,
        "same message ids, bodies, receipt handles and receive counts"
    );
    // The retry at 20 s reset the 30-second visibility timeout: at 40 s (past the first
    // receive's 30 s) the messages are still held, and the old handles still work.
    s.advance_secs(20);
    assert!(receive(&s, &url, Some("attempt-2"), 10).await.is_empty());
    assert!(receive(&s, &url, None, 10).await.is_empty());
    for (_, _, handle, _) in &first {
        delete(&s, &url, handle).await;
    }
    assert_empty(&s, "retry.fifo").await;
    s.stop().await;
}

#[tokio::test]
async fn after_five_minutes_the_same_attempt_id_is_a_new_receive() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "window.fifo").await;
    send(&s, &url, "a1", "A").await;
    // A visibility timeout longer than the window, so that a1 stays held throughout.
    let first = receive_with(&s.sqs, &url, Some("slow"), 10, 600).await;
    assert_eq!(bodies(&first), ["a1"]);
    send(&s, &url, "b1", "B").await;
    s.advance_secs(299);
    let inside = receive_with(&s.sqs, &url, Some("slow"), 10, 600).await;
    assert_eq!(inside, first, "299 s after the receive: a retry");
    s.advance_secs(1);
    let after = receive_with(&s.sqs, &url, Some("slow"), 10, 600).await;
    assert_eq!(
        bodies(&after),
        ["b1"],
        "300 s after the receive: a new receive (a1 is still held)"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_delete_does_not_return_the_deleted_message() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "deleted.fifo").await;
    send(&s, &url, "a1", "A").await;
    send(&s, &url, "a2", "A").await;
    let first = receive(&s, &url, Some("r"), 1).await;
    assert_eq!(bodies(&first), ["a1"]);
    delete(&s, &url, &first[0].2).await;
    let retry = receive(&s, &url, Some("r"), 1).await;
    assert_eq!(
        bodies(&retry),
        ["a2"],
        "a message was deleted: the retry is a new receive"
    );
    assert_ne!(retry[0].2, first[0].2);
    // The same through DeleteMessageBatch.
    s.sqs
        .delete_message_batch()
        .queue_url(&url)
        .entries(
            DeleteMessageBatchRequestEntry::builder()
                .id("1")
                .receipt_handle(&retry[0].2)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(receive(&s, &url, Some("r"), 1).await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn a_retry_after_a_visibility_change_is_a_new_receive() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "changed.fifo").await;
    send(&s, &url, "a1", "A").await;
    let first = receive(&s, &url, Some("r"), 10).await;
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&first[0].2)
        .visibility_timeout(120)
        .send()
        .await
        .unwrap();
    assert!(
        receive(&s, &url, Some("r"), 10).await.is_empty(),
        "not replayed: a1 is held by the changed visibility"
    );
    // Visible again at once: the retry's new receive hands it out under a new handle.
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&first[0].2)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let retry = receive(&s, &url, Some("r"), 10).await;
    assert_eq!(bodies(&retry), ["a1"]);
    assert_ne!(retry[0].2, first[0].2);
    assert_eq!(retry[0].3, "2", "a new receive counts");
    s.stop().await;
}

#[tokio::test]
async fn a_message_a_later_receive_holds_is_not_handed_out_again() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "taken.fifo").await;
    send(&s, &url, "a1", "A").await;
    let first = receive(&s, &url, Some("r"), 10).await;
    // The visibility timeout runs out and another receive takes a1.
    s.advance_secs(31);
    let later = receive(&s, &url, Some("other"), 10).await;
    assert_eq!(bodies(&later), ["a1"]);
    assert_ne!(later[0].2, first[0].2);
    let retry = receive(&s, &url, Some("r"), 10).await;
    assert!(retry.is_empty(), "{retry:?}");
    // The later receive's handle is untouched.
    delete(&s, &url, &later[0].2).await;
    assert_empty(&s, "taken.fifo").await;
    s.stop().await;
}

#[tokio::test]
async fn different_attempt_ids_queues_and_callers_are_independent() {
    let keys = vec![
        ("AKIDTEST".to_owned(), "secret".to_owned()),
        ("AKIDOTHER".to_owned(), "other".to_owned()),
    ];
    let s = SqsServer::start_with(SqsConfig {
        access_keys: keys,
        ..SqsConfig::default()
    })
    .await;
    let url = fifo(&s, "ids.fifo").await;
    let other_url = fifo(&s, "other.fifo").await;
    send(&s, &url, "a1", "A").await;
    send(&s, &url, "b1", "B").await;
    send(&s, &url, "c1", "C").await;
    send(&s, &other_url, "z1", "Z").await;
    let x = receive(&s, &url, Some("x"), 1).await;
    let y = receive(&s, &url, Some("y"), 1).await;
    assert_eq!(bodies(&x), ["a1"]);
    assert_eq!(bodies(&y), ["b1"], "another id is a new receive");
    assert_eq!(receive(&s, &url, Some("y"), 1).await, y);
    assert_eq!(receive(&s, &url, Some("x"), 1).await, x);
    // The same id on another queue.
    assert_eq!(bodies(&receive(&s, &other_url, Some("x"), 1).await), ["z1"]);
    // The same id from another caller: a new receive, not the first caller's messages.
    let stranger = sdk_client(&s.sqs_url, "AKIDOTHER", "other", s.clock());
    let theirs = receive_with(&stranger, &url, Some("x"), 10, 30).await;
    assert_eq!(bodies(&theirs), ["c1"]);
    s.stop().await;
}

#[tokio::test]
async fn a_standard_queue_accepts_the_attempt_id_and_ignores_it() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("plain", &[]).await;
    let id1 = send(&s, &url, "s1", "").await;
    let id2 = send(&s, &url, "s2", "").await;
    let first = receive(&s, &url, Some("x"), 1).await;
    let second = receive(&s, &url, Some("x"), 1).await;
    assert_eq!(first.len(), 1);
    assert_eq!(second.len(), 1);
    let mut ids = vec![first[0].0.clone(), second[0].0.clone()];
    ids.sort();
    let mut sent = vec![id1, id2];
    sent.sort();
    assert_eq!(ids, sent, "the second receive is a new one");
    assert!(receive(&s, &url, Some("x"), 1).await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn an_invalid_attempt_id_is_refused() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "bad.fifo").await;
    let plain = s.sqs_queue("plain", &[]).await;
    for q in [&url, &plain] {
        for bad in ["x".repeat(129), "has space".to_owned(), "é".to_owned()] {
            let e = s
                .sqs
                .receive_message()
                .queue_url(q)
                .receive_request_attempt_id(bad.clone())
                .send()
                .await
                .unwrap_err()
                .into_service_error();
            assert_eq!(code(&e), "InvalidParameterValue", "{bad:?}");
        }
    }
    let ok = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~aZ09".to_owned() + &"x".repeat(92);
    assert_eq!(ok.len(), 128);
    s.sqs
        .receive_message()
        .queue_url(&url)
        .receive_request_attempt_id(ok)
        .send()
        .await
        .unwrap();
    s.stop().await;
}
