//! The query protocol: form-encoded requests, XML answers with the SQS namespace, request
//! ids, flattened lists and maps, and XML errors with the query code.

use crate::support::{TestServer, md5_hex};

const NS: &str = "xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"";

#[tokio::test]
async fn form_requests_get_xml_answers_in_the_query_shapes() {
    let s = TestServer::start().await;
    let (st, _, xml) = s
        .query(&[
            ("Action", "CreateQueue"),
            ("QueueName", "xq"),
            ("Attribute.1.Name", "VisibilityTimeout"),
            ("Attribute.1.Value", "45"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "a"),
        ])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(
        xml.contains(&format!("<CreateQueueResponse {NS}>")),
        "{xml}"
    );
    let url = format!("{}/000000000000/xq", s.sqs_url);
    assert!(
        xml.contains(&format!(
            "<CreateQueueResult><QueueUrl>{url}</QueueUrl></CreateQueueResult>"
        )),
        "{xml}"
    );
    assert!(xml.contains("<ResponseMetadata><RequestId>"), "{xml}");

    let (st, _, xml) = s
        .query(&[
            ("Action", "SendMessage"),
            ("QueueUrl", &url),
            ("MessageBody", "a <b> & c"),
            ("MessageAttribute.1.Name", "color"),
            ("MessageAttribute.1.Value.DataType", "String"),
            ("MessageAttribute.1.Value.StringValue", "red"),
        ])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(
        xml.contains(&format!(
            "<MD5OfMessageBody>{}</MD5OfMessageBody>",
            md5_hex(b"a <b> & c")
        )),
        "{xml}"
    );
    assert!(xml.contains("<MD5OfMessageAttributes>"), "{xml}");

    let (st, _, xml) = s
        .query(&[
            ("Action", "ReceiveMessage"),
            ("QueueUrl", &url),
            ("AttributeName.1", "All"),
            ("MessageAttributeName.1", "All"),
            ("MaxNumberOfMessages", "10"),
        ])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(xml.contains("<ReceiveMessageResult><Message>"), "{xml}");
    assert!(xml.contains("<Body>a &lt;b&gt; &amp; c</Body>"), "{xml}");
    assert!(
        xml.contains("<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>"),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<MessageAttribute><Name>color</Name><Value><DataType>String</DataType>\
             <StringValue>red</StringValue></Value></MessageAttribute>"
        ),
        "{xml}"
    );

    let (st, _, xml) = s
        .query(&[
            ("Action", "GetQueueAttributes"),
            ("QueueUrl", &url),
            ("AttributeName.1", "VisibilityTimeout"),
        ])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(
        xml.contains("<GetQueueAttributesResult><Attribute><Name>VisibilityTimeout</Name><Value>45</Value></Attribute></GetQueueAttributesResult>"),
        "{xml}"
    );
    let (_, _, xml) = s
        .query(&[("Action", "ListQueueTags"), ("QueueUrl", &url)])
        .await;
    assert!(
        xml.contains("<Tag><Key>team</Key><Value>a</Value></Tag>"),
        "{xml}"
    );
    let (_, _, xml) = s.query(&[("Action", "ListQueues")]).await;
    assert!(
        xml.contains(&format!("<ListQueuesResult><QueueUrl>{url}</QueueUrl>")),
        "{xml}"
    );

    let (st, _, xml) = s
        .query(&[
            ("Action", "SendMessageBatch"),
            ("QueueUrl", &url),
            ("SendMessageBatchRequestEntry.1.Id", "one"),
            ("SendMessageBatchRequestEntry.1.MessageBody", "1"),
            ("SendMessageBatchRequestEntry.2.Id", "two"),
            ("SendMessageBatchRequestEntry.2.MessageBody", "\u{1}"),
        ])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(
        xml.contains("<SendMessageBatchResultEntry><Id>one</Id>"),
        "{xml}"
    );
    assert!(
        xml.contains("<BatchResultErrorEntry><Code>InvalidMessageContents</Code><Id>two</Id>"),
        "{xml}"
    );

    let (st, _, xml) = s
        .query(&[("Action", "DeleteQueue"), ("QueueUrl", &url)])
        .await;
    assert_eq!(st, 200, "{xml}");
    assert!(
        xml.contains(&format!("<DeleteQueueResponse {NS}><ResponseMetadata>")),
        "{xml}"
    );
    s.stop().await;
}

#[tokio::test]
async fn query_errors_are_xml_with_the_query_code_and_header() {
    let s = TestServer::start().await;
    let (st, qe, xml) = s
        .query(&[("Action", "GetQueueUrl"), ("QueueName", "missing")])
        .await;
    assert_eq!(st, 400);
    assert_eq!(
        qe.as_deref(),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    assert!(xml.contains(&format!("<ErrorResponse {NS}>")), "{xml}");
    assert!(
        xml.contains(
            "<Error><Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code>"
        ),
        "{xml}"
    );
    assert!(xml.contains("<RequestId>"), "{xml}");
    let (st, qe, xml) = s.query(&[("Action", "AddPermission")]).await;
    assert_eq!(st, 400);
    assert_eq!(
        qe.as_deref(),
        Some("AWS.SimpleQueueService.UnsupportedOperation;Sender")
    );
    assert!(xml.contains("AddPermission"), "{xml}");
    let (st, _, xml) = s.query(&[("Action", "CreateQueue")]).await;
    assert_eq!(st, 400);
    assert!(xml.contains("<Code>MissingParameter</Code>"), "{xml}");
    s.stop().await;
}
