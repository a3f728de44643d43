//! FIFO queues: order within a message group across receives, groups independent of each
//! other, deduplication (explicit ids, content-based, the 5-minute window on the manual
//! clock, the `messageGroup` scope), sequence numbers, the required parameters, and the
//! redrive of a FIFO queue to a FIFO dead-letter queue.

use aws_sdk_sqs::types::{
    MessageSystemAttributeName as S, QueueAttributeName as A, SendMessageBatchRequestEntry,
};

use crate::support::{SqsServer, code};

async fn fifo(s: &SqsServer, name: &str, attrs: &[(&str, &str)]) -> String {
    let mut all = vec![("FifoQueue", "true")];
    all.extend_from_slice(attrs);
    s.sqs_queue(name, &all).await
}

/// Sends one message; returns (MessageId, SequenceNumber).
async fn send(
    s: &SqsServer,
    url: &str,
    body: &str,
    group: &str,
    dedup: Option<&str>,
) -> (String, String) {
    let mut req = s
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group);
    if let Some(d) = dedup {
        req = req.message_deduplication_id(d);
    }
    let out = req.send().await.unwrap();
    (out.message_id.unwrap(), out.sequence_number.unwrap())
}

/// Receives up to `max` with a visibility timeout of 30 s, each receive with an attempt id
/// of its own (a repeated id would be a retry): (body, receipt handle) pairs.
async fn recv(s: &SqsServer, url: &str, max: i32) -> Vec<(String, String)> {
    static ATTEMPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let attempt = ATTEMPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    s.sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(max)
        .visibility_timeout(30)
        .receive_request_attempt_id(format!("attempt-{attempt}"))
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.body.unwrap(), m.receipt_handle.unwrap()))
        .collect()
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

fn bodies(got: &[(String, String)]) -> Vec<&str> {
    got.iter().map(|(b, _)| b.as_str()).collect()
}

#[tokio::test]
async fn a_fifo_queue_reports_its_attributes_and_maps_onto_group_ordering() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "jobs.fifo", &[("ContentBasedDeduplication", "true")]).await;
    assert!(url.ends_with("/000000000000/jobs.fifo"));
    assert_eq!(s.attr(&url, "FifoQueue").await.as_deref(), Some("true"));
    assert_eq!(
        s.attr(&url, "ContentBasedDeduplication").await.as_deref(),
        Some("true")
    );
    assert_eq!(
        s.attr(&url, "DeduplicationScope").await.as_deref(),
        Some("queue")
    );
    assert_eq!(
        s.attr(&url, "FifoThroughputLimit").await.as_deref(),
        Some("perQueue")
    );
    s.sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(A::DeduplicationScope, "messageGroup")
        .attributes(A::FifoThroughputLimit, "perMessageGroupId")
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.attr(&url, "FifoThroughputLimit").await.as_deref(),
        Some("perMessageGroupId")
    );
    let native = s.native_get("/v1/queues/jobs.fifo").await;
    assert_eq!(native["policy"]["group_ordering"], true);
    assert_eq!(native["policy"]["duplicate_detection_window_ms"], 300_000);
    // Same attributes again: idempotent; and the URL is found by name.
    fifo(&s, "jobs.fifo", &[("ContentBasedDeduplication", "true")]).await;
    let got = s
        .sqs
        .get_queue_url()
        .queue_name("jobs.fifo")
        .send()
        .await
        .unwrap();
    assert_eq!(got.queue_url.as_deref(), Some(url.as_str()));
    // Standard queues know no FIFO attributes.
    let std = s.sqs_queue("plain", &[]).await;
    assert!(s.attr(&std, "FifoQueue").await.is_none());
    s.stop().await;
}

