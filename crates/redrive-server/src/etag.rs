//! Entity tags on the API's `GET /v1/…` JSON answers, so that a poller (the console polls
//! every few seconds) revalidates instead of downloading: the tag is a hash of the body,
//! and a request whose `If-None-Match` names it is answered `304 Not Modified` without a
//! body. The handler still runs (its authorization, its audit entry for a payload read):
//! only the transfer is saved.

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use redrive_api::ErrorCode;

use crate::error::ApiError;

/// Largest body tagged: a bigger answer (a page of dead letters with their payloads) goes
/// out untagged rather than held in memory twice.
pub const MAX_TAGGED_BYTES: u64 = 4 * 1024 * 1024;

/// The layer: tags `200 application/json` answers of `GET /v1/…`.
pub(crate) async fn layer(req: Request, next: Next) -> Response {
    if req.method() != Method::GET || !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let if_none_match = req.headers().clone();
    let resp = next.run(req).await;
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status() != StatusCode::OK || !json || resp.headers().contains_key(header::ETAG) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    match body.size_hint().exact() {
        Some(n) if n <= MAX_TAGGED_BYTES => {}
        _ => return Response::from_parts(parts, body),
    }
    let bytes = match axum::body::to_bytes(body, MAX_TAGGED_BYTES as usize).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "reading an answer's body to tag it failed");
            return ApiError::new(ErrorCode::Internal, "internal error").into_response();
        }
    };
    let tag = tag_of(&bytes);
    let value = HeaderValue::from_str(&tag).expect("hex in quotes is a header value");
    parts
        .headers
        .insert(header::VARY, HeaderValue::from_static("Authorization"));
    if !parts.headers.contains_key(header::CACHE_CONTROL) {
        // A browser stores the answer privately and revalidates it every time.
        parts.headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
    }
    if crate::console::matches(&if_none_match, &tag) {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        for name in [header::CACHE_CONTROL, header::VARY] {
            if let Some(v) = parts.headers.get(&name) {
                not_modified.headers_mut().insert(name, v.clone());
            }
        }
        not_modified.headers_mut().insert(header::ETAG, value);
        return not_modified;
    }
    parts.headers.insert(header::ETAG, value);
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The entity tag of a body: the first 128 bits of its SHA-256, quoted.
pub fn tag_of(body: &[u8]) -> String {
    let hex = redrive_core::digest::sha256_hex(body);
    format!("\"{}\"", &hex[..32])
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tag_follows_the_bytes() {
        assert_eq!(super::tag_of(b"{}"), super::tag_of(b"{}"));
        assert_ne!(super::tag_of(b"{}"), super::tag_of(b"[]"));
        assert_eq!(super::tag_of(b"{}").len(), 34);
    }
}
