//! redrive's SQS-compatible endpoint: boto3, the AWS SDKs and the aws CLI talk to redrive by
//! changing one URL. Both SQS protocols are served on `POST /` (and on the queue URLs):
//! AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Action>`) and the query protocol (form-encoded
//! `Action=…`, XML answers). Errors carry the shape name (`__type`), the query code
//! (`Error.Code` and `x-amzn-query-error`) and the HTTP status that clients map onto their
//! typed exceptions.
//!
//! # One model underneath
//!
//! Every action calls [`redrive_broker::Broker`], the service layer the native API calls;
//! nothing here touches the store or re-implements a queue rule.
//!
//! - **An SQS queue is a native queue**: same name, same object. A message sent with boto3
//!   can be received with the native API and the other way round.
//! - **Queue attributes.** The native policy carries what it can: `MaximumMessageSize` →
//!   `max_message_size`; `MessageRetentionPeriod` → `default_ttl_ms` (expired messages are
//!   removed and counted, not dead-lettered); `RedrivePolicy` → `max_delivery_count` +
//!   `dead_letter_queue`; `VisibilityTimeout` → `lock_duration_ms` when it fits the native
//!   1–300 s range (SQS receives always pass their own lock duration). Without a
//!   `RedrivePolicy` SQS has no receive limit: the queue gets the largest native
//!   `max_delivery_count` (10000). The rest (`VisibilityTimeout`, `DelaySeconds`,
//!   `ReceiveMessageWaitTimeSeconds`, `MessageRetentionPeriod` in seconds,
//!   `RedriveAllowPolicy`, tags, and accepted-but-inert attributes such as `Policy`) lives
//!   in the policy's optional `sqs` section ([`redrive_core::SqsAttributes`]).
//! - **Visibility timeouts are locks.** A receive passes its visibility timeout (0–43200 s)
//!   as the lock duration under [`redrive_broker::LockBounds::Sqs`]; the receipt handle is
//!   an opaque wrapping of the broker's lock token and the queue it was issued for (with a
//!   checksum), so a handle given to another queue, or a made-up one, is
//!   `ReceiptHandleIsInvalid`, while a stale handle of the right queue (its lock gone)
//!   deletes nothing and succeeds, as on AWS. `ChangeMessageVisibility` renews the lock; 0
//!   releases it; as on AWS, a renewal that would end more than 12 hours after the
//!   receive that took the lock is `InvalidParameterValue` and changes nothing (the store
//!   checks it against the delivery's receive time, by the broker's clock; a new receive
//!   starts a new 12 hours). `DeleteMessage` completes. A message received more than `maxReceiveCount` times is
//!   dead-lettered by the broker: a copy goes to the dead-letter queue and the evidence
//!   record stays in the source queue's dead-letter store (archived), visible through the
//!   native dead-letter API.
//! - **Message attributes** (with their exact data types and values, which the MD5s need)
//!   are kept in one reserved native property, [`ATTRIBUTES_PROPERTY`]
//!   (`redrive.sqs.attributes`), whose value is a JSON string
//!   `[{"name", "type", "string" | "binary_b64"}]`; the sender's system attributes
//!   (`AWSTraceHeader`, `MessageGroupId`, the sender id) in [`SYSTEM_PROPERTY`]
//!   (`redrive.sqs.system`), a JSON object. The native API shows both as properties. Other
//!   native properties are returned to SQS receivers as `String` (text, booleans) or
//!   `Number` (numbers) message attributes; the broker's dead-letter properties become the
//!   `DeadLetterQueueSourceArn` system attribute instead.
//! - **DelaySeconds** is the native scheduled enqueue time (now + delay).
//! - **FIFO queues** (`<name>.fifo` with `FifoQueue=true`, both required together) are
//!   native queues with `group_ordering` (the `MessageGroupId` is the native session id:
//!   in order within a group, nothing of a group while an earlier message of it is in
//!   flight, other groups independent, no session locks) and a 5-minute
//!   `duplicate_detection_window_ms`. The native message id is a UUID-shaped SHA-256 of
//!   the queue and the deduplication key (the `MessageDeduplicationId`, or the body's
//!   SHA-256 under `ContentBasedDeduplication`; with `DeduplicationScope=messageGroup`
//!   the group too), so a duplicate inside the window is not enqueued and answers with
//!   the original's `MessageId` and `SequenceNumber` (the native per-queue sequence, a
//!   decimal string). Deviation: the same deduplication key sent again *after* the
//!   window gets the same `MessageId` again (a new `SequenceNumber`). `FifoThroughputLimit`
//!   is accepted and reported, never throttles. Per-message `DelaySeconds` is refused on
//!   FIFO queues (the queue's `DelaySeconds` applies); a FIFO queue's dead-letter queue
//!   must be FIFO, a standard queue's standard.
//! - **`ReceiveRequestAttemptId`** (FIFO queues; as the `ReceiveMessage` API reference
//!   documents it): a receive retried with the same id, on the same queue, by the same
//!   caller, within 5 minutes of the receive (the broker's clock) answers the same
//!   messages with the same receipt handles while every one of them is still held by its
//!   handle, and resets their visibility timeout to the retry's. Once one of them was
//!   deleted or had its visibility changed through this endpoint, or is no longer held
//!   by its handle (its visibility timeout ran out, a later receive took it), the retry
//!   is a new receive: nothing is handed out again under an old handle. The 5 minutes
//!   count from the first receive; a receive that answered nothing is not kept (its
//!   retry is a new receive). The id must be 1 to 128 alphanumeric or punctuation
//!   characters. Standard queues accept it and ignore it, as AWS does. The answers are
//!   kept **per node**, in memory (at most 10,000 receives and 64 MiB, the oldest
//!   dropped first; nothing survives a restart): a retry sent to another node sharing a
//!   PostgreSQL store, or after its entry was dropped, is served as a new receive.
//! - **Message move tasks** (`StartMessageMoveTask`, `ListMessageMoveTasks`,
//!   `CancelMessageMoveTask`) run in the broker (`redrive_broker::MoveSpec`): receive
//!   with a lock from the dead-letter queue, send to the destination (or, without one,
//!   to the queue named by the message's `DeadLetterSource`), complete — at least once,
//!   at most `MaxNumberOfMessagesPerSecond` per second of the broker's clock. Tasks are
//!   kept in the store (listed and cancelled from any node; a task whose node stops is
//!   resumed by another, or by the same after a restart); the
//!   source must be the dead-letter queue of some queue. Refusals are AWS's: a second
//!   start on a source with a running task is `InvalidParameterValue`; a cancel with a
//!   malformed handle `InvalidParameterValue`, with a well-formed one naming no task
//!   `ResourceNotFoundException` (evidence next to the mapping in `dead_letters`).
//!
//! # Requests: bounds and refusals
//!
//! Every bound is checked before the part it bounds is parsed, and a refused request
//! changes nothing.
//!
//! - **Body**: at most 64 MiB (ten of the largest messages, encoded), judged by
//!   `Content-Length` before reading and while reading: 413 `RequestEntityTooLarge`.
//! - **Query protocol** (form body and query string together): at most
//!   [`protocol::MAX_PARAMETERS`] (2000) parameters, names of at most
//!   [`protocol::MAX_KEY_BYTES`] (256) bytes and [`protocol::MAX_KEY_SEGMENTS`] (8)
//!   dot-separated parts; a value is bounded by the body limit (a message body is one
//!   value). Real SQS requests stay far below (a full `SendMessageBatch` has about 350
//!   parameters, names of 6 parts). Past a bound: 400 `InvalidParameterValue`. Names and
//!   values must be UTF-8 once percent-decoded; nothing is replaced: a `MessageBody` that
//!   is not is `InvalidMessageContents`, any other parameter `InvalidParameterValue`.
//! - **JSON protocol**: serde_json's nesting limit (128) applies; a deeper or malformed
//!   body is `InvalidParameterValue`.
//! - **Methods**: `POST` with `Content-Type: application/x-www-form-urlencoded` (query
//!   protocol) or `application/x-amz-json-1.0` and `X-Amz-Target` (JSON protocol), either
//!   optionally with `charset=utf-8`; another content type is `InvalidParameterValue`.
//!   `GET` (query string only) serves the read-only actions: `ListQueues`, `GetQueueUrl`,
//!   `GetQueueAttributes`, `ListQueueTags`, `ListDeadLetterSourceQueues`,
//!   `ListMessageMoveTasks`; any other action over `GET` (`ReceiveMessage` too: it hides
//!   messages) is `UnsupportedOperation`, so that a page a browser loads cannot act on a
//!   queue. Other methods are `UnsupportedOperation`.
//! - **Signatures** (with access keys configured, checked before the request is decoded):
//!   the canonical request's payload hash is always the SHA-256 of the body received; an
//!   `x-amz-content-sha256` header must be among the `SignedHeaders` and equal that hash
//!   (`UNSIGNED-PAYLOAD`, an S3 feature, is refused); `X-Amz-Date` must be within 15
//!   minutes of the broker's clock either way and on the credential scope's day.
//!   Signatures are compared in constant time. Failures are 403 `SignatureDoesNotMatch`
//!   ("Signature expired: …" / "Signature not yet current: …" for the window, as AWS
//!   words it). As on AWS, the window is the only replay bound: an identical request
//!   replayed within it is accepted. Answers carry a `Date` header from the broker's
//!   clock, from which SDKs correct their clock skew.
//!
//! # Layout
//! - `protocol`: decoding both protocols into one JSON shape; JSON and XML answers.
//! - `error`: AWS error kinds and the mapping of broker errors.
//! - `md5`: `MD5OfMessageBody`, `MD5OfMessageAttributes`, `MD5OfMessageSystemAttributes`.
//! - `auth`: SigV4 verification when access keys are configured.
//! - `receipts`: receipt handles (queue + lock token).
//! - `attempts`: the recent FIFO receives that carried a `ReceiveRequestAttemptId`.
//! - `queues`, `attributes`, `tags`, `messages`, `batches`, `dead_letters` (with the
//!   message move tasks): the actions.

