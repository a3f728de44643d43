//! The SQS request decoder on arbitrary requests, in both protocols, and the answer
//! writers on whatever it decoded.
//!
//! Input layout: the first byte picks the request form, the rest is split at the first
//! `\n` where a form needs two parts.
//! - `sel % 4 == 0`: AWS JSON 1.0, `X-Amz-Target: AmazonSQS.<line>`, body the rest.
//! - `sel % 4 == 1`: AWS JSON 1.0, `X-Amz-Target: <line>` (any target), body the rest.
//! - `sel % 4 == 2`: query protocol, form body only.
//! - `sel % 4 == 3`: query protocol, query string `<line>` and form body the rest.
//!
//! What must hold: no panic; a request with `X-Amz-Target` is judged as JSON (answer and
//! error alike) and one without as query; a decoded JSON request names the action after
//! `AmazonSQS.`; answers render for any decoded input.

#![no_main]

use axum::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use redrive_sqs::error::{ErrorKind, SqsError};
use redrive_sqs::protocol::{self, Protocol};
use serde_json::Value;

/// The function under test; re-point here if the decoder's signature changes.
fn decode(
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<protocol::Request, (Protocol, SqsError)> {
    protocol::decode(headers, query, body)
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    let (query, body, target) = match sel % 4 {
        0 | 1 => {
            let (line, body) = split_line(rest);
            let mut target = if sel % 4 == 0 {
                b"AmazonSQS.".to_vec()
            } else {
                Vec::new()
            };
            target.extend_from_slice(line);
            // A header value HTTP would refuse never reaches the decoder.
            let Ok(value) = HeaderValue::from_bytes(&target) else {
                return;
            };
            headers.insert("x-amz-target", value);
            headers.insert(
                "content-type",
                HeaderValue::from_static("application/x-amz-json-1.0"),
            );
            (None, body, Some(target))
        }
        2 => {
            headers.insert(
                "content-type",
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            );
            (None, rest, None)
        }
        _ => {
            let (line, body) = split_line(rest);
            // The query string of a URI is ASCII; an invalid one never reaches the decoder.
            let Ok(q) = std::str::from_utf8(line) else {
                return;
            };
            (Some(q), body, None)
        }
    };
    let id = "00000000-0000-0000-0000-000000000000";
    match decode(&headers, query, body) {
        Ok(req) => {
            match &target {
                Some(target) => {
                    assert_eq!(req.protocol, Protocol::Json, "a targeted request is JSON");
                    let target = std::str::from_utf8(target).unwrap_or_default();
                    assert_eq!(
                        Some(req.action.as_str()),
                        target.strip_prefix("AmazonSQS."),
                        "the action is the target's suffix"
                    );
                }
                None => {
                    assert_eq!(
                        req.protocol,
                        Protocol::Query,
                        "an untargeted request is query"
                    );
                }
            }
            // The answer writers take any action name and any input shape.
            let _ = protocol::success(
                req.protocol,
                &req.action,
                Value::Object(req.input.clone()),
                id,
            );
            let e = SqsError::new(ErrorKind::MalformedRequest, req.action.clone());
            let _ = protocol::failure(req.protocol, &e, id);
        }
        Err((p, e)) => {
            let expected = if target.is_some() {
                Protocol::Json
            } else {
                Protocol::Query
            };
            assert_eq!(
                p, expected,
                "an error is answered in the request's protocol"
            );
            let _ = protocol::failure(p, &e, id);
        }
    }
});
