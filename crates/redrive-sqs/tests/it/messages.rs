//! Messages: send and receive with attributes and MD5s, system attributes, visibility
//! timeouts, delays, long polling, retention, and the native API on the same queue.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName as S, MessageSystemAttributeNameForSends,
    MessageSystemAttributeValue,
};
use redrive_testkit::T0;
use serde_json::json;

use crate::support::{SqsServer, TestValue, aws_attributes_md5, md5_hex};

fn string_attr(ty: &str, v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(ty)
        .string_value(v)
        .build()
        .unwrap()
}

#[tokio::test]
async fn send_and_receive_carry_attributes_and_the_aws_md5s() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("md5", &[]).await;
    let body = "héllo wörld \u{1F600}\r\n";
    let bin: &[u8] = &[0, 1, 2, 255];
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1";
    let sent = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body(body)
        .message_attributes("color", string_attr("String", "red"))
        .message_attributes("count", string_attr("Number.int", "42"))
        .message_attributes(
            "blob",
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(Blob::new(bin))
                .build()
                .unwrap(),
        )
        .message_system_attributes(
            MessageSystemAttributeNameForSends::AwsTraceHeader,
            MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(trace)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let want_attrs = aws_attributes_md5(&[
        ("color", "String", TestValue::S("red")),
        ("count", "Number.int", TestValue::S("42")),
        ("blob", "Binary", TestValue::B(bin)),
    ]);
    assert_eq!(sent.md5_of_message_body.unwrap(), md5_hex(body.as_bytes()));
    assert_eq!(sent.md5_of_message_attributes.unwrap(), want_attrs);
    assert_eq!(
        sent.md5_of_message_system_attributes.unwrap(),
        aws_attributes_md5(&[("AWSTraceHeader", "String", TestValue::S(trace))])
    );

    s.advance_secs(2);
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.body.as_deref(), Some(body));
    assert_eq!(m.message_id, sent.message_id);
    assert_eq!(m.md5_of_body.as_deref().unwrap(), md5_hex(body.as_bytes()));
    assert_eq!(m.md5_of_message_attributes.as_deref().unwrap(), want_attrs);
    let attrs = m.message_attributes.as_ref().unwrap();
    assert_eq!(attrs["blob"].binary_value.as_ref().unwrap().as_ref(), bin);
    assert_eq!(attrs["count"].data_type(), "Number.int");
    let sys = m.attributes.as_ref().unwrap();
    assert_eq!(sys[&S::ApproximateReceiveCount], "1");
    assert_eq!(sys[&S::SentTimestamp], T0.0.to_string());
    assert_eq!(
        sys[&S::ApproximateFirstReceiveTimestamp],
        (T0.0 + 2000).to_string()
    );
    assert_eq!(sys[&S::AwsTraceHeader], trace);
    assert_eq!(sys[&S::SenderId], "AKIDTEST");

    // A selection by name and by prefix: the MD5 covers what is returned.
    s.advance_secs(31);
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("col.*")
        .message_attribute_names("count")
        .message_system_attribute_names(S::ApproximateReceiveCount)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let m = &got[0];
    assert_eq!(m.message_attributes.as_ref().unwrap().len(), 1);
    assert_eq!(
        m.md5_of_message_attributes.as_deref().unwrap(),
        aws_attributes_md5(&[("count", "Number.int", TestValue::S("42"))])
    );
    let sys = m.attributes.as_ref().unwrap();
    assert_eq!(sys.len(), 1);
    assert_eq!(sys[&S::ApproximateReceiveCount], "2");
    s.stop().await;
}

