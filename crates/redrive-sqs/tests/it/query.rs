//! The query protocol: form-encoded requests, XML answers with the SQS namespace, request
//! ids, flattened lists and maps, and XML errors with the query code.

use crate::support::{SqsServer, answer, md5_hex};

const NS: &str = "xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"";

#[tokio::test]
async fn form_requests_get_xml_answers_in_the_query_shapes() {
    let s = SqsServer::start().await;
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
    let s = SqsServer::start().await;
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

#[tokio::test]
async fn state_changing_actions_are_refused_over_get() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("g", &[]).await;
    s.sqs
        .send_message()
        .queue_url(&url)
        .message_body("kept")
        .send()
        .await
        .unwrap();
    for action in [
        "PurgeQueue",
        "DeleteQueue",
        "ReceiveMessage",
        "SendMessage",
        "SendMessageBatch",
        "DeleteMessage",
        "DeleteMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
        "SetQueueAttributes",
        "TagQueue",
        "UntagQueue",
        "StartMessageMoveTask",
        "CancelMessageMoveTask",
        "CreateQueue",
    ] {
        let query = serde_urlencoded::to_string([
            ("Action", action),
            ("QueueUrl", url.as_str()),
            ("QueueName", "made-by-get"),
            ("MessageBody", "sent-by-get"),
            ("Attribute.1.Name", "DelaySeconds"),
            ("Attribute.1.Value", "5"),
        ])
        .unwrap();
        let r = s
            .http
            .get(format!("{}/?{query}", s.sqs_url))
            .send()
            .await
            .unwrap();
        let (st, qe, xml) = answer(r).await;
        assert_eq!(st, 400, "{action}: {xml}");
        assert_eq!(
            qe.as_deref(),
            Some("AWS.SimpleQueueService.UnsupportedOperation;Sender"),
            "{action}"
        );
        assert!(xml.contains("not accepted over GET"), "{action}: {xml}");
    }
    // Nothing changed: one queue, its one message still visible, its attributes as made.
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "1"
    );
    assert_eq!(s.attr(&url, "DelaySeconds").await.unwrap(), "0");
    // Read-only actions are served over GET.
    for query in [
        "Action=ListQueues".to_owned(),
        "Action=GetQueueUrl&QueueName=g".to_owned(),
        format!("Action=GetQueueAttributes&QueueUrl={url}&AttributeName.1=All"),
        format!("Action=ListQueueTags&QueueUrl={url}"),
        format!("Action=ListDeadLetterSourceQueues&QueueUrl={url}"),
    ] {
        let r = s
            .http
            .get(format!("{}/?{query}", s.sqs_url))
            .send()
            .await
            .unwrap();
        let (st, _, xml) = answer(r).await;
        assert_eq!(st, 200, "{query}: {xml}");
    }
    let (_, _, xml) = s.query(&[("Action", "ListQueues")]).await;
    assert_eq!(xml.matches("<QueueUrl>").count(), 1, "{xml}");
    s.stop().await;
}

#[tokio::test]
async fn posts_need_their_protocol_content_type() {
    let s = SqsServer::start().await;
    let form = "Action=CreateQueue&QueueName=typed";
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded; charset=latin1"),
    ] {
        let mut r = s.http.post(&s.sqs_url).body(form);
        if let Some(ct) = ct {
            r = r.header("content-type", ct);
        }
        let (st, qe, xml) = answer(r.send().await.unwrap()).await;
        assert_eq!(st, 400, "{ct:?}: {xml}");
        assert_eq!(
            qe.as_deref(),
            Some("InvalidParameterValue;Sender"),
            "{ct:?}"
        );
        assert!(xml.contains("Content-Type"), "{xml}");
    }
    let json = s
        .http
        .post(&s.sqs_url)
        .header("x-amz-target", "AmazonSQS.CreateQueue")
        .header("content-type", "application/json")
        .body(r#"{"QueueName":"typed"}"#)
        .send()
        .await
        .unwrap();
    let (st, _, text) = answer(json).await;
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("InvalidParameterValueException"), "{text}");
    let (_, _, xml) = s.query(&[("Action", "ListQueues")]).await;
    assert!(
        !xml.contains("<QueueUrl>"),
        "refused requests created nothing: {xml}"
    );
    // What boto3 sends for the query protocol.
    let r = s
        .http
        .post(&s.sqs_url)
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(form)
        .send()
        .await
        .unwrap();
    let (st, _, xml) = answer(r).await;
    assert_eq!(st, 200, "{xml}");
    s.stop().await;
}

#[tokio::test]
async fn bytes_that_are_not_utf8_are_refused_never_replaced() {
    let s = SqsServer::start().await;
    let url = s.sqs_queue("bytes", &[]).await;
    let post = |body: Vec<u8>| {
        s.http
            .post(&s.sqs_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let prefix = format!(
        "Action=SendMessage&QueueUrl={}&MessageBody=",
        url.replace(':', "%3A").replace('/', "%2F")
    );
    // Percent-encoded, and raw, bytes that are not UTF-8.
    for body in [
        [prefix.as_bytes(), b"ok%FF%FEok"].concat(),
        [prefix.as_bytes(), b"ok\xC3\x28ok"].concat(),
    ] {
        let (st, qe, xml) = answer(post(body).await.unwrap()).await;
        assert_eq!(st, 400, "{xml}");
        assert_eq!(
            qe.as_deref(),
            Some("InvalidMessageContents;Sender"),
            "{xml}"
        );
    }
    let batch = format!(
        "Action=SendMessageBatch&QueueUrl={url}&SendMessageBatchRequestEntry.1.Id=a&\
         SendMessageBatchRequestEntry.1.MessageBody=%C0%AF"
    );
    let (st, qe, xml) = answer(post(batch.into_bytes()).await.unwrap()).await;
    assert_eq!(st, 400, "{xml}");
    assert_eq!(
        qe.as_deref(),
        Some("InvalidMessageContents;Sender"),
        "{xml}"
    );
    // Any other parameter, here in a GET query string.
    let r = s
        .http
        .get(format!(
            "{}/?Action=GetQueueUrl&QueueName=bytes%FF",
            s.sqs_url
        ))
        .send()
        .await
        .unwrap();
    let (st, qe, xml) = answer(r).await;
    assert_eq!(st, 400, "{xml}");
    assert_eq!(qe.as_deref(), Some("InvalidParameterValue;Sender"), "{xml}");
    assert!(xml.contains("QueueName"), "{xml}");
    assert_eq!(
        s.attr(&url, "ApproximateNumberOfMessages").await.unwrap(),
        "0"
    );
    // Valid UTF-8, percent-encoded, is taken as sent.
    let (st, _, xml) = answer(
        post([prefix.as_bytes(), b"%C3%A9t%C3%A9"].concat())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st, 200, "{xml}");
    assert!(xml.contains(&md5_hex("été".as_bytes())), "{xml}");
    s.stop().await;
}