pub mod access;
mod attempts;
mod attributes;
mod auth;
mod batches;
mod dead_letters;
pub mod error;
pub mod md5;
mod messages;
pub mod protocol;
mod queues;
mod receipts;
mod tags;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use redrive_broker::{Actor, Broker};
use redrive_core::Timestamp;
use serde_json::{Map, Value};
use tracing::Instrument as _;

use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::Protocol;

pub use messages::{ATTRIBUTES_PROPERTY, SYSTEM_PROPERTY};

/// Largest request body: ten messages of the largest size, base64 or form-encoded.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Settings of the SQS endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsConfig {
    /// Account id in queue URLs and ARNs (default `000000000000`).
    pub account_id: String,
    /// Region in ARNs (default `us-east-1`).
    pub region: String,
    /// Base of queue URLs: the URL clients reach the endpoint at (`http://host:port`,
    /// optionally with a path), as configured (`sqs_public_url`; by default the listen
    /// address). Never taken from a request: a forged `Host` header must not make the
    /// endpoint hand out URLs of another host, which clients would send their next
    /// (signed) requests to.
    pub public_url: String,
    /// Access key id and secret pairs. Empty: any signature is accepted. Otherwise every
    /// request must carry a SigV4 signature made with one of them.
    pub access_keys: Vec<(String, String)>,
}

