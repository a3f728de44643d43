//! The native API's request guard: the HTTP-level rules every request meets before a
//! handler sees it, each refusal an RFC 9457 problem document. It is the outermost layer
//! of the native listener (the SQS endpoint has its own rules and does not use it).
//!
//! - framing: both `Content-Length` and `Transfer-Encoding` → 400;
//! - size: a request target over [`MAX_URI_BYTES`] → 414, a header section over
//!   [`MAX_HEADER_BYTES`] or [`MAX_HEADERS`] lines → 431, a declared body over the body
//!   limit → 413 before any of it is read;
//! - origin: `Host` must name this server (see [`HostPolicy`]) → 400 / 421, so that a web
//!   page cannot reach the API through a rebound DNS name; no CORS: an `OPTIONS`
//!   preflight is refused, no `Access-Control-*` header is ever sent;
//! - methods: only GET, HEAD, POST, PUT, PATCH and DELETE → 405;
//! - a path that is not UTF-8 once percent-decoded → 400;
//! - a body must be `application/json` (or `application/*+json`, and any type for a
//!   CloudEvents binary-mode publish) → 415, so that an HTML form or a `text/plain` fetch
//!   from another site cannot change state;
//! - any error answer of the layers below that is not a problem document yet (axum's own
//!   rejections) is turned into one.
//!
//! The guard also appends the connection metrics to `GET /metrics`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use redrive_api::problem::PROBLEM_JSON;
use redrive_api::{ErrorCode, Problem};

use crate::error::problem_response;
use crate::serve::{BodyTimedOut, ConnMetrics, FramingConflict};

/// Longest request target (path and query) read.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest header section read (names, values and line overhead).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// Most header lines read.
pub const MAX_HEADERS: usize = 100;

/// What the guard needs to know.
pub(crate) struct GuardConfig {
    pub hosts: HostPolicy,
    pub max_body: usize,
    pub metrics: Arc<ConnMetrics>,
}

/// Wraps the native router in the guard.
pub(crate) fn wrap(app: Router, config: Arc<GuardConfig>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(config, guard))
}

async fn guard(State(cfg): State<Arc<GuardConfig>>, req: Request, next: Next) -> Response {
    if let Some(p) = refusal(&cfg, &req) {
        let mut resp = problem_response(&p);
        if p.status == 405 {
            resp.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE"),
            );
        }
        // The body was not read: the connection cannot be reused.
        if has_body(req.headers()) {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return resp;
    }
    let metrics = req.method() == Method::GET && req.uri().path() == "/metrics";
    let timed_out = req.extensions().get::<BodyTimedOut>().cloned();
    let mut resp = next.run(req).await;
    if timed_out.is_some_and(|t| t.0.load(Ordering::Relaxed))
        && resp.status() == StatusCode::BAD_REQUEST
    {
        // The handler read the body itself and saw only a failed read.
        resp = problem_response(&Problem::new(
            ErrorCode::RequestTimeout,
            "the request body did not arrive in time",
        ));
    }
    let resp = as_problem(resp).await;
    if metrics && resp.status() == StatusCode::OK {
        return with_connection_metrics(resp, &cfg.metrics).await;
    }
    resp
}

/// Why the request is refused, if it is.
fn refusal(cfg: &GuardConfig, req: &Request) -> Option<Problem> {
    use ErrorCode as C;
    let headers = req.headers();
    if req.extensions().get::<FramingConflict>().is_some() {
        return Some(Problem::new(
            C::MalformedRequest,
            "the request has both Content-Length and Transfer-Encoding",
        ));
    }
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if target > MAX_URI_BYTES {
        return Some(
            Problem::new(
                C::UriTooLong,
                format!("the request target is longer than {MAX_URI_BYTES} bytes"),
            )
            .with("limit", MAX_URI_BYTES),
        );
    }
    let header_bytes: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    if headers.len() > MAX_HEADERS || header_bytes > MAX_HEADER_BYTES {
        return Some(Problem::new(
            C::HeadersTooLarge,
            format!(
                "the header section is larger than {MAX_HEADER_BYTES} bytes or {MAX_HEADERS} lines"
            ),
        ));
    }
    if let Some(p) = cfg.hosts.refusal(req) {
        return Some(p);
    }
    let m = req.method();
    if m == Method::OPTIONS {
        return Some(Problem::new(
            C::MethodNotAllowed,
            "OPTIONS is not served: the API allows no cross-origin requests",
        ));
    }
    if ![
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
    ]
    .contains(m)
    {
        return Some(Problem::new(
            C::MethodNotAllowed,
            format!("the method {m} is not served"),
        ));
    }
    if percent_decode(req.uri().path().as_bytes()).is_err() {
        return Some(Problem::new(
            C::MalformedRequest,
            "the path is not valid UTF-8 once percent-decoded",
        ));
    }
    if has_body(headers) {
        if let Some(len) = content_length(headers)
            && len > cfg.max_body as u64
        {
            return Some(
                Problem::new(
                    C::MessageTooLarge,
                    format!(
                        "the declared body of {len} bytes is larger than the limit of {} bytes",
                        cfg.max_body
                    ),
                )
                .with("size", len)
                .with("limit", cfg.max_body),
            );
        }
        if !is_json(headers) && !is_binary_event(req) {
            return Some(Problem::new(
                C::UnsupportedMediaType,
                "a request body must be sent as Content-Type: application/json",
            ));
        }
    }
    None
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A body is declared by a non-zero `Content-Length` or any `Transfer-Encoding`.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || content_length(headers).is_some_and(|n| n > 0)
}

