//! The binary's debug logs follow a request: each native or SQS request has its span
//! (method, matched route or SQS action, request id, status, latency), each broker
//! operation its child span (queue, message id, a lock token's prefix), and every span
//! logs a line when it closes. Lock tokens never appear whole, bodies never.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Server, free_port};

/// How long the test waits for a line the server writes after answering (the span closes
/// once the response has been handed over). A bound on a busy machine, not a timing rule.
const LOG_BOUND: Duration = Duration::from_secs(30);

/// Waits until the server's log has a line containing every one of `parts`; returns it.
#[track_caller]
fn line_with(server: &Server, parts: &[&str]) -> String {
    let started = Instant::now();
    loop {
        let log = server.log();
        if let Some(line) = log.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_owned();
        }
        assert!(
            started.elapsed() < LOG_BOUND,
            "no log line with all of {parts:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A query-protocol SQS request (unsigned: authentication is off), answered with `200`.
fn sqs_post(addr: SocketAddr, form: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn debug_logs_name_the_request_and_the_broker_operation() {
    let data = tempfile::tempdir().unwrap();
    let sqs = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data.path())
            .arg("--sqs-listen")
            .arg(sqs.to_string())
            .arg("--log-level")
            .arg("debug");
    });
    server.cli(&["queue", "create", "orders"]).ok();
    let body = "payload-that-must-stay-out-of-the-logs";
    server
        .cli(&["send", "orders", body, "--message-id", "order-17"])
        .ok();
    let received: Value = server.cli(&["--json", "receive", "orders"]).json();
    let token = received["messages"][0]["lock_token"]
        .as_str()
        .expect("a lock token")
        .to_owned();
    server.cli(&["settle", "orders", &token, "complete"]).ok();
    sqs_post(
        sqs,
        "Action=GetQueueUrl&QueueName=orders&Version=2012-11-05",
    );

    // The send: the request span with its id and route (fields in the order they were
    // recorded), and inside it the broker's `send` span with the queue and the client's
    // message id; the request's own line closes it with the status and latency.
    let send = line_with(
        &server,
        &[
            "request{method=POST request_id=",
            " route=/v1/queues/{name}/messages}:send{queue=orders messages=1 message_id=\"order-17\"}",
            " close time.busy=",
        ],
    );
    let request_id = send
        .split("request_id=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("a request id");
    assert_eq!(request_id.len(), 36, "{send}");
    let request = line_with(
        &server,
        &[
            &format!("request{{method=POST request_id={request_id} "),
            "route=/v1/queues/{name}/messages status=201 latency_ms=",
            "}: redrive_server::trace: close ",
        ],
    );
    assert!(
        !request.contains(":send{"),
        "the request's own close line: {request}"
    );

    // The settlement names the delivery by its lock token's prefix only.
    let settle = line_with(&server, &[":settle{queue=orders settlements=1 lock_token="]);
    let prefix = &token[..12];
    assert!(
        settle.contains(&format!("lock_token=\"{prefix}\"")),
        "{settle}"
    );

    // The SQS request: its span names the action; the broker operation is inside it.
    line_with(
        &server,
        &[
            "sqs_request{method=POST request_id=",
            " action=\"GetQueueUrl\"}:queue_record{queue=orders}: ",
            " close ",
        ],
    );
    line_with(
        &server,
        &[
            " action=\"GetQueueUrl\" status=200 latency_ms=",
            "}: redrive_sqs: close ",
        ],
    );

    let log = server.log();
    assert!(
        !log.contains(&token),
        "a whole lock token in the log:\n{log}"
    );
    assert!(!log.contains(body), "a message body in the log:\n{log}");
}
