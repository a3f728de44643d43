//! Batch actions: per-entry success and failure, and the checks of the batch as a whole.

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry as CvEntry, DeleteMessageBatchRequestEntry as DEntry,
    SendMessageBatchRequestEntry as SEntry,
};

use crate::support::{SqsServer, code, md5_hex};

fn entry(id: &str, body: &str) -> SEntry {
    SEntry::builder().id(id).message_body(body).build().unwrap()
}

#[tokio::test]
async fn send_delete_and_change_visibility_batches_report_each_entry() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("batch", &[]).await;
    let out = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("a", "one"))
        .entries(entry("b", "two"))
        .entries(entry("bad", "bell \u{7}"))
        .entries(
            SEntry::builder()
                .id("late")
                .message_body("later")
                .delay_seconds(30)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.successful.len(), 3);
    assert_eq!(out.successful[0].id, "a");
    assert_eq!(out.successful[0].md5_of_message_body, md5_hex(b"one"));
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].id, "bad");
    assert_eq!(out.failed[0].code, "InvalidMessageContents");
    assert!(out.failed[0].sender_fault);

    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got.len(), 2);
    let h0 = got[0].receipt_handle.clone().unwrap();
    let h1 = got[1].receipt_handle.clone().unwrap();
    let cv = s
        .sqs
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(
            CvEntry::builder()
                .id("x")
                .receipt_handle(&h0)
                .visibility_timeout(0)
                .build()
                .unwrap(),
        )
        .entries(
            CvEntry::builder()
                .id("y")
                .receipt_handle("garbage")
                .visibility_timeout(0)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(cv.successful.len(), 1);
    assert_eq!(cv.failed[0].id, "y");
    assert_eq!(cv.failed[0].code, "ReceiptHandleIsInvalid");
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "1"
    );

    let d = s
        .sqs
        .delete_message_batch()
        .queue_url(&url)
        .entries(
            DEntry::builder()
                .id("d1")
                .receipt_handle(&h1)
                .build()
                .unwrap(),
        )
        .entries(
            DEntry::builder()
                .id("d2")
                .receipt_handle("nope")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(d.successful.len(), 1);
    assert_eq!(d.successful[0].id, "d1");
    assert_eq!(d.failed[0].code, "ReceiptHandleIsInvalid");
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "0"
    );
    s.stop().await;
}

#[tokio::test]
async fn whole_batch_checks_refuse_and_change_nothing() {
    let s = SqsServer::start().await;
    let url = s
        .sqs_queue("checks", &[("MaximumMessageSize", "1024")])
        .await;
    let e = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("same", "1"))
        .entries(entry("same", "2"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_batch_entry_ids_not_distinct(), "{e:?}");
    let e = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![]))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_empty_batch_request(), "{e:?}");
    let mut req = s.sqs.send_message_batch().queue_url(&url);
    for i in 0..11 {
        req = req.entries(entry(&format!("e{i}"), "x"));
    }
    let e = req.send().await.unwrap_err().into_service_error();
    assert!(e.is_too_many_entries_in_batch_request(), "{e:?}");
    let big = "x".repeat(600);
    let e = s
        .sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(entry("p", &big))
        .entries(entry("q", &big))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_batch_request_too_long(), "{e:?}");
    let e = s
        .sqs
        .delete_message_batch()
        .queue_url(&url)
        .entries(
            DEntry::builder()
                .id("bad id!")
                .receipt_handle("h")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_invalid_batch_entry_id(), "{e:?}");
    assert_eq!(code(&e), "AWS.SimpleQueueService.InvalidBatchEntryId");
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "0"
    );
    s.stop().await;
}

/// Sends `body` to `url` and receives it with a 30 s visibility timeout: its handle.
async fn received(s: &SqsServer, url: &str, body: &str) -> String {
    s.sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
    let got = s
        .sqs
        .receive_message()
        .queue_url(url)
        .visibility_timeout(30)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    got[0].receipt_handle.clone().unwrap()
}

#[tokio::test]
async fn receipt_handles_are_refused_by_other_queues_and_when_made_up() {
    let s = SqsServer::start().await;
    let a = s.sqs_queue("handles-a", &[]).await;
    let b = s.sqs_queue("handles-b", &[]).await;
    let ha = received(&s, &a, "of a").await;
    let hb = received(&s, &b, "of b").await;
    // A well-formed lock token that was never issued.
    let made_up = "lk_0123456789abcdef0123456789abcdef";

    // One at a time: another queue's handle, a made-up one.
    for handle in [ha.as_str(), made_up] {
        let e = s
            .sqs
            .delete_message()
            .queue_url(&b)
            .receipt_handle(handle)
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert!(e.is_receipt_handle_is_invalid(), "{e:?}");
        let e = s
            .sqs
            .change_message_visibility()
            .queue_url(&b)
            .receipt_handle(handle)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(code(&e), "ReceiptHandleIsInvalid", "{e:?}");
    }
    // In batches: each such entry fails on its own.
    let d = s
        .sqs
        .delete_message_batch()
        .queue_url(&b)
        .entries(
            DEntry::builder()
                .id("other")
                .receipt_handle(&ha)
                .build()
                .unwrap(),
        )
        .entries(
            DEntry::builder()
                .id("made-up")
                .receipt_handle(made_up)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(d.successful.is_empty(), "{d:?}");
    let mut failed: Vec<(&str, &str)> = d
        .failed
        .iter()
        .map(|f| (f.id.as_str(), f.code.as_str()))
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            ("made-up", "ReceiptHandleIsInvalid"),
            ("other", "ReceiptHandleIsInvalid")
        ]
    );
    let cv = s
        .sqs
        .change_message_visibility_batch()
        .queue_url(&b)
        .entries(
            CvEntry::builder()
                .id("other")
                .receipt_handle(&ha)
                .visibility_timeout(0)
                .build()
                .unwrap(),
        )
        .entries(
            CvEntry::builder()
                .id("own")
                .receipt_handle(&hb)
                .visibility_timeout(60)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(cv.successful.len(), 1);
    assert_eq!(cv.successful[0].id, "own");
    assert_eq!(cv.failed[0].id, "other");
    assert_eq!(cv.failed[0].code, "ReceiptHandleIsInvalid");

    // Nothing was settled by the refused handles: a's message is still in flight.
    assert_eq!(
        s.attr(&a, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "1"
    );
    // The right queue takes its handle; afterwards the stale handle still succeeds.
    for _ in 0..2 {
        s.sqs
            .delete_message()
            .queue_url(&a)
            .receipt_handle(&ha)
            .send()
            .await
            .unwrap();
    }
    let d = s
        .sqs
        .delete_message_batch()
        .queue_url(&a)
        .entries(
            DEntry::builder()
                .id("stale")
                .receipt_handle(&ha)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(d.successful[0].id, "stale");
    assert_eq!(
        s.attr(&a, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "0"
    );
    s.stop().await;
}