/// `application/json` or a JSON-based `application/*+json` type (the CloudEvents
/// formats), with or without parameters (`; charset=utf-8`).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .and_then(|sub| sub.strip_suffix("+json"))
            .is_some_and(|name| {
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
            })
}

/// A publish in CloudEvents binary mode (`ce-*` headers, the event's data as the body)
/// carries the data's own media type. A browser cannot send `ce-*` headers to another
/// site without a preflight, which is refused, so this opens no cross-site path.
fn is_binary_event(req: &Request) -> bool {
    let path = req.uri().path();
    req.method() == Method::POST
        && req.headers().contains_key("ce-specversion")
        && path.starts_with("/v1/topics/")
        && path.ends_with("/events")
}

/// Percent-decodes a path; fails on a result that is not UTF-8.
fn percent_decode(path: &[u8]) -> Result<String, ()> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%'
            && i + 2 < path.len()
            && let (Some(h), Some(l)) = (hex(path[i + 1]), hex(path[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(path[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ())
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Turns an error answer that is not a problem document into one, keeping its status.
async fn as_problem(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_problem = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == PROBLEM_JSON.as_bytes());
    if is_problem {
        return resp;
    }
    use ErrorCode as C;
    let code = match status.as_u16() {
        400 | 422 => C::MalformedRequest,
        404 => C::NotFound,
        405 => C::MethodNotAllowed,
        408 => C::RequestTimeout,
        413 => C::MessageTooLarge,
        414 => C::UriTooLong,
        415 => C::UnsupportedMediaType,
        431 => C::HeadersTooLarge,
        503 => C::Unavailable,
        s if s < 500 => C::InvalidRequest,
        _ => C::Internal,
    };
    let body = axum::body::to_bytes(resp.into_body(), 4096)
        .await
        .unwrap_or_default();
    let detail = String::from_utf8_lossy(&body).trim().to_owned();
    let mut p = Problem::new(
        code,
        if detail.is_empty() {
            code.title().to_owned()
        } else {
            detail
        },
    );
    // Keep the exact status (a 422 stays a 422) under the nearest code.
    p.status = status.as_u16();
    problem_response(&p)
}

async fn with_connection_metrics(resp: Response, metrics: &ConnMetrics) -> Response {
    let (mut parts, body) = resp.into_parts();
    // The metrics text grows with the number of queues; 64 MiB is far above any real one.
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        return problem_response(&Problem::new(
            ErrorCode::Internal,
            "the metrics could not be rendered",
        ));
    };
    let mut text = bytes.to_vec();
    text.extend_from_slice(metrics.render().as_bytes());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(text))
}

/// Which `Host` values name this server.
///
/// Always allowed: the listen address itself; for a loopback listener also `localhost`,
/// `127.0.0.1` and `[::1]`; for an unspecified one (`0.0.0.0`, `[::]`) any IP literal and
/// the loopback names; each with the listening port (or without a port when that is the
/// scheme's default). Added by `allowed_hosts`: `name` (any port), `name:port`, or `*`
/// (any host at all).
pub(crate) struct HostPolicy {
    port: u16,
    default_port: u16,
    names: Vec<String>,
    any_ip: bool,
    any: bool,
    extra_any_port: Vec<String>,
    extra: Vec<(String, u16)>,
}

impl HostPolicy {
    pub(crate) fn new(listen: SocketAddr, tls: bool, allowed: &[String]) -> Self {
        let ip = listen.ip();
        let mut names = vec![host_of_ip(ip)];
        let loopbackish = ip.is_loopback() || ip.is_unspecified();
        if loopbackish {
            names.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
        }
        let mut p = HostPolicy {
            port: listen.port(),
            default_port: if tls { 443 } else { 80 },
            names,
            any_ip: ip.is_unspecified(),
            any: false,
            extra_any_port: Vec::new(),
            extra: Vec::new(),
        };
        for a in allowed {
            let a = a.trim().to_ascii_lowercase();
            if a == "*" {
                p.any = true;
            } else if let Some((h, port)) = split_host(&a) {
                match port {
                    Some(port) => p.extra.push((h.to_owned(), port)),
                    None => p.extra_any_port.push(h.to_owned()),
                }
            }
        }
        p
    }

    fn refusal(&self, req: &Request) -> Option<Problem> {
        if self.any {
            return None;
        }
        // An absolute-form target names the host itself and takes precedence.
        let value = match req.uri().authority() {
            Some(a) => a.as_str().to_owned(),
            None => {
                let Some(v) = req.headers().get(header::HOST) else {
                    return Some(Problem::new(
                        ErrorCode::MalformedRequest,
                        "the request has no Host header",
                    ));
                };
                let Ok(v) = v.to_str() else {
                    return Some(Problem::new(
                        ErrorCode::MalformedRequest,
                        "the Host header is not valid",
                    ));
                };
                v.to_owned()
            }
        };
        let lower = value.trim().to_ascii_lowercase();
        let Some((host, port)) = split_host(&lower) else {
            return Some(Problem::new(
                ErrorCode::MalformedRequest,
                "the Host header is not valid",
            ));
        };
        if self.allows(host, port) {
            None
        } else {
            Some(Problem::new(
                ErrorCode::MisdirectedRequest,
                format!(
                    "the host {value:?} is not served here; list it in the server's allowed_hosts"
                ),
            )
            .with("host", value))
        }
    }

    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        if self.extra_any_port.iter().any(|h| h == host) {
            return true;
        }
        let port = port.unwrap_or(self.default_port);
        if self.extra.iter().any(|(h, p)| h == host && *p == port) {
            return true;
        }
        if port != self.port {
            return false;
        }
        if self.names.iter().any(|n| n == host) {
            return true;
        }
        self.any_ip && is_ip_literal(host)
    }
}

