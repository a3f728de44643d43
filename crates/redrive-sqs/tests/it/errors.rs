//! Bad input gets the AWS error clients parse, and changes nothing.

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName as A};

use crate::support::{SqsServer, code};

#[tokio::test]
async fn unknown_queues_are_queue_does_not_exist() {
    let s = SqsServer::start().await;
    let e = s
        .sqs
        .get_queue_url()
        .queue_name("nope")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_does_not_exist(), "{e:?}");
    assert_eq!(code(&e), "AWS.SimpleQueueService.NonExistentQueue");
    let url = format!("{}/000000000000/nope", s.sqs_url);
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_does_not_exist(), "{e:?}");
    let e = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_does_not_exist(), "{e:?}");
    let e = s
        .sqs
        .delete_queue()
        .queue_url(&url)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_queue_does_not_exist(), "{e:?}");
    s.stop().await;
}

#[tokio::test]
async fn invalid_attribute_names_and_values_are_refused() {
    let s = SqsServer::start().await;
    let e = s
        .sqs
        .create_queue()
        .queue_name("q")
        .attributes(A::from("Bogus"), "1")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidAttributeName");
    for (name, value) in [
        (A::VisibilityTimeout, "43201"),
        (A::VisibilityTimeout, "abc"),
        (A::DelaySeconds, "901"),
        (A::MaximumMessageSize, "1023"),
        (A::MessageRetentionPeriod, "59"),
        (A::ReceiveMessageWaitTimeSeconds, "21"),
    ] {
        let e = s
            .sqs
            .create_queue()
            .queue_name("q")
            .attributes(name.clone(), value)
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(code(&e), "InvalidAttributeValue", "{name:?}={value}");
    }
    let e = s
        .sqs
        .create_queue()
        .queue_name("q")
        .attributes(
            A::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:missing","maxReceiveCount":3}"#,
        )
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .create_queue()
        .queue_name("q")
        .attributes(
            A::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:q","maxReceiveCount":1001}"#,
        )
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .create_queue()
        .queue_name("bad.name")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .create_queue()
        .queue_name("jobs.fifo")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(
        code(&e),
        "InvalidParameterValue",
        "a .fifo name needs FifoQueue=true"
    );
    let e = s
        .sqs
        .create_queue()
        .queue_name("jobs")
        .attributes(A::FifoQueue, "true")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(
        code(&e),
        "InvalidParameterValue",
        "FifoQueue=true needs a .fifo name"
    );
    // Nothing was created.
    let list = s.sqs.list_queues().send().await.unwrap();
    assert!(list.queue_urls.unwrap_or_default().is_empty());
    let url = s.sqs_queue("q", &[]).await;
    let e = s
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::from("Nope"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidAttributeName");
    s.stop().await;
}

#[tokio::test]
async fn bad_messages_are_refused_with_their_codes() {
    let s = SqsServer::start().await;
    let url = s
        .sqs_queue("small", &[("MaximumMessageSize", "1024")])
        .await;
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1025))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    // Attributes count towards the size.
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1000))
        .message_attributes(
            "a",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("y".repeat(100))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("nul \u{0}")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_invalid_message_contents(), "{e:?}");
    let e = s
        .sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .delay_seconds(901)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let mut req = s.sqs.send_message().queue_url(&url).message_body("x");
    for i in 0..11 {
        req = req.message_attributes(
            format!("a{i}"),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("v")
                .build()
                .unwrap(),
        );
    }
    let e = req.send().await.unwrap_err().into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    for (name, ty, val) in [
        ("AWS.reserved", "String", "v"),
        ("n", "Number", "not a number"),
        ("t", "Strange", "v"),
    ] {
        let e = s
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .message_attributes(
                name,
                MessageAttributeValue::builder()
                    .data_type(ty)
                    .string_value(val)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(code(&e), "InvalidParameterValue", "{name} {ty} {val}");
    }
    let e = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(11)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(21)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle("not-a-handle")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(e.is_receipt_handle_is_invalid(), "{e:?}");
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "0"
    );
    s.stop().await;
}