impl Default for SqsConfig {
    fn default() -> Self {
        SqsConfig {
            account_id: "000000000000".to_owned(),
            region: "us-east-1".to_owned(),
            public_url: DEFAULT_PUBLIC_URL.to_owned(),
            access_keys: Vec::new(),
        }
    }
}

/// The default [`SqsConfig::public_url`]: the default listen address.
pub const DEFAULT_PUBLIC_URL: &str = "http://127.0.0.1:9324";

/// Shared state of the endpoint.
pub(crate) struct Sqs {
    pub(crate) broker: Broker,
    pub(crate) config: SqsConfig,
    /// Last purge per queue, on the broker's clock (SQS allows one per 60 s).
    pub(crate) purges: Mutex<HashMap<String, Timestamp>>,
    /// Recent FIFO receives that carried a `ReceiveRequestAttemptId` (per process).
    pub(crate) attempts: Mutex<attempts::Attempts>,
}

/// One request's context: the endpoint and the caller.
pub(crate) struct Ctx {
    pub(crate) sqs: Arc<Sqs>,
    pub(crate) sender_id: String,
    /// Who is calling: a configured key (every right), a token's SQS credentials, or
    /// `anonymous` without authentication.
    pub(crate) actor: Actor,
}

impl Ctx {
    pub(crate) fn broker(&self) -> &Broker {
        &self.sqs.broker
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.sqs.broker.clock().now()
    }