#[tokio::test]
async fn visibility_timeout_hides_and_change_visibility_moves_it() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("vis", &[("VisibilityTimeout", "10")]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let receive = |vt: Option<i32>| {
        let mut r = s
            .sqs
            .receive_message()
            .queue_url(&url)
            .message_system_attribute_names(S::ApproximateReceiveCount);
        if let Some(v) = vt {
            r = r.visibility_timeout(v);
        }
        async move { r.send().await.unwrap().messages.unwrap_or_default() }
    };
    let first = receive(None).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "1"
    );
    assert!(receive(None).await.is_empty());
    s.advance_secs(10);
    let second = receive(Some(3_600)).await;
    assert_eq!(second.len(), 1);
    assert_eq!(
        second[0].attributes.as_ref().unwrap()[&S::ApproximateReceiveCount],
        "2"
    );
    // An hour-long visibility timeout: beyond the native 5-minute lock range.
    s.advance_secs(3_000);
    assert!(receive(None).await.is_empty());
    let handle = second[0].receipt_handle.clone().unwrap();
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let third = receive(None).await;
    assert_eq!(third.len(), 1);
    assert_eq!(
        third[0].attributes.as_ref().unwrap()[&S::ApproximateReceiveCount],
        "3"
    );
    // Extending it keeps it hidden past the original timeout.
    let handle = third[0].receipt_handle.clone().unwrap();
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(100)
        .send()
        .await
        .unwrap();
    s.advance_secs(50);
    assert!(receive(None).await.is_empty());
    // Delete with the current handle removes it.
    s.sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&handle)
        .send()
        .await
        .unwrap();
    s.advance_secs(100);
    assert!(receive(None).await.is_empty());
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "0"
    );
    // A stale handle deletes nothing and is not an error; a message no longer in flight
    // cannot change visibility.
    s.sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&handle)
        .send()
        .await
        .unwrap();
    let e = s
        .sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(5)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(
        crate::support::code(&e),
        "AWS.SimpleQueueService.MessageNotInflight"
    );
    s.stop().await;
}

#[tokio::test]
async fn delays_per_queue_and_per_message_use_the_scheduled_time() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("delayed", &[("DelaySeconds", "5")]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("queue delay")
        .send()
        .await
        .unwrap();
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("message delay")
        .delay_seconds(20)
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesDelayed")
            .await
            .unwrap(),
        "2"
    );
    let recv = || async {
        s.sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    };
    assert!(recv().await.is_empty());
    s.advance_secs(5);
    let got = recv().await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.as_deref(), Some("queue delay"));
    s.advance_secs(15);
    let got = recv().await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.as_deref(), Some("message delay"));
    s.stop().await;
}

#[tokio::test]
async fn long_polls_are_woken_by_a_send_or_end_at_the_wait_time() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("poll", &[]).await;
    let before = s.clock().sleepers();
    let client = s.sqs.clone();
    let u = url.clone();
    let waiting = tokio::spawn(async move {
        client
            .receive_message()
            .queue_url(&u)
            .wait_time_seconds(20)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    });
    s.until_parked(before).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("wake")
        .send()
        .await
        .unwrap();
    let got = waiting.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body.as_deref(), Some("wake"));

    // The queue's ReceiveMessageWaitTimeSeconds is the default wait.
    s.sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::ReceiveMessageWaitTimeSeconds,
            "20",
        )
        .send()
        .await
        .unwrap();
    let client = s.sqs.clone();
    let u = url.clone();
    let waiting = tokio::spawn(async move {
        client
            .receive_message()
            .queue_url(&u)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    });
    // Parked by its own deadline, not by a count of sleepers that a worker sleeping
    // again also grows: advancing before the poll sleeps would leave it waiting forever.
    s.until_parked_at(T0.plus_millis(20_000)).await;
    s.advance_secs(20);
    assert!(waiting.await.unwrap().is_empty());
    s.stop().await;
}

#[tokio::test]
async fn messages_expire_after_the_retention_period() {
    let s = SqsServer::start().await;
    let url = s
        .sqs_queue("short", &[("MessageRetentionPeriod", "60")])
        .await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("old")
        .send()
        .await
        .unwrap();
    s.advance_secs(61);
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert!(got.is_empty());
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "0"
    );
    s.stop().await;
}

