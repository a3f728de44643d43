//! The test kit's server with its SQS endpoint on and an SDK client for it, and the MD5
//! computations of the AWS documentation, written independently of the crate's own.

use std::ops::Deref;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use md5::{Digest, Md5};
use redrive_core::{Clock, ManualClock, Timestamp};
use redrive_sqs::SqsConfig;
use redrive_testkit::TestServer;
use serde_json::Value;

/// A test server (native API and SQS endpoint on one broker, SQLite, manual clock) with an
/// SDK client for its SQS endpoint; everything else is the kit's [`TestServer`].
pub struct SqsServer {
    server: TestServer,
    /// The SQS endpoint.
    pub sqs_url: String,
    /// An SDK client signing with `AKIDTEST` / `secret` at the server's clock.
    pub sqs: Client,
}

impl Deref for SqsServer {
    type Target = TestServer;

    fn deref(&self) -> &TestServer {
        &self.server
    }
}

/// The SDK's time: the test clock moved by `skew_ms`, so that signatures carry the
/// server's (manual) time, or a chosen distance from it.
pub struct SkewedClock {
    pub clock: ManualClock,
    pub skew_ms: i64,
}

impl std::fmt::Debug for SkewedClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SkewedClock({} ms)", self.skew_ms)
    }
}

/// How a hand-built signed request states its payload.
pub enum Payload<'a> {
    /// No `x-amz-content-sha256` header; the signature covers the body's hash.
    Signed,
    /// A signed `x-amz-content-sha256` header with this value (not necessarily the body's).
    Claimed(&'a str),
    /// A signed `x-amz-content-sha256: UNSIGNED-PAYLOAD`.
    Unsigned,
    /// Signed without the header, which is added afterwards with the body's true hash.
    HeaderAddedAfterSigning,
}

/// A raw answer: status, `x-amzn-query-error`, body.
pub type Answer = (u16, Option<String>, String);

/// Splits an answer into its parts.
pub async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status().as_u16();
    let qe = r
        .headers()
        .get("x-amzn-query-error")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, qe, r.text().await.unwrap())
}

impl aws_smithy_async::time::TimeSource for SkewedClock {
    fn now(&self) -> SystemTime {
        let ms = self.clock.now().as_millis() + self.skew_ms;
        UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap())
    }
}

/// An SDK client for `url` signing with this key pair at the test clock's time; no retries.
pub fn sdk_client(url: &str, key: &str, secret: &str, clock: &ManualClock) -> Client {
    sdk_client_skewed(url, key, secret, clock, 0)
}

/// An SDK client whose signing time is `skew_ms` from the test clock.
pub fn sdk_client_skewed(
    url: &str,
    key: &str,
    secret: &str,
    clock: &ManualClock,
    skew_ms: i64,
) -> Client {
    let conf = aws_sdk_sqs::Config::builder()
        .time_source(SkewedClock {
            clock: clock.clone(),
            skew_ms,
        })
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(key, secret, None, None, "test"))
        .endpoint_url(url)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .build();
    Client::from_conf(conf)
}

impl SqsServer {
    pub async fn start() -> SqsServer {
        SqsServer::start_with(SqsConfig::default()).await
    }

    /// A server whose SQS endpoint uses `config` (e.g. with access keys to verify).
    pub async fn start_with(config: SqsConfig) -> SqsServer {
        SqsServer::start_with_access(config, redrive_broker::AccessSettings::default()).await
    }

    /// A server whose broker admits callers as `access` says; with authentication on, the
    /// admin token is [`redrive_testkit::ADMIN`].
    pub async fn start_with_access(
        config: SqsConfig,
        access: redrive_broker::AccessSettings,
    ) -> SqsServer {
        let server = TestServer::builder().sqs(config).auth(access).start().await;
        let sqs_url = server
            .sqs_url
            .clone()
            .expect("started with the SQS endpoint");
        SqsServer {
            sqs: sdk_client(&sqs_url, "AKIDTEST", "secret", server.clock()),
            sqs_url,
            server,
        }
    }