#[tokio::test]
async fn messages_of_one_group_come_in_order_across_receives_with_increasing_sequence_numbers() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "orders.fifo", &[]).await;
    let mut seqs = Vec::new();
    for (i, body) in ["m1", "m2", "m3"].iter().enumerate() {
        let (_, seq) = send(&s, &url, body, "g1", Some(&format!("d{i}"))).await;
        seqs.push(seq.parse::<u128>().unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    let first = recv(&s, &url, 1).await;
    assert_eq!(bodies(&first), ["m1"]);
    assert!(
        recv(&s, &url, 10).await.is_empty(),
        "the group is blocked while m1 is in flight"
    );
    delete(&s, &url, &first[0].1).await;
    let next = recv(&s, &url, 10).await;
    assert_eq!(bodies(&next), ["m2", "m3"], "in order, several per receive");
    // m2 made visible again comes before anything later of the group.
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&next[0].1)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    assert!(recv(&s, &url, 10).await.is_empty(), "m3 is still in flight");
    delete(&s, &url, &next[1].1).await;
    assert_eq!(bodies(&recv(&s, &url, 10).await), ["m2"]);

    // SequenceNumber and the FIFO system attributes on receive.
    let (id, seq) = send(&s, &url, "m4", "g2", Some("d4")).await;
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let m = &got[0];
    assert_eq!(m.message_id.as_deref(), Some(id.as_str()));
    let attrs = m.attributes.as_ref().unwrap();
    assert_eq!(attrs[&S::SequenceNumber], seq);
    assert_eq!(attrs[&S::MessageGroupId], "g2");
    assert_eq!(attrs[&S::MessageDeduplicationId], "d4");
    s.stop().await;
}

#[tokio::test]
async fn a_blocked_group_does_not_block_other_groups() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "groups.fifo", &[("ContentBasedDeduplication", "true")]).await;
    send(&s, &url, "a1", "A", None).await;
    send(&s, &url, "a2", "A", None).await;
    send(&s, &url, "b1", "B", None).await;
    send(&s, &url, "c1", "C", None).await;
    let a = recv(&s, &url, 1).await;
    assert_eq!(bodies(&a), ["a1"]);
    let others = recv(&s, &url, 10).await;
    assert_eq!(bodies(&others), ["b1", "c1"]);
    delete(&s, &url, &a[0].1).await;
    assert_eq!(bodies(&recv(&s, &url, 10).await), ["a2"]);
    s.stop().await;
}

#[tokio::test]
async fn content_based_deduplication_uses_the_body() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "cbd.fifo", &[("ContentBasedDeduplication", "true")]).await;
    let (id1, seq1) = send(&s, &url, "same body", "g", None).await;
    let (id2, seq2) = send(&s, &url, "same body", "g", None).await;
    assert_eq!(
        id1, id2,
        "a duplicate answers with the original's MessageId"
    );
    assert_eq!(seq1, seq2);
    send(&s, &url, "other body", "g", None).await;
    let got = recv(&s, &url, 10).await;
    assert_eq!(bodies(&got), ["same body", "other body"]);
    // The deduplication id is the body's SHA-256.
    let m = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert!(m.messages.is_none());
    s.stop().await;
}

#[tokio::test]
async fn explicit_deduplication_ids_inside_and_after_the_five_minute_window() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "dedup.fifo", &[]).await;
    let (id1, _) = send(&s, &url, "first", "g", Some("x")).await;
    s.advance_secs(299);
    let (id2, _) = send(&s, &url, "second, same id", "g", Some("x")).await;
    assert_eq!(id1, id2);
    let got = recv(&s, &url, 10).await;
    assert_eq!(bodies(&got), ["first"], "the duplicate was not enqueued");
    delete(&s, &url, &got[0].1).await;
    // Deleted, but still inside the window: still a duplicate.
    send(&s, &url, "third, same id", "g", Some("x")).await;
    assert!(recv(&s, &url, 10).await.is_empty());
    s.advance_secs(2); // 301 s after the first send
    send(&s, &url, "fourth, same id", "g", Some("x")).await;
    assert_eq!(bodies(&recv(&s, &url, 10).await), ["fourth, same id"]);
    s.stop().await;
}