    /// The recent attempt-id receives (a poisoned lock still holds a consistent map: every
    /// change to it is made without panicking in between).
    pub(crate) fn attempts(&self) -> std::sync::MutexGuard<'_, attempts::Attempts> {
        self.sqs
            .attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The URL of queue `name`.
    pub(crate) fn queue_url(&self, name: &str) -> String {
        format!(
            "{}/{}/{name}",
            self.sqs.config.public_url.trim_end_matches('/'),
            self.sqs.config.account_id
        )
    }

    /// The ARN of queue `name`.
    pub(crate) fn queue_arn(&self, name: &str) -> String {
        format!(
            "arn:aws:sqs:{}:{}:{name}",
            self.sqs.config.region, self.sqs.config.account_id
        )
    }
}

/// Whether `name` follows the SQS queue name rule: 1 to 80 of `A-Za-z0-9-_`, of which a
/// FIFO queue's name ends in `.fifo`.
pub(crate) fn valid_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    !base.is_empty()
        && name.len() <= 80
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `name` is a FIFO queue's name.
pub(crate) fn is_fifo(name: &str) -> bool {
    name.ends_with(".fifo")
}

/// The queue a request's `QueueUrl` names: its last path segment. A URL that cannot name
/// a queue names none that exists.
pub(crate) fn queue_from_input(input: &Map<String, Value>) -> SqsResult<String> {
    let url = protocol::req_str(input, "QueueUrl")?;
    queue_from_url(url)
}

pub(crate) fn queue_from_url(url: &str) -> SqsResult<String> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let name = path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    if !valid_queue_name(name) {
        return Err(SqsError::no_queue());
    }
    Ok(name.to_owned())
}

/// The SQS endpoint as a router: every path, `POST` (and `GET` for query requests).
pub fn router(broker: Broker, config: SqsConfig) -> Router {
    let state = Arc::new(Sqs {
        broker,
        config,
        purges: Mutex::new(HashMap::new()),
        attempts: Mutex::new(attempts::Attempts::default()),
    });
    Router::new().fallback(handle).with_state(state)
}

async fn handle(
    State(sqs): State<Arc<Sqs>>,
    connect: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let client = connect.map(|c| c.0.0.ip().to_string());
    // One span per request, as the native API has (DEBUG: free at the default level):
    // the action and the request id are recorded once decoded, the status and latency at
    // the end. Neither bodies nor receipt handles are recorded.
    let span = tracing::debug_span!(
        "sqs_request",
        method = %method,
        action = tracing::field::Empty,
        request_id = tracing::field::Empty,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    let started = std::time::Instant::now();
    let mut resp = answer(&sqs, method, uri, headers, body, client)
        .instrument(span.clone())
        .await;
    span.record("status", resp.status().as_u16());
    span.record("latency_ms", started.elapsed().as_micros() as f64 / 1_000.0);
    // The broker's clock, which signatures are checked against: SDKs correct their clock
    // skew from this header.
    let date = auth::http_date(sqs.broker.clock().now().as_millis());
    if let Ok(v) = axum::http::HeaderValue::from_str(&date) {
        resp.headers_mut().insert(axum::http::header::DATE, v);
    }
    resp
}

async fn answer(
    sqs: &Arc<Sqs>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
    client: Option<String>,
) -> Response {
    let request_id = protocol::request_id();
    tracing::Span::current().record("request_id", tracing::field::display(&request_id));
    let guess = if headers.contains_key("x-amz-target") {
        Protocol::Json
    } else {
        Protocol::Query
    };
    if let Err(e) = check_method(&method, &headers) {
        return protocol::failure(guess, &e, &request_id);
    }
    let body = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(e) => return protocol::failure(guess, &e, &request_id),
    };
    let (actor, sender_id) = match authenticate(sqs, &method, &uri, &headers, &body, client).await {
        Ok(a) => a,
        Err(e) => return protocol::failure(guess, &e, &request_id),
    };
    // A GET carries its parameters in the query string only.
    let form_body: &[u8] = if method == Method::GET { &[] } else { &body };
    let mut req = match protocol::decode(&headers, uri.query(), form_body) {
        Ok(r) => r,
        Err((p, e)) => return protocol::failure(p, &e, &request_id),
    };
    // The client's text, quoted and escaped.
    tracing::Span::current().record("action", req.action.as_str());
    if method == Method::GET && !READ_ONLY.contains(&req.action.as_str()) {
        let e = SqsError::new(
            ErrorKind::UnsupportedOperation,
            format!(
                "The action {} changes state and is not accepted over GET; send it as a POST.",
                req.action
            ),
        );
        return protocol::failure(req.protocol, &e, &request_id);
    }
    // Old-style query clients post to the queue URL itself.
    let path = uri.path().trim_matches('/');
    if !path.is_empty() && !req.input.contains_key("QueueUrl") && path.contains('/') {
        req.input
            .insert("QueueUrl".to_owned(), Value::String(path.to_owned()));
    }
    let ctx = Ctx {
        sqs: sqs.clone(),
        sender_id,
        actor,
    };
    let result = match access::authorize(&ctx, &req.action, &req.input).await {
        Ok(()) => dispatch(&ctx, &req.action, &req.input).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(out) => protocol::success(req.protocol, &req.action, out, &request_id),
        Err(e) => {
            tracing::debug!(action = %req.action, code = e.kind.code(), message = %e.message,
                "SQS request refused");
            protocol::failure(req.protocol, &e, &request_id)
        }
    }
}