    /// Stops the server gracefully and starts a new one over the same store and clock,
    /// with a client for its new SQS endpoint.
    pub async fn restart(self) -> SqsServer {
        let server = self.server.restart().await;
        let sqs_url = server
            .sqs_url
            .clone()
            .expect("started with the SQS endpoint");
        SqsServer {
            sqs: sdk_client(&sqs_url, "AKIDTEST", "secret", server.clock()),
            sqs_url,
            server,
        }
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// Creates a queue with attributes; returns its URL.
    pub async fn sqs_queue(&self, name: &str, attrs: &[(&str, &str)]) -> String {
        let mut req = self.sqs.create_queue().queue_name(name);
        for (k, v) in attrs {
            req = req.attributes((*k).into(), *v);
        }
        req.send().await.unwrap().queue_url.unwrap()
    }

    /// One queue attribute.
    pub async fn attr(&self, url: &str, name: &str) -> Option<String> {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names("All".into())
            .send()
            .await
            .unwrap();
        out.attributes
            .unwrap_or_default()
            .into_iter()
            .find(|(k, _)| k.as_str() == name)
            .map(|(_, v)| v)
    }

    /// A native API GET.
    pub async fn native_get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    /// A query-protocol request: status, `x-amzn-query-error`, body.
    pub async fn query(&self, params: &[(&str, &str)]) -> (u16, Option<String>, String) {
        let r = self
            .http
            .post(format!("{}/", self.sqs_url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(params).unwrap())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let qe = r
            .headers()
            .get("x-amzn-query-error")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, qe, r.text().await.unwrap())
    }

    /// A request signed by the SDK's SigV4 signer (key `AKIDTEST` / `secret`) at `at`,
    /// with the payload stated as `payload`; `headers` are sent and signed.
    pub async fn signed_raw(
        &self,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        payload: Payload<'_>,
        at: Timestamp,
    ) -> Answer {
        use aws_sigv4::http_request::{
            PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings, sign,
        };
        let url = format!("{}{path_and_query}", self.sqs_url);
        let identity = Credentials::new("AKIDTEST", "secret", None, None, "test").into();
        let mut settings = SigningSettings::default();
        let signable_body = match payload {
            Payload::Signed | Payload::HeaderAddedAfterSigning => SignableBody::Bytes(body),
            Payload::Claimed(h) => {
                settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
                SignableBody::Precomputed(h.to_owned())
            }
            Payload::Unsigned => {
                settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
                SignableBody::UnsignedPayload
            }
        };
        let time = UNIX_EPOCH + Duration::from_millis(u64::try_from(at.as_millis()).unwrap());
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("sqs")
            .time(time)
            .settings(settings)
            .build()
            .unwrap()
            .into();
        let signable =
            SignableRequest::new("POST", &url, headers.iter().copied(), signable_body).unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        let mut req = self.http.post(&url).body(body.to_vec());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        for (k, v) in instructions.headers() {
            req = req.header(k, v);
        }
        if let Payload::HeaderAddedAfterSigning = payload {
            req = req.header("x-amz-content-sha256", sha256_hex(body));
        }
        answer(req.send().await.unwrap()).await
    }
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Lower-case hex MD5.
pub fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A message attribute for the independent MD5: name, data type, string or binary value.
pub enum TestValue<'a> {
    S(&'a str),
    B(&'a [u8]),
}

/// `MD5OfMessageAttributes` as the AWS documentation defines it: for each attribute in
/// name order, length-prefixed (4-byte big-endian) name and data type, a transport byte
/// (1 string, 2 binary), then the length-prefixed value.
pub fn aws_attributes_md5(attrs: &[(&str, &str, TestValue<'_>)]) -> String {
    let mut sorted: Vec<&(&str, &str, TestValue<'_>)> = attrs.iter().collect();
    sorted.sort_by_key(|a| a.0);
    let mut buf: Vec<u8> = Vec::new();
    let field = |buf: &mut Vec<u8>, b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u32).to_be_bytes());
        buf.extend_from_slice(b);
    };
    for (name, ty, v) in sorted {
        field(&mut buf, name.as_bytes());
        field(&mut buf, ty.as_bytes());
        match v {
            TestValue::S(s) => {
                buf.push(1);
                field(&mut buf, s.as_bytes());
            }
            TestValue::B(b) => {
                buf.push(2);
                field(&mut buf, b);
            }
        }
    }
    md5_hex(&buf)
}

/// The code an SDK error carries (the query code, from `x-amzn-query-error`).
pub fn code<E: aws_sdk_sqs::error::ProvideErrorMetadata>(e: &E) -> String {
    e.code().unwrap_or_default().to_owned()
}