#[tokio::test]
async fn deduplication_scope_message_group_keys_on_group_and_id() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "scoped.fifo", &[("DeduplicationScope", "messageGroup")]).await;
    send(&s, &url, "g1-x", "g1", Some("x")).await;
    send(&s, &url, "g2-x", "g2", Some("x")).await;
    send(&s, &url, "g1-x again", "g1", Some("x")).await;
    let mut got = bodies(&recv(&s, &url, 10).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    got.sort();
    assert_eq!(got, ["g1-x", "g2-x"]);

    // Under the queue scope the same id in another group is a duplicate.
    let q = fifo(&s, "unscoped.fifo", &[]).await;
    send(&s, &q, "g1-x", "g1", Some("x")).await;
    send(&s, &q, "g2-x", "g2", Some("x")).await;
    assert_eq!(bodies(&recv(&s, &q, 10).await), ["g1-x"]);
    s.stop().await;
}

#[tokio::test]
async fn fifo_sends_refuse_missing_or_invalid_parameters() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "strict.fifo", &[]).await;
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("b")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "MissingParameter");
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("b")
        .message_group_id("g")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(
        format!("{e:?}").contains("ContentBasedDeduplication"),
        "{e:?}"
    );
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("b")
        .message_group_id("g")
        .message_deduplication_id("d")
        .delay_seconds(5)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    // A deduplication id on a standard queue.
    let std = s.sqs_queue("std", &[]).await;
    let e = s
        .sqs
        .send_message()
        .queue_url(&std)
        .message_body("b")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    // FIFO attributes on a standard queue.
    let e = s
        .sqs
        .set_queue_attributes()
        .queue_url(&std)
        .attributes(A::ContentBasedDeduplication, "true")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidAttributeName");
    // A dead-letter queue of the other type.
    let std_arn = s.attr(&std, "QueueArn").await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{std_arn}","maxReceiveCount":"2"}}"#);
    let e = s
        .sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(A::RedrivePolicy, policy)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    // Nothing was enqueued.
    assert!(recv(&s, &url, 10).await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn send_message_batch_on_fifo_returns_sequence_numbers_and_dedups() {
    let s = SqsServer::start().await;
    let url = fifo(&s, "batch.fifo", &[("ContentBasedDeduplication", "true")]).await;
    let entry = |id: &str, body: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(body)
            .message_group_id("g")
            .build()
            .unwrap()
    };
    let out = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("a", "one"))
        .entries(entry("b", "two"))
        .entries(entry("c", "one"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.successful.len(), 3);
    let seq = |i: usize| {
        out.successful[i]
            .sequence_number
            .as_deref()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(seq(0) < seq(1));
    assert_eq!(seq(0), seq(2), "the repeat is the original");
    assert_eq!(bodies(&recv(&s, &url, 10).await), ["one", "two"]);
    s.stop().await;
}

#[tokio::test]
async fn a_fifo_queue_redrives_to_a_fifo_dead_letter_queue() {
    let s = SqsServer::start().await;
    let dlq = fifo(&s, "dead.fifo", &[]).await;
    let dlq_arn = s.attr(&dlq, "QueueArn").await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let src = fifo(&s, "work.fifo", &[("RedrivePolicy", &policy)]).await;
    let (id, _) = send(&s, &src, "poison", "g", Some("p")).await;
    send(&s, &src, "next", "g", Some("n")).await;
    let got = s
        .sqs
        .receive_message()
        .queue_url(&src)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got[0].body.as_deref(), Some("poison"));
    // Received once already: the next receive moves it and delivers the group's next one.
    let got = recv(&s, &src, 10).await;
    assert_eq!(bodies(&got), ["next"]);
    let moved = s
        .sqs
        .receive_message()
        .queue_url(&dlq)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(moved.len(), 1);
    let m = &moved[0];
    assert_eq!(m.message_id.as_deref(), Some(id.as_str()));
    let attrs = m.attributes.as_ref().unwrap();
    assert_eq!(attrs[&S::MessageGroupId], "g");
    assert_eq!(
        attrs[&S::DeadLetterQueueSourceArn],
        "arn:aws:sqs:us-east-1:000000000000:work.fifo"
    );
    s.stop().await;
}