/// The caller of a request and its sender id. Without authentication (no configured keys
/// and the broker's authentication off) any signature or none is accepted. Otherwise the
/// request must be signed by a configured key (which may do everything) or by the SQS
/// credentials of an active API token (which may do what its grants permit).
async fn authenticate(
    sqs: &Sqs,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    client: Option<String>,
) -> SqsResult<(Actor, String)> {
    let claimed = auth::access_key(headers);
    let required = sqs.broker.auth_enabled() || !sqs.config.access_keys.is_empty();
    if !required {
        let sender = claimed.unwrap_or_else(|| sqs.config.account_id.clone());
        return Ok((Actor::anonymous().with_client(client), sender));
    }
    let Some(key) = claimed else {
        return Err(SqsError::new(
            ErrorKind::InvalidClientTokenId,
            "The request must be signed with AWS Signature Version 4 (Authorization header).",
        ));
    };
    let configured = sqs.config.access_keys.iter().find(|(k, _)| *k == key);
    let (actor, secret) = match configured {
        Some((_, secret)) => {
            let actor = Actor {
                id: format!("sqs-key:{key}"),
                name: key.clone(),
                grants: vec![redrive_core::access::Grant::all(
                    redrive_core::access::Role::Admin,
                )],
                client: client.clone(),
            };
            (actor, secret.clone())
        }
        None if sqs.broker.auth_enabled() => {
            match sqs.broker.authenticate_sqs_key(&key, client).await? {
                Some(found) => found,
                None => {
                    return Err(SqsError::new(
                        ErrorKind::InvalidClientTokenId,
                        "The security token included in the request is invalid.",
                    ));
                }
            }
        }
        None => {
            return Err(SqsError::new(
                ErrorKind::InvalidClientTokenId,
                "The security token included in the request is invalid.",
            ));
        }
    };
    auth::verify(
        method,
        uri,
        headers,
        body,
        sqs.broker.clock().now(),
        &secret,
    )?;
    Ok((actor, key))
}

/// Every action the endpoint serves (each has a row in [`access::rule`]).
#[cfg(test)]
pub(crate) const ACTIONS: &[&str] = &[
    "CreateQueue",
    "GetQueueUrl",
    "ListQueues",
    "DeleteQueue",
    "PurgeQueue",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "TagQueue",
    "UntagQueue",
    "ListQueueTags",
    "SendMessage",
    "ReceiveMessage",
    "DeleteMessage",
    "ChangeMessageVisibility",
    "SendMessageBatch",
    "DeleteMessageBatch",
    "ChangeMessageVisibilityBatch",
    "ListDeadLetterSourceQueues",
    "StartMessageMoveTask",
    "ListMessageMoveTasks",
    "CancelMessageMoveTask",
];

