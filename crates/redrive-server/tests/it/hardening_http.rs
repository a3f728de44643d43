//! Hardening of the HTTP layer: a refusal answered before the request's body was read
//! leaves the kept-alive connection usable for the next request (or says that it closes);
//! `HEAD` is served on every `GET` route, with the `GET` route's permission.

use std::time::Duration;

use redrive_broker::AccessSettings;
use redrive_testkit::{ADMIN, TestServer};
use reqwest::{Method, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

/// One answer read from a kept-alive connection.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_ascii_lowercase())
        })
    }

    fn closes(&self) -> bool {
        self.header("connection").as_deref() == Some("close")
    }
}

/// Reads exactly one answer (its body by `Content-Length`, none for a `HEAD`); `None` when
/// the server closed the connection before a whole answer.
async fn read_one(c: &mut TcpStream, head_request: bool) -> Option<Answer> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).into_owned();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            let mut a = Answer {
                status,
                head,
                body: Vec::new(),
            };
            let len: usize = if head_request {
                0
            } else {
                a.header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            if raw.len() >= end + 4 + len {
                a.body = raw[end + 4..end + 4 + len].to_vec();
                return Some(a);
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(30), c.read(&mut buf))
            .await
            .expect("the server answers")
            .ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Whether the server closed the connection (end of stream or a reset).
async fn closed(c: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(30), c.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn a_refused_request_with_a_body_leaves_the_connection_usable() {
    let s = TestServer::builder().auth(on()).start().await;
    let host = s.addr.to_string();
    let body = r#"{"name":"orders"}"#;
    let refused_head = format!(
        "POST /v1/queues HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let next = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.set_nodelay(true).unwrap();
    // A client that writes the head and the body apart (as Python's http.client does):
    // the 401 needs only the head, and the body may arrive after the answer is decided.
    // The server runs on this test's thread: each yield lets it go on with the head, so
    // the iterations cover the body arriving at each step of the answer.
    for i in 0..200 {
        let closed = |e| panic!("request {i}: the server closed the connection: {e}");
        c.write_all(refused_head.as_bytes())
            .await
            .unwrap_or_else(closed);
        for _ in 0..i % 8 {
            tokio::task::yield_now().await;
        }
        c.write_all(body.as_bytes()).await.unwrap_or_else(closed);
        let a = read_one(&mut c, false)
            .await
            .unwrap_or_else(|| panic!("request {i}: closed without an answer"));
        assert_eq!(a.status, 401, "request {i}: {}", a.head);
        assert!(
            !a.closes(),
            "request {i}: a short body is read, not closed on"
        );
        c.write_all(next.as_bytes()).await.unwrap_or_else(|e| {
            panic!("request {i}: the server closed the connection after its answer: {e}")
        });
        let a = read_one(&mut c, false)
            .await
            .unwrap_or_else(|| panic!("request {i}: the next request on the connection failed"));
        assert_eq!(a.status, 200, "request {i}: {}", a.head);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_refusal_that_leaves_a_long_body_unread_says_the_connection_closes() {
    let s = TestServer::builder().auth(on()).start().await;
    let host = s.addr.to_string();
    // Declared above what is drained, and never sent.
    let len = 1024 * 1024;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {len}\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let a = read_one(&mut c, false).await.expect("an answer");
    assert_eq!(a.status, 401, "{}", a.head);
    assert!(
        a.closes(),
        "the answer must say that the connection closes: {}",
        a.head
    );
    assert!(closed(&mut c).await, "the connection stays open");

    // A body that does not arrive in time is not waited for either.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let a = read_one(&mut c, false).await.expect("an answer");
    assert_eq!(a.status, 401, "{}", a.head);
    assert!(a.closes(), "{}", a.head);

    // A client that waits for 100 Continue is not asked for the body: the refusal comes
    // at once, and the connection closes after it.
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /v1/queues HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: 17\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let a = read_one(&mut c, false).await.expect("an answer");
    assert_eq!(a.status, 401, "{}", a.head);
    assert!(a.closes(), "{}", a.head);
    assert!(closed(&mut c).await, "the connection stays open");
    s.stop().await;
}

#[tokio::test]
async fn head_is_served_on_every_get_route_with_the_get_permission() {
    let s = TestServer::builder().auth(on()).start().await;
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues",
            Some(serde_json::json!({"name": "orders"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (_, consumer) = s.token("c", &["consumer:orders"]).await;
    let (_, operator) = s.token("o", &["operator:orders"]).await;
    let host = s.addr.to_string();
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let mut head = async |path: &str, token: Option<&str>| {
        let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
        c.write_all(format!("HEAD {path} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n").as_bytes())
            .await
            .unwrap();
        read_one(&mut c, true).await.expect("an answer")
    };
    // As GET answers, without the body.
    for path in ["/v1/queues", "/v1/queues/orders", "/metrics", "/v1/tokens"] {
        let a = head(path, Some(ADMIN)).await;
        assert_eq!(a.status, 200, "HEAD {path}: {}", a.head);
        assert!(a.body.is_empty());
    }
    // The public routes are public for HEAD too.
    let a = head("/healthz", None).await;
    assert_eq!(a.status, 200, "{}", a.head);
    // And the guarded ones guarded as their GET: no token, 401; a token without the GET
    // route's role, 403; with it, 200.
    let a = head("/v1/queues", None).await;
    assert_eq!(a.status, 401, "{}", a.head);
    let a = head("/v1/queues/orders", Some(&consumer)).await;
    assert_eq!(a.status, 403, "{}", a.head);
    let a = head("/v1/queues/orders", Some(&operator)).await;
    assert_eq!(a.status, 200, "{}", a.head);
    // The connection served all of them.
    let (st, _) = s.admin(Method::GET, "/v1/queues", None).await;
    assert_eq!(st, StatusCode::OK);
    // HEAD on a route without GET is a method the route does not allow.
    let a = head("/v1/queues/orders/receive", Some(ADMIN)).await;
    assert_eq!(a.status, 405, "{}", a.head);
    s.stop().await;
}

#[test]
fn head_has_the_permission_row_of_get() {
    use redrive_server::access::{ROUTES, is_public, rule};
    for (m, p, ops, param) in ROUTES {
        if *m == Method::GET {
            let head = rule(&Method::HEAD, p).expect("HEAD has the GET row");
            assert_eq!((head.2, head.3), (*ops, *param), "{p}");
        }
    }
    assert!(rule(&Method::HEAD, "/v1/queues/{name}/receive").is_none());
    assert!(is_public(&Method::HEAD, "/healthz"));
    assert!(!is_public(&Method::POST, "/healthz"));
}

#[tokio::test]
async fn an_sqs_secret_is_shown_once_and_never_after_on_every_backend() {
    for backend in redrive_testkit::Backend::all("the SQS secret shown once") {
        let name = backend.name();
        let s = TestServer::builder()
            .backend(backend)
            .auth(on())
            .start()
            .await;
        let (st, created) = s
            .admin(
                Method::POST,
                "/v1/tokens",
                Some(serde_json::json!({"name": "sqs", "grants": ["producer"], "sqs": true})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{name}: {created}");
        let secret = created["sqs_secret_access_key"]
            .as_str()
            .expect("the secret, once")
            .to_owned();
        let id = created["id"].as_str().expect("an id").to_owned();
        let (_, list) = s.admin(Method::GET, "/v1/tokens", None).await;
        let (_, revoked) = s
            .admin(Method::POST, &format!("/v1/tokens/{id}/revoke"), None)
            .await;
        let audit = s.audit("limit=1000").await;
        for (what, text) in [
            ("the token list", list.to_string()),
            ("the revocation", revoked.to_string()),
            ("the audit log", serde_json::Value::from(audit).to_string()),
        ] {
            assert!(!text.contains(&secret), "{name}: {what} shows the secret");
        }
        // The store keeps it (a signature check needs it); its record hides it in `Debug`.
        let found = s
            .broker
            .list_tokens()
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.token.id == id)
            .expect("the token");
        assert_eq!(
            found
                .token
                .sqs
                .as_ref()
                .map(|c| c.secret_access_key.as_str()),
            Some(secret.as_str()),
            "{name}"
        );
        assert!(!format!("{found:?}").contains(&secret), "{name}");
        s.stop().await;
    }
}
