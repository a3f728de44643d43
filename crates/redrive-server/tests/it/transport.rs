//! The HTTP layer: slow and idle clients, the connection limit, TLS, and the native API's
//! request rules, driven over raw TCP where a client library would normalise the request.
//! Timeouts run on tokio's paused clock, which moves on by itself when every task waits.

use std::time::Duration;

use redrive_server::Settings;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use redrive_testkit::TestServer;

/// One raw answer.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// Asserts a problem document with this status and code.
    #[track_caller]
    fn problem(&self, status: u16, code: &str) {
        let v = self.json();
        assert_eq!(self.status, status, "{}\n{v}", self.head);
        assert_eq!(
            self.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{}",
            self.head
        );
        assert_eq!(v["code"], code, "{v}");
        assert_eq!(v["status"], status, "{v}");
    }
}

fn parse(raw: &[u8]) -> Answer {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete answer: {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    Answer {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    }
}

/// Reads until the server closes (bounded: a server that keeps the connection open
/// fails the test instead of hanging it).
async fn read_to_close(c: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(120), async {
        let mut buf = [0u8; 8192];
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        r.is_ok(),
        "the server kept the connection open: {:?}",
        String::from_utf8_lossy(&out)
    );
    out
}

/// Sends `request` as it is and reads the answer to the close.
async fn exchange(s: &TestServer, request: &[u8]) -> Answer {
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(request).await.unwrap();
    parse(&read_to_close(&mut c).await)
}

fn host(s: &TestServer) -> String {
    format!("Host: {}\r\n", s.addr)
}

/// Reads exactly one answer with a `Content-Length` from a kept-alive connection.
async fn read_one(c: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let a = parse(&raw);
            let len: usize = a
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                return parse(&raw[..end + 4 + len]);
            }
        }
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before a whole answer");
        raw.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_half_sent_header_is_closed_after_the_header_timeout() {
    let s = TestServer::start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(format!("GET /healthz HTTP/1.1\r\n{}X-Slow: ", host(&s)).as_bytes())
        .await
        .unwrap();
    let sent = Instant::now();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(9_900), c.read(&mut buf)).await;
    assert!(early.is_err(), "closed before the header timeout");
    let r = tokio::time::timeout(Duration::from_secs(60), c.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0) | Err(_))),
        "still open a minute after the header timeout"
    );
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
    // The server answers others meanwhile.
    assert_eq!(s.get("/healthz").await.0, 200);
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_idle_timeout_even_after_a_request() {
    let s = TestServer::builder()
        .settings(Settings {
            idle_timeout_ms: 20_000,
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(format!("GET /healthz HTTP/1.1\r\n{}\r\n", host(&s)).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_one(&mut c).await.status, 200);
    let answered = Instant::now();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(19_900), c.read(&mut buf)).await;
    assert!(early.is_err(), "closed before the idle timeout");
    let r = tokio::time::timeout(Duration::from_secs(60), c.read(&mut buf)).await;
    assert!(
        matches!(r, Ok(Ok(0) | Err(_))),
        "an idle connection stayed open"
    );
    assert!(answered.elapsed() < Duration::from_secs(21));
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_declared_but_unsent_body_is_answered_408_after_the_body_timeout() {
    let s = TestServer::start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\n{}Content-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{\"name\":",
            host(&s)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let sent = Instant::now();
    let a = parse(&read_to_close(&mut c).await);
    a.problem(408, "request_timeout");
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "{waited:?}"
    );
    let (st, v) = s.get("/v1/queues").await;
    assert_eq!(st, 200);
    assert_eq!(v["queues"], json!([]), "nothing was created");
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stalled_publish_body_is_answered_408_too() {
    let s = TestServer::start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/topics/t/events HTTP/1.1\r\n{}Content-Type: application/cloudevents+json\r\n\
             Content-Length: 100\r\n\r\n{{",
            host(&s)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let a = parse(&read_to_close(&mut c).await);
    a.problem(408, "request_timeout");
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_declared_body_over_the_limit_is_refused_at_once() {
    let s = TestServer::start().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues/q/messages HTTP/1.1\r\n{}Content-Type: application/json\r\n\
             Content-Length: 500000000\r\n\r\n",
            host(&s)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let sent = Instant::now();
    let a = tokio::time::timeout(Duration::from_secs(5), read_one(&mut c))
        .await
        .expect("no answer without the body");
    a.problem(413, "message_too_large");
    assert_eq!(a.json()["size"], 500_000_000u64);
    assert!(sent.elapsed() < Duration::from_secs(1));
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_connection_limit_refuses_the_next_connection_counts_it_and_serves_the_rest() {
    let s = TestServer::builder()
        .settings(Settings {
            max_connections: 4,
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(s.addr).await.unwrap());
    }
    // The fourth, in use: it is accepted after the three (the backlog is in order).
    let mut d = TcpStream::connect(s.addr).await.unwrap();
    d.write_all(format!("GET /healthz HTTP/1.1\r\n{}\r\n", host(&s)).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_one(&mut d).await.status, 200);

    let mut e = TcpStream::connect(s.addr).await.unwrap();
    let _ = e
        .write_all(format!("GET /healthz HTTP/1.1\r\n{}\r\n", host(&s)).as_bytes())
        .await;
    let refused = read_to_close(&mut e).await;
    assert!(
        refused.is_empty(),
        "the fifth connection was served: {:?}",
        String::from_utf8_lossy(&refused)
    );

    d.write_all(format!("GET /metrics HTTP/1.1\r\n{}\r\n", host(&s)).as_bytes())
        .await
        .unwrap();
    let m = read_one(&mut d).await;
    assert_eq!(m.status, 200);
    let text = String::from_utf8_lossy(&m.body);
    let listener = s.addr.to_string();
    for line in [
        format!("redrive_http_connections_open{{listener=\"{listener}\"}} 4"),
        format!("redrive_http_connections_refused_total{{listener=\"{listener}\"}} 1"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }

    // A closed connection frees its place.
    drop(idle.pop());
    let mut served = false;
    for _ in 0..100 {
        let mut f = TcpStream::connect(s.addr).await.unwrap();
        let _ = f
            .write_all(
                format!(
                    "GET /healthz HTTP/1.1\r\n{}Connection: close\r\n\r\n",
                    host(&s)
                )
                .as_bytes(),
            )
            .await;
        if !read_to_close(&mut f).await.is_empty() {
            served = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(served, "a freed place was never reused");
    s.stop().await;
}

#[tokio::test]
async fn a_body_must_be_json_and_the_host_must_be_this_server() {
    let s = TestServer::start().await;
    let h = host(&s);
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let body = r#"{"name":"q"}"#;
        let req = format!(
            "POST /v1/queues HTTP/1.1\r\n{h}Content-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        exchange(&s, req.as_bytes())
            .await
            .problem(415, "unsupported_media_type");
    }
    let no_type = "POST /v1/queues HTTP/1.1\r\nHost: H\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"name\":\"q\"}"
        .replace("Host: H\r\n", &h);
    exchange(&s, no_type.as_bytes())
        .await
        .problem(415, "unsupported_media_type");
    assert_eq!(s.get("/v1/queues").await.1["queues"], json!([]));
    // With parameters, and by name of the loopback listener.
    let port = s.addr.port();
    for host_line in [h.clone(), format!("Host: localhost:{port}\r\n")] {
        let body = r#"{"name":"ok"}"#;
        let req = format!(
            "POST /v1/queues HTTP/1.1\r\n{host_line}Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let a = exchange(&s, req.as_bytes()).await;
        assert!(a.status == 201 || a.status == 409, "{}", a.head);
    }

    for bad in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        "127.0.0.1:1".to_owned(),
    ] {
        let req = format!("GET /v1/queues HTTP/1.1\r\nHost: {bad}\r\nConnection: close\r\n\r\n");
        exchange(&s, req.as_bytes())
            .await
            .problem(421, "misdirected_request");
    }
    exchange(&s, b"GET /v1/queues HTTP/1.0\r\n\r\n")
        .await
        .problem(400, "malformed_request");
    s.stop().await;
}

#[tokio::test]
async fn allowed_hosts_widen_the_host_rule() {
    let s = TestServer::builder()
        .settings(Settings {
            allowed_hosts: vec!["broker.internal".into()],
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    let a = exchange(
        &s,
        b"GET /healthz HTTP/1.1\r\nHost: broker.internal:8080\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.head);
    exchange(
        &s,
        b"GET /healthz HTTP/1.1\r\nHost: other.internal\r\nConnection: close\r\n\r\n",
    )
    .await
    .problem(421, "misdirected_request");
    s.stop().await;

    let any = TestServer::builder()
        .settings(Settings {
            allowed_hosts: vec!["*".into()],
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    let a = exchange(
        &any,
        b"GET /healthz HTTP/1.1\r\nHost: anything.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.head);
    any.stop().await;
}

#[tokio::test]
async fn no_cors_and_unknown_methods_are_problems() {
    let s = TestServer::start().await;
    let h = host(&s);
    let preflight = format!(
        "OPTIONS /v1/queues HTTP/1.1\r\n{h}Origin: https://evil.example\r\n\
         Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
    );
    let a = exchange(&s, preflight.as_bytes()).await;
    a.problem(405, "method_not_allowed");
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{}",
        a.head
    );
    let get = format!(
        "GET /v1/queues HTTP/1.1\r\n{h}Origin: https://evil.example\r\nConnection: close\r\n\r\n"
    );
    let a = exchange(&s, get.as_bytes()).await;
    assert_eq!(a.status, 200);
    assert!(
        !a.head.to_ascii_lowercase().contains("access-control-"),
        "{}",
        a.head
    );
    for method in ["BREW", "TRACE", "CONNECT"] {
        let target = if method == "CONNECT" {
            s.addr.to_string()
        } else {
            "/v1/queues".to_owned()
        };
        let req = format!("{method} {target} HTTP/1.1\r\n{h}Connection: close\r\n\r\n");
        exchange(&s, req.as_bytes())
            .await
            .problem(405, "method_not_allowed");
    }
    s.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_problem_documents() {
    let s = TestServer::start().await;
    let h = host(&s);
    s.queue("q", json!({})).await;

    // Both framing headers: refused before the body is read.
    let smuggle = format!(
        "POST /v1/queues/q/messages HTTP/1.1\r\n{h}Content-Type: application/json\r\n\
         Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n\
         e\r\n{{\"body\":\"x\"}}\r\n0\r\n\r\n"
    );
    exchange(&s, smuggle.as_bytes())
        .await
        .problem(400, "malformed_request");
    // The other order too.
    let smuggle = format!(
        "POST /v1/queues/q/messages HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\
         Content-Type: application/json\r\nContent-Length: 4\r\n\r\n\
         e\r\n{{\"body\":\"x\"}}\r\n0\r\n\r\n"
    );
    exchange(&s, smuggle.as_bytes())
        .await
        .problem(400, "malformed_request");
    assert_eq!(s.counts("q").await["active"], 0, "nothing was sent");

    // A path that is not UTF-8 once decoded.
    let req = format!("GET /v1/queues/%FF HTTP/1.1\r\n{h}Connection: close\r\n\r\n");
    exchange(&s, req.as_bytes())
        .await
        .problem(400, "malformed_request");

    // A long target, a large header section.
    let req = format!(
        "GET /v1/queues/{} HTTP/1.1\r\n{h}Connection: close\r\n\r\n",
        "a".repeat(9 * 1024)
    );
    exchange(&s, req.as_bytes())
        .await
        .problem(414, "uri_too_long");
    let req = format!(
        "GET /v1/queues HTTP/1.1\r\n{h}X-Big: {}\r\nConnection: close\r\n\r\n",
        "b".repeat(40 * 1024)
    );
    exchange(&s, req.as_bytes())
        .await
        .problem(431, "headers_too_large");
    let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    let req = format!("GET /v1/queues HTTP/1.1\r\n{h}{many}Connection: close\r\n\r\n");
    exchange(&s, req.as_bytes())
        .await
        .problem(431, "headers_too_large");
    s.stop().await;
}

#[tokio::test]
async fn duplicate_keys_and_unknown_batch_fields_are_refused() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let post = |path: &str, body: &str| {
        let url = format!("{}{path}", s.url);
        let body = body.to_owned();
        let http = s.http.clone();
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let st = r.status();
            (st, r.json::<Value>().await.unwrap())
        }
    };
    for body in [
        r#"{"body":"a","body":"b"}"#,
        r#"{"messages":[{"body":"a","message_id":"x","message_id":"y"}]}"#,
        r#"{"messages":[{"body":"a"}],"messages":[]}"#,
        r#"{"body":"a","\u0062ody":"b"}"#,
        r#"{"messages":[{"body":"a"}],"atomic":false}"#,
        r#"{"messages":[{"body":"a","colour":"red"}]}"#,
    ] {
        let (st, v) = post("/v1/queues/q/messages", body).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["code"], "malformed_body", "{body}: {v}");
    }
    let (st, v) = post("/v1/queues", r#"{"name":"a","name":"b"}"#).await;
    assert_eq!(
        (st.as_u16(), v["code"].as_str()),
        (400, Some("malformed_body"))
    );
    let (st, v) = post("/v1/queues/q/settle", r#"{"settlements":[],"extra":1}"#).await;
    assert_eq!(
        (st.as_u16(), v["code"].as_str()),
        (400, Some("malformed_body")),
        "{v}"
    );
    assert_eq!(s.counts("q").await["active"], 0, "nothing was sent");
    let (st, v) = s.get("/v1/queues").await;
    assert_eq!(st, 200);
    assert_eq!(v["queues"].as_array().unwrap().len(), 1);
    s.stop().await;
}

/// A self-signed certificate for `localhost`, written as PEM files in `dir`.
fn certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (cert, key, ck.cert.der().to_vec())
}

fn tls_client(der: Vec<u8>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(der))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

#[tokio::test]
async fn tls_serves_https_and_refuses_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = certificate(dir.path());
    let s = TestServer::builder()
        .settings(Settings {
            tls_cert_file: Some(cert),
            tls_key_file: Some(key),
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    assert!(s.url.starts_with("https://"));
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tls_client(der).connect(name, tcp).await.unwrap();
    let port = s.addr.port();
    tls.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n\
             Content-Length: 12\r\nConnection: close\r\n\r\n{{\"name\":\"t\"}}"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    let a = parse(&raw);
    assert_eq!(a.status, 201, "{}", a.head);
    assert_eq!(a.json()["name"], "t");

    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(format!("GET /healthz HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let raw = read_to_close(&mut c).await;
    assert!(
        !raw.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stalled_tls_handshake_is_closed_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = certificate(dir.path());
    let s = TestServer::builder()
        .settings(Settings {
            tls_cert_file: Some(cert),
            tls_key_file: Some(key),
            tls_handshake_timeout_ms: 5_000,
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let opened = Instant::now();
    c.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let raw = read_to_close(&mut c).await;
    assert!(raw.is_empty());
    let waited = opened.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn tls_settings_must_come_together() {
    let err = Settings {
        tls_cert_file: Some("cert.pem".into()),
        ..Settings::default()
    }
    .validate()
    .unwrap_err();
    assert!(err.contains("tls_key_file"), "{err}");
    assert!(
        Settings {
            max_connections: 0,
            ..Settings::default()
        }
        .validate()
        .is_err()
    );
}

/// The extra listeners of `run_with` (the SQS endpoint) get the same timeouts but not the
/// native API's rules.
#[tokio::test(start_paused = true)]
async fn extra_listeners_share_the_timeouts_but_not_the_native_rules() {
    use axum::routing::post;
    let echo = axum::Router::new().route("/", post(|body: axum::body::Bytes| async move { body }));
    let s = TestServer::builder()
        .network(redrive_broker::NetworkPolicy::default())
        .settings(Settings::default())
        .extra(echo)
        .start()
        .await;
    let extra_addr = s.extra_addrs[0];

    let mut c = TcpStream::connect(extra_addr).await.unwrap();
    c.write_all(
        b"POST / HTTP/1.1\r\nHost: anything.example\r\nContent-Type: text/plain\r\n\
          Content-Length: 5\r\nConnection: close\r\n\r\nhello",
    )
    .await
    .unwrap();
    let a = parse(&read_to_close(&mut c).await);
    assert_eq!(a.status, 200, "{}", a.head);
    assert_eq!(a.body, b"hello");

    let mut c = TcpStream::connect(extra_addr).await.unwrap();
    c.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let sent = Instant::now();
    let raw = read_to_close(&mut c).await;
    assert!(raw.is_empty(), "{:?}", String::from_utf8_lossy(&raw));
    assert!(sent.elapsed() < Duration::from_secs(11));

    s.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_accepting_closes_idle_connections_and_finishes_in_flight_requests() {
    let s = TestServer::start().await;
    let addr = s.addr;
    let h = host(&s);
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\n{h}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_one(&mut idle).await.status, 200);

    s.queue("q", json!({})).await;
    let poll = s.spawn_receive("q", json!({"wait_ms": 20_000}));
    // Parked by its own deadline: a worker polled again would also add a sleeper, and a
    // receive still at the store when the shutdown starts lets the paused clock run on to
    // the end of the grace period.
    s.until_parked_at(redrive_testkit::T0.plus_millis(20_000))
        .await;

    // A body refused without a store call: the store's own thread is outside tokio's
    // paused clock, which would move on to the end of the grace period meanwhile.
    let body = br#"{"name": 17}"#;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\n{h}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    c.write_all(&body[..5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let stopping = tokio::spawn(s.stop());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!stopping.is_finished(), "stopped with a request in flight");
    assert!(
        read_to_close(&mut idle).await.is_empty(),
        "the idle connection stayed open"
    );
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a new connection was accepted during shutdown"
    );
    let answer = poll.await.unwrap();
    assert_eq!(
        answer["messages"],
        json!([]),
        "the long poll ended: {answer}"
    );
    // The request whose body was still arriving gets its answer.
    c.write_all(&body[5..]).await.unwrap();
    let a = parse(&read_to_close(&mut c).await);
    a.problem(400, "malformed_body");
    stopping.await.unwrap();
}

#[test]
fn the_open_file_limit_is_raised_and_bounds_the_connection_limit() {
    let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
    // A low soft limit, as distributions set by default (other tests in this process
    // stay far below it).
    rlimit::Resource::NOFILE.set(1024.min(hard), hard).unwrap();
    let (soft, hard) = redrive_server::raise_nofile_limit().unwrap();
    if hard != u64::MAX {
        assert_eq!(
            soft, hard,
            "the soft limit was not raised to the hard limit"
        );
    }
    let room = usize::try_from(soft.saturating_sub(redrive_server::FD_RESERVE)).unwrap();
    assert_eq!(
        redrive_server::effective_max_connections(usize::MAX),
        room.max(1)
    );
    assert_eq!(
        redrive_server::effective_max_connections(10),
        10.min(room).max(1)
    );
}
