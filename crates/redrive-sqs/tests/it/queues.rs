//! Queue actions: create (idempotent), URL, list with paging, delete, attributes, tags, purge.

use aws_sdk_sqs::types::QueueAttributeName as A;
use redrive_testkit::T0;

use crate::support::{SqsServer, code};

#[tokio::test]
async fn create_is_idempotent_with_identical_attributes_and_conflicts_otherwise() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("orders", &[("VisibilityTimeout", "40")]).await;
    assert_eq!(url, format!("{}/000000000000/orders", s.sqs_url));
    assert_eq!(
        s.sqs_queue("orders", &[("VisibilityTimeout", "40")]).await,
        url
    );
    assert_eq!(s.sqs_queue("orders", &[]).await, url);
    let e = s
        .sqs
        .create_queue()
        .queue_name("orders")
        .attributes(A::VisibilityTimeout, "41")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_name_exists(), "{e:?}");
    assert_eq!(code(&e), "QueueAlreadyExists");
    let got = s
        .sqs
        .get_queue_url()
        .queue_name("orders")
        .send()
        .await
        .unwrap();
    assert_eq!(got.queue_url.unwrap(), url);
    // The SQS queue is the native queue.
    let native = s.native_get("/v1/queues/orders").await;
    assert_eq!(native["policy"]["lock_duration_ms"], 40_000);
    assert_eq!(native["policy"]["sqs"]["visibility_timeout_s"], 40);
    s.stop().await;
}

#[tokio::test]
async fn list_filters_by_prefix_and_pages() {
    let s = SqsServer::start().await;
    for n in ["a1", "a2", "a3", "b1"] {
        s.sqs_queue(n, &[]).await;
    }
    let all = s.sqs.list_queues().send().await.unwrap();
    assert_eq!(all.queue_urls.unwrap().len(), 4);
    assert!(all.next_token.is_none());
    let p1 = s
        .sqs
        .list_queues()
        .queue_name_prefix("a")
        .max_results(2)
        .send()
        .await
        .unwrap();
    let urls = p1.queue_urls.unwrap();
    assert_eq!(urls.len(), 2);
    assert!(urls[0].ends_with("/a1") && urls[1].ends_with("/a2"));
    let p2 = s
        .sqs
        .list_queues()
        .queue_name_prefix("a")
        .max_results(2)
        .next_token(p1.next_token.unwrap())
        .send()
        .await
        .unwrap();
    let urls = p2.queue_urls.unwrap();
    assert_eq!(urls.len(), 1);
    assert!(urls[0].ends_with("/a3"));
    assert!(p2.next_token.is_none());
    let none = s
        .sqs
        .list_queues()
        .queue_name_prefix("zz")
        .send()
        .await
        .unwrap();
    assert!(none.queue_urls.unwrap_or_default().is_empty());
    s.stop().await;
}

#[tokio::test]
async fn delete_removes_a_non_empty_queue() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("gone", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap();
    s.sqs.delete_queue().queue_url(&url).send().await.unwrap();
    let e = s
        .sqs
        .get_queue_url()
        .queue_name("gone")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_does_not_exist(), "{e:?}");
    s.stop().await;
}

#[tokio::test]
async fn attributes_have_sqs_defaults_counts_and_whole_second_timestamps() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("attrs", &[]).await;
    let out = s
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::All)
        .send()
        .await
        .unwrap();
    let a = out.attributes.unwrap();
    let get = |k: A| a.get(&k).cloned().unwrap_or_default();
    assert_eq!(get(A::VisibilityTimeout), "30");
    assert_eq!(get(A::DelaySeconds), "0");
    assert_eq!(get(A::MaximumMessageSize), "1048576");
    assert_eq!(get(A::MessageRetentionPeriod), "345600");
    assert_eq!(get(A::ReceiveMessageWaitTimeSeconds), "0");
    assert_eq!(get(A::ApproximateNumberOfMessages), "0");
    assert_eq!(get(A::QueueArn), "arn:aws:sqs:us-east-1:000000000000:attrs");
    assert_eq!(get(A::CreatedTimestamp), (T0.0 / 1000).to_string());
    assert_eq!(get(A::LastModifiedTimestamp), (T0.0 / 1000).to_string());
    assert!(!a.contains_key(&A::RedrivePolicy));

    // Named attributes only.
    let out = s
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::DelaySeconds)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes.unwrap().len(), 1);

    s.advance_secs(5);
    s.sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(A::VisibilityTimeout, "3600")
        .attributes(A::DelaySeconds, "5")
        .attributes(A::MessageRetentionPeriod, "120")
        .attributes(A::MaximumMessageSize, "2048")
        .attributes(A::ReceiveMessageWaitTimeSeconds, "20")
        .send()
        .await
        .unwrap();
    assert_eq!(s.attr(&url, "VisibilityTimeout").await.unwrap(), "3600");
    assert_eq!(s.attr(&url, "DelaySeconds").await.unwrap(), "5");
    assert_eq!(s.attr(&url, "MessageRetentionPeriod").await.unwrap(), "120");
    assert_eq!(s.attr(&url, "MaximumMessageSize").await.unwrap(), "2048");
    assert_eq!(
        s.attr(&url, "LastModifiedTimestamp").await.unwrap(),
        (T0.0 / 1000 + 5).to_string()
    );
    let native = s.native_get("/v1/queues/attrs").await;
    assert_eq!(native["policy"]["max_message_size"], 2048);
    assert_eq!(native["policy"]["default_ttl_ms"], 120_000);
    // 3600 s does not fit the native lock range: the native default stays.
    assert_eq!(native["policy"]["lock_duration_ms"], 30_000);
    s.stop().await;
}

