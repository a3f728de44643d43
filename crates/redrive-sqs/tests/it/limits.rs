//! Bounds checked before a request is parsed: parameter count, name length and depth in
//! the query protocol, the body size in both protocols. A request past a bound gets an
//! AWS-shaped error and the server keeps serving.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{SqsServer, answer};

/// A 10 KB request whose one parameter name has 5001 dot-separated parts.
fn deep_form() -> String {
    format!("Action=ListQueues&{}b=1", "a.".repeat(5000))
}

async fn serving(s: &SqsServer) {
    s.sqs
        .create_queue()
        .queue_name("alive")
        .send()
        .await
        .unwrap();
    let urls = s
        .sqs
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls
        .unwrap();
    assert_eq!(urls.len(), 1);
}

fn assert_refused(a: &(u16, Option<String>, String)) {
    assert_eq!(a.0, 400, "{}", a.2);
    assert_eq!(
        a.1.as_deref(),
        Some("InvalidParameterValue;Sender"),
        "{}",
        a.2
    );
    assert!(a.2.contains("<ErrorResponse"), "{}", a.2);
    assert!(
        a.2.contains("<Code>InvalidParameterValue</Code>"),
        "{}",
        a.2
    );
}

#[tokio::test]
async fn deeply_nested_names_are_refused_by_post_and_get_and_the_server_keeps_serving() {
    let s = SqsServer::start().await;
    let post = s
        .http
        .post(&s.sqs_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(deep_form())
        .send()
        .await
        .unwrap();
    let a = answer(post).await;
    assert_refused(&a);
    assert!(
        a.2.contains("A parameter name is longer than 256 bytes"),
        "{}",
        a.2
    );
    let get = s
        .http
        .get(format!("{}/?{}", s.sqs_url, deep_form()))
        .send()
        .await
        .unwrap();
    assert_refused(&answer(get).await);
    // The JSON protocol: serde_json's nesting limit answers, in the JSON error shape.
    let json = s
        .http
        .post(&s.sqs_url)
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .header("content-type", "application/x-amz-json-1.0")
        .body("[".repeat(100_000))
        .send()
        .await
        .unwrap();
    let (st, _, text) = answer(json).await;
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("InvalidParameterValueException"), "{text}");
    serving(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn parameter_count_name_length_and_depth_are_bounded() {
    let s = SqsServer::start().await;
    let many = |n: usize| {
        let mut f = "Action=ListQueues".to_owned();
        for i in 1..n {
            f.push_str(&format!("&P{i}=x"));
        }
        f
    };
    let post = |form: String| {
        s.http
            .post(&s.sqs_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
    };
    let (st, _, text) = answer(post(many(2_000)).await.unwrap()).await;
    assert_eq!(st, 200, "{text}");
    let a = answer(post(many(2_001)).await.unwrap()).await;
    assert_refused(&a);
    assert!(a.2.contains("more than 2000 parameters"), "{}", a.2);

    let (st, _, text) = answer(
        post(format!("Action=ListQueues&{}=1", "k".repeat(256)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st, 200, "{text}");
    let a = answer(
        post(format!("Action=ListQueues&{}=1", "k".repeat(257)))
            .await
            .unwrap(),
    )
    .await;
    assert_refused(&a);
    assert!(a.2.contains("longer than 256 bytes"), "{}", a.2);

    let (st, _, text) = answer(
        post("Action=ListQueues&a.b.c.d.e.f.g.h=1".to_owned())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st, 200, "{text}");
    let a = answer(
        post("Action=ListQueues&a.b.c.d.e.f.g.h.i=1".to_owned())
            .await
            .unwrap(),
    )
    .await;
    assert_refused(&a);
    assert!(a.2.contains("more than 8 dot-separated parts"), "{}", a.2);
    serving(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_the_aws_error_shape_before_it_is_read() {
    let s = SqsServer::start().await;
    let addr = s.sqs_url.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The body is announced, never sent: the answer comes from the declared length.
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nX-Amz-Target: AmazonSQS.ListQueues\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        64 * 1024 * 1024 + 1
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(
        raw.contains("x-amzn-query-error: RequestEntityTooLarge;Sender"),
        "{raw}"
    );
    assert!(
        raw.contains(r#""__type":"com.amazonaws.sqs#RequestEntityTooLarge""#),
        "{raw}"
    );
    serving(&s).await;
    s.stop().await;
}