fn host_of_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn is_ip_literal(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => host.parse::<std::net::Ipv4Addr>().is_ok(),
    }
}

/// Splits `host[:port]` (IPv6 literals in brackets); `None` for a malformed value.
fn split_host(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, rest) = if s.starts_with('[') {
        let end = s.find(']')?;
        (&s[..=end], &s[end + 1..])
    } else {
        match s.find(':') {
            Some(i) => (&s[..i], &s[i..]),
            None => (s, ""),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match rest {
        "" => None,
        r => Some(r.strip_prefix(':')?.parse::<u16>().ok()?),
    };
    Some((host, port))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_a_loopback_listener() {
        let p = HostPolicy::new("127.0.0.1:7474".parse().unwrap(), false, &[]);
        for ok in [
            "127.0.0.1:7474",
            "localhost:7474",
            "LOCALHOST:7474",
            "[::1]:7474",
        ] {
            let lower = ok.to_ascii_lowercase();
            let (h, port) = split_host(&lower).unwrap_or(("", None));
            assert!(p.allows(h, port), "{ok}");
        }
        for bad in [
            "evil.example:7474",
            "127.0.0.1:80",
            "localhost",
            "127.0.0.2:7474",
        ] {
            let (h, port) = split_host(bad).unwrap_or(("", None));
            assert!(!p.allows(h, port), "{bad}");
        }
    }

    #[test]
    fn configured_hosts_add_to_the_listen_address() {
        let p = HostPolicy::new(
            "0.0.0.0:7474".parse().unwrap(),
            false,
            &["broker.internal".into(), "api.example:443".into()],
        );
        let allows = |s: &str| {
            let (h, port) = split_host(s).unwrap_or(("", None));
            p.allows(h, port)
        };
        assert!(allows("broker.internal:9999"));
        assert!(allows("api.example:443"));
        assert!(!allows("api.example:7474"));
        assert!(allows("10.1.2.3:7474"));
        assert!(!allows("rebound.example:7474"));
    }

    #[test]
    fn percent_decoding_refuses_what_is_not_utf8() {
        assert_eq!(
            percent_decode(b"/v1/queues/a%20b").as_deref(),
            Ok("/v1/queues/a b")
        );
        assert!(percent_decode(b"/v1/queues/%FF").is_err());
        assert_eq!(percent_decode(b"/x%").as_deref(), Ok("/x%"));
    }
}