/// The actions that change nothing, the only ones accepted over GET (a state change by GET
/// could be triggered by any page a browser loads, e.g. an `<img>` tag).
const READ_ONLY: &[&str] = &[
    "ListQueues",
    "GetQueueUrl",
    "GetQueueAttributes",
    "ListQueueTags",
    "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks",
];

/// The JSON protocol's content type.
const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The query protocol's content type.
const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// Accepts `GET` (query protocol) and `POST` with the content type of its protocol: the
/// JSON protocol's (with `X-Amz-Target`) or the form type (query protocol), either
/// optionally with `charset=utf-8` (boto3 sends it).
fn check_method(method: &Method, headers: &HeaderMap) -> SqsResult<()> {
    let json = headers.contains_key("x-amz-target");
    if method == Method::GET {
        if json {
            return Err(SqsError::new(
                ErrorKind::UnsupportedOperation,
                "The AWS JSON protocol (X-Amz-Target) takes POST requests only.",
            ));
        }
        return Ok(());
    }
    if method != Method::POST {
        return Err(SqsError::new(
            ErrorKind::UnsupportedOperation,
            format!("Method {method} is not supported; SQS requests are POSTs."),
        ));
    }
    let expected = if json {
        JSON_CONTENT_TYPE
    } else {
        FORM_CONTENT_TYPE
    };
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let mut parts = content_type.split(';');
    let media = parts.next().unwrap_or_default().trim();
    let charset_ok = parts.all(|p| match p.split_once('=') {
        Some((k, v)) if k.trim().eq_ignore_ascii_case("charset") => {
            v.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    });
    if !media.eq_ignore_ascii_case(expected) || !charset_ok {
        return Err(SqsError::new(
            ErrorKind::MalformedRequest,
            format!(
                "Content-Type {content_type:?} is not accepted: POST {FORM_CONTENT_TYPE} \
                 (query protocol) or {JSON_CONTENT_TYPE} with X-Amz-Target (JSON protocol)."
            ),
        ));
    }
    Ok(())
}

/// Reads the body, refusing one larger than [`MAX_REQUEST_BYTES`] (by its `Content-Length`
/// before reading, or while reading) with an AWS-shaped error.
async fn read_body(headers: &HeaderMap, body: Body) -> SqsResult<Bytes> {
    let too_large = || {
        SqsError::new(
            ErrorKind::RequestTooLarge,
            format!("The request body is larger than {MAX_REQUEST_BYTES} bytes."),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, MAX_REQUEST_BYTES)
        .await
        .map_err(|_| too_large())
}

async fn dispatch(ctx: &Ctx, action: &str, input: &Map<String, Value>) -> SqsResult<Value> {
    match action {
        "CreateQueue" => queues::create(ctx, input).await,
        "GetQueueUrl" => queues::get_url(ctx, input).await,
        "ListQueues" => queues::list(ctx, input).await,
        "DeleteQueue" => queues::delete(ctx, input).await,
        "PurgeQueue" => queues::purge(ctx, input).await,
        "GetQueueAttributes" => attributes::get(ctx, input).await,
        "SetQueueAttributes" => attributes::set(ctx, input).await,
        "TagQueue" => tags::tag(ctx, input).await,
        "UntagQueue" => tags::untag(ctx, input).await,
        "ListQueueTags" => tags::list(ctx, input).await,
        "SendMessage" => messages::send(ctx, input).await,
        "ReceiveMessage" => messages::receive(ctx, input).await,
        "DeleteMessage" => messages::delete(ctx, input).await,
        "ChangeMessageVisibility" => messages::change_visibility(ctx, input).await,
        "SendMessageBatch" => batches::send(ctx, input).await,
        "DeleteMessageBatch" => batches::delete(ctx, input).await,
        "ChangeMessageVisibilityBatch" => batches::change_visibility(ctx, input).await,
        "ListDeadLetterSourceQueues" => dead_letters::list_sources(ctx, input).await,
        "StartMessageMoveTask" => dead_letters::start_move(ctx, input).await,
        "ListMessageMoveTasks" => dead_letters::list_moves(ctx, input).await,
        "CancelMessageMoveTask" => dead_letters::cancel_move(ctx, input).await,
        other => Err(SqsError::new(
            ErrorKind::UnsupportedOperation,
            format!("The action {other} is not supported by this endpoint."),
        )),
    }
}