#[tokio::test]
async fn tags_are_added_listed_and_removed() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("tagged", &[]).await;
    s.sqs
        .tag_queue()
        .queue_url(&url)
        .tags("team", "payments")
        .tags("env", "test")
        .send()
        .await
        .unwrap();
    let tags = s
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags.len(), 2);
    assert_eq!(tags["team"], "payments");
    s.sqs
        .untag_queue()
        .queue_url(&url)
        .tag_keys("env")
        .send()
        .await
        .unwrap();
    let tags = s
        .sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap_or_default();
    assert_eq!(tags.len(), 1);
    // Tags given at creation.
    s.sqs
        .create_queue()
        .queue_name("tagged2")
        .tags("k", "v")
        .send()
        .await
        .unwrap();
    let url2 = format!("{}/000000000000/tagged2", s.sqs_url);
    let tags = s
        .sqs
        .list_queue_tags()
        .queue_url(&url2)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags["k"], "v");
    s.stop().await;
}

#[tokio::test]
async fn purge_empties_the_queue_once_per_sixty_seconds_of_the_broker_clock() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("purged", &[]).await;
    for b in ["1", "2", "3"] {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(b)
            .send()
            .await
            .unwrap();
    }
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("later")
        .delay_seconds(60)
        .send()
        .await
        .unwrap();
    s.sqs.purge_queue().queue_url(&url).send().await.unwrap();
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "0"
    );
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesDelayed")
            .await
            .unwrap(),
        "0"
    );
    let e = s
        .sqs
        .purge_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_purge_queue_in_progress(), "{e:?}");
    s.advance_secs(59);
    assert!(s.sqs.purge_queue().queue_url(&url).send().await.is_err());
    s.advance_secs(1);
    s.sqs.purge_queue().queue_url(&url).send().await.unwrap();
    s.stop().await;
}

/// SQS: PurgeQueue "deletes all messages in a queue … including messages in flight". The
/// receiver's handle of a purged message is then stale: a delete with it deletes nothing
/// and succeeds (as with any old handle on AWS), and its visibility cannot change.
#[tokio::test]
async fn purge_removes_messages_in_flight_and_their_handles_go_stale() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("inflight", &[]).await;
    for b in ["taken", "waiting"] {
        s.sqs
            .send_message()
            .queue_url(&url)
            .message_body(b)
            .send()
            .await
            .unwrap();
    }
    let got = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(600)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body(), Some("taken"));
    let handle = got[0].receipt_handle().unwrap().to_owned();
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessagesNotVisible")
            .await
            .unwrap(),
        "1"
    );

    s.sqs.purge_queue().queue_url(&url).send().await.unwrap();
    for attr in [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    ] {
        assert_eq!(s.attr(&url, attr).await.unwrap(), "0", "{attr}");
    }
    // A message sent after the purge stays, whatever the old handle does.
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("after")
        .send()
        .await
        .unwrap();
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
        .visibility_timeout(0)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "AWS.SimpleQueueService.MessageNotInflight");
    let left = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    let bodies: Vec<_> = left.iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["after"], "only the message sent after the purge");
    s.stop().await;
}

#[tokio::test]
async fn set_queue_attributes_keeps_the_auto_replay_policy() {
    let s = SqsServer::start().await;
    s.queue(
        "kept",
        serde_json::json!({"auto_replay": {"enabled": true, "max_replay_attempts": 4}}),
    )
    .await;
    let url = s
        .sqs
        .get_queue_url()
        .queue_name("kept")
        .send()
        .await
        .unwrap();
    s.sqs
        .set_queue_attributes()
        .queue_url(url.queue_url.unwrap())
        .attributes(A::VisibilityTimeout, "120")
        .send()
        .await
        .unwrap();
    let native = s.native_get("/v1/queues/kept").await;
    assert_eq!(native["policy"]["lock_duration_ms"], 120_000);
    assert_eq!(native["policy"]["auto_replay"]["enabled"], true);
    assert_eq!(native["policy"]["auto_replay"]["max_replay_attempts"], 4);
    s.stop().await;
}

/// A JSON-protocol request to the endpoint with a `Host` header of the caller's choice.
async fn with_host(s: &SqsServer, host: &str, action: &str, input: serde_json::Value) -> String {
    let r = s
        .http
        .post(format!("{}/", s.sqs_url))
        .header("host", host)
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", format!("AmazonSQS.{action}"))
        .body(input.to_string())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{action}: {}", r.status());
    r.text().await.unwrap()
}

#[tokio::test]
async fn queue_urls_name_the_configured_address_whatever_the_host_header_says() {
    use serde_json::json;
    let s = SqsServer::start_with(redrive_sqs::SqsConfig {
        public_url: "https://sqs.example.com/".to_owned(),
        ..redrive_sqs::SqsConfig::default()
    })
    .await;
    let forged = "attacker.example:9324";
    let want = "https://sqs.example.com/000000000000/orders";
    let created = with_host(&s, forged, "CreateQueue", json!({"QueueName": "orders"})).await;
    let got = with_host(&s, forged, "GetQueueUrl", json!({"QueueName": "orders"})).await;
    let listed = with_host(&s, forged, "ListQueues", json!({})).await;
    for text in [&created, &got, &listed] {
        assert!(text.contains(want), "{text}");
        assert!(!text.contains("attacker"), "{text}");
    }
    s.stop().await;

    // By default the URLs name the address the endpoint listens on.
    let s = SqsServer::start().await;
    let created = with_host(&s, forged, "CreateQueue", json!({"QueueName": "orders"})).await;
    assert!(
        created.contains(&format!("{}/000000000000/orders", s.sqs_url)),
        "{created}"
    );
    assert!(!created.contains("attacker"), "{created}");
    s.stop().await;
}