#[tokio::test]
async fn the_native_api_and_sqs_share_queues_and_messages() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("shared", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("from sqs")
        .message_attributes("k", string_attr("String", "v"))
        .send()
        .await
        .unwrap();
    let r = s
        .http
        .post(format!("{}/v1/queues/shared/receive", s.url))
        .json(&json!({"max_messages": 1}))
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    let m = &v["messages"][0];
    assert_eq!(m["body"], "from sqs");
    let stored = m["properties"][redrive_sqs::ATTRIBUTES_PROPERTY]
        .as_str()
        .unwrap();
    assert!(stored.contains("\"name\":\"k\""), "{stored}");
    let r = s
        .http
        .post(format!("{}/v1/queues/shared/messages", s.url))
        .json(&json!({"body": "from native", "properties": {"n": 7, "flag": true}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let m = &got[0];
    assert_eq!(m.body.as_deref(), Some("from native"));
    let a = m.message_attributes.as_ref().unwrap();
    assert_eq!(a["n"].data_type(), "Number");
    assert_eq!(a["n"].string_value(), Some("7"));
    assert_eq!(a["flag"].string_value(), Some("true"));
    assert_eq!(
        m.md5_of_message_attributes.as_deref().unwrap(),
        aws_attributes_md5(&[
            ("flag", "String", TestValue::S("true")),
            ("n", "Number", TestValue::S("7")),
        ])
    );
    s.stop().await;
}

#[tokio::test]
async fn visibility_is_capped_at_12_hours_from_the_receive() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("capped", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let receive = || {
        let r = s
            .sqs
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(60);
        async move { r.send().await.unwrap().messages.unwrap_or_default() }
    };
    let got = receive().await;
    assert_eq!(got.len(), 1);
    let handle = got[0].receipt_handle.clone().unwrap();
    let change = |secs: i32| {
        let r = s
            .sqs
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(&handle)
            .visibility_timeout(secs);
        async move { r.send().await.map_err(|e| e.into_service_error()) }
    };
    // Right after the receive the whole 12 hours are allowed, exactly.
    change(43_200).await.unwrap();
    // 1000 s later the allowance is what remains of the 12 hours since the receive.
    s.advance_secs(1_000);
    change(42_200).await.unwrap();
    let e = change(42_201).await.unwrap_err();
    assert_eq!(crate::support::code(&e), "InvalidParameterValue");
    assert!(
        e.message()
            .unwrap_or_default()
            .contains("VisibilityTimeout"),
        "{e:?}"
    );
    // A refused change changes nothing: the message stays hidden for the 30 s set last.
    change(30).await.unwrap();
    assert_eq!(
        crate::support::code(&change(42_201).await.unwrap_err()),
        "InvalidParameterValue"
    );
    s.advance_secs(29);
    assert!(receive().await.is_empty());
    s.advance_secs(2);
    let again = receive().await;
    assert_eq!(
        again.len(),
        1,
        "visible once the last accepted timeout ran out"
    );
    // The cap counts from the latest receive: a new receive has the 12 hours again.
    let handle = again[0].receipt_handle.clone().unwrap();
    s.sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(&handle)
        .visibility_timeout(43_200)
        .send()
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test]
async fn a_visibility_batch_refuses_only_the_entries_past_the_cap() {
    use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry as CvEntry;
    let s = SqsServer::start().await;
    let url = s.sqs_queue("capped-batch", &[]).await;
    for body in ["a", "b"] {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .visibility_timeout(200)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got.len(), 2);
    s.advance_secs(100);
    let entry = |id: &str, i: usize, secs: i32| {
        CvEntry::builder()
            .id(id)
            .receipt_handle(got[i].receipt_handle.clone().unwrap())
            .visibility_timeout(secs)
            .build()
            .unwrap()
    };
    let out = s
        .sqs
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(entry("exact", 0, 43_100))
        .entries(entry("over", 1, 43_101))
        .send()
        .await
        .unwrap();
    assert_eq!(out.successful.len(), 1);
    assert_eq!(out.successful[0].id, "exact");
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].id, "over");
    assert_eq!(out.failed[0].code, "InvalidParameterValue");
    assert!(out.failed[0].sender_fault);
    // The refused entry kept its first timeout: visible again 200 s after the receive.
    s.advance_secs(99);
    let hidden = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert!(hidden.is_empty());
    s.advance_secs(1);
    let back = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].body, got[1].body);
    s.stop().await;
}
