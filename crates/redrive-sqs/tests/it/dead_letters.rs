//! Redrive to the dead-letter queue after maxReceiveCount, with the evidence record visible
//! through the native dead-letter API, and ListDeadLetterSourceQueues.

use aws_sdk_sqs::types::{MessageSystemAttributeName as S, QueueAttributeName as A};

use crate::support::SqsServer;

#[tokio::test]
async fn a_message_received_more_than_max_receive_count_times_moves_to_the_dlq() {
    let s = SqsServer::start().await;
    let dlq = s.sqs_queue("dlq", &[]).await;
    let dlq_arn = s.attr(&dlq, "QueueArn").await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"2"}}"#);
    let src = s.sqs_queue("work", &[("RedrivePolicy", &policy)]).await;
    let redrive = s.attr(&src, "RedrivePolicy").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&redrive).unwrap();
    assert_eq!(v["deadLetterTargetArn"], dlq_arn.as_str());
    assert_eq!(v["maxReceiveCount"], 2);
    let native = s.native_get("/v1/queues/work").await;
    assert_eq!(native["policy"]["max_delivery_count"], 2);
    assert_eq!(native["policy"]["dead_letter_queue"], "dlq");

    let id = s
        .sqs
        .send_message()
        .queue_url(&src)
        .message_body("poison")
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap();
    let mut receives = 0;
    for _ in 0..3 {
        let got = s
            .sqs
            .receive_message()
            .queue_url(&src)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        receives += got.len();
    }
    assert_eq!(receives, 2);
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
    assert_eq!(m.body.as_deref(), Some("poison"));
    assert_eq!(
        m.attributes.as_ref().unwrap()[&S::DeadLetterQueueSourceArn],
        "arn:aws:sqs:us-east-1:000000000000:work"
    );
    // The dead-letter properties are not message attributes.
    assert!(m.message_attributes.is_none());

    // The evidence record stays with the source queue (archived, pointing at the copy).
    let recs = s
        .native_get("/v1/queues/work/dead-letters?area=archived")
        .await;
    let r = &recs["dead_letters"][0];
    assert_eq!(r["message_id"], id.as_str());
    assert_eq!(r["reason"], "MaxDeliveryCountExceeded");
    assert_eq!(r["delivery_count"], 2);
    assert_eq!(r["delivery_count_quality"], "exact");
    assert_eq!(r["routed_by"], "broker");
    assert_eq!(r["forwarded_to_queue"], "dlq");

    let sources = s
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls, vec![src.clone()]);

    // Removing the redrive policy restores "no receive limit".
    s.sqs
        .set_queue_attributes()
        .queue_url(&src)
        .attributes(A::RedrivePolicy, "")
        .send()
        .await
        .unwrap();
    assert!(s.attr(&src, "RedrivePolicy").await.is_none());
    let native = s.native_get("/v1/queues/work").await;
    assert_eq!(native["policy"]["max_delivery_count"], 10_000);
    s.stop().await;
}
