//! One `tracing` span per request of the native API, so that a slow request can be
//! followed through the logs: `request{method request_id route status latency_ms}`, with
//! the broker operation it calls as a child span (`send{queue=…}`).
//!
//! The span is at DEBUG level: at the default `info` it is disabled and costs next to
//! nothing (no id is made, nothing is formatted); with `--log-level debug` (or
//! `redrive_server=debug,redrive_broker=debug`) every event inside a request names it, and
//! the binary logs each span as it closes with the status, the latency and the busy/idle
//! times. The request id is the server's own (a UUID); neither bodies nor headers are
//! recorded.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;
use tracing::field::{Empty, display};

/// The outermost layer of the native API: opens the request span and records the status
/// and latency when the response is ready.
pub(crate) async fn request_span(req: Request, next: Next) -> Response {
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        route = Empty,
        request_id = Empty,
        status = Empty,
        latency_ms = Empty,
    );
    if span.is_disabled() {
        return next.run(req).await;
    }
    span.record("request_id", display(redrive_core::id::new_message_id()));
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("status", resp.status().as_u16());
    // Microseconds, as milliseconds with three decimals.
    span.record("latency_ms", started.elapsed().as_micros() as f64 / 1_000.0);
    resp
}

/// A route layer: records the matched route (`/v1/queues/{queue}/messages`, the template,
/// not the path) on the request span, once routing has found it.
pub(crate) async fn record_route(req: Request, next: Next) -> Response {
    if let Some(route) = req.extensions().get::<MatchedPath>() {
        tracing::Span::current().record("route", display(route.as_str()));
    }
    next.run(req).await
}
