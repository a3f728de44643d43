//! The native API's request bodies: the server's JSON extractor into each wire type, the
//! shape dispatch of send and settle, and the pure checks the decoded values go through
//! (policy, filter and retry validation, the send conversion), a transaction's operations
//! among them.
//!
//! Input layout: the first byte picks the wire type, the rest is the request body.
//!
//! What must hold: no panic; the extractor accepts exactly the bodies serde accepts and
//! refuses the rest with a 400 `malformed_body` problem; every accepted value survives
//! serialisation and reading back; validation is a pure function of the value (the same
//! verdict after a round trip); a converted send keeps its body bytes and properties.

#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use axum::extract::FromRequest;
use libfuzzer_sys::fuzz_target;
use redrive_api::ErrorCode;
use redrive_api::dead_letter::{MoveDeadLetter, ReceiveDeadLetters, SettleDeadLetter};
use redrive_api::message::{
    AcceptSession, ReceiveDeferred, ReceiveRequest, SendMessage, SendRequest, SessionTokenRequest,
    Settle, SettleRequest,
};
use redrive_api::queue::{CreateQueue, QueuePolicy, UpdateQueue};
use redrive_api::topic::{CreateSubscription, CreateTopic, UpdateSubscription};
use redrive_api::transaction::TransactionRequest;
use redrive_core::Timestamp;
use redrive_server::error::{ApiError, ApiJson, from_json};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Runs a future that needs no runtime (the extractor on a complete in-memory body).
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("the extractor did not finish on an in-memory body");
}

/// The server's body extractor; re-point here if it changes.
fn extract<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/")
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a fixed request builds");
    block_on(ApiJson::<T>::from_request(req, &())).map(|ApiJson(t)| t)
}

fn assert_malformed(e: &ApiError) {
    assert_eq!(e.0.status, 400, "a refused body is a 400: {:?}", e.0);
    assert_eq!(e.0.code, ErrorCode::MalformedBody.as_str(), "{:?}", e.0);
}

/// Extracts `T` and checks the extractor against serde itself.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    let direct = serde_json::from_slice::<T>(body);
    match extract::<T>(body) {
        Ok(t) => {
            assert!(
                !body.is_empty() && direct.is_ok(),
                "extractor accepted what serde refuses"
            );
            Some(t)
        }
        Err(e) => {
            // Stricter than serde: repeated keys and bodies that are not objects.
            let stricter = redrive_events::json::check_unique_keys(body).is_err()
                || body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{');
            assert!(
                body.is_empty() || direct.is_err() || stricter,
                "extractor refused what serde accepts"
            );
            assert_malformed(&e);
            None
        }
    }
}

/// Serialises, reads back and serialises again: the value must be stable.
fn round_trip<T: Serialize + DeserializeOwned>(t: &T) -> T {
    let v = serde_json::to_value(t).expect("a wire value serialises");
    let back: T = match serde_json::from_value(v.clone()) {
        Ok(b) => b,
        Err(e) => panic!("a serialised wire value reads back: {e}: {v}"),
    };
    assert_eq!(
        serde_json::to_value(&back).expect("serialises"),
        v,
        "round trip"
    );
    back
}

fn check_policy(p: &QueuePolicy) {
    let back = round_trip(p);
    assert_eq!(&back, p);
    assert_eq!(
        back.validate(),
        p.validate(),
        "validation survives a round trip"
    );
}

fn check_time(s: &Option<String>) {
    if let Some(t) = s.as_deref().and_then(Timestamp::parse_rfc3339) {
        let again = Timestamp::parse_rfc3339(&t.to_rfc3339());
        assert_eq!(
            again,
            Some(t),
            "an RFC 3339 time prints and parses back: {s:?}"
        );
    }
}

fn check_send(m: SendMessage) {
    round_trip(&m);
    check_time(&m.valid_until);
    check_time(&m.scheduled_enqueue_time);
    let body = m.body.clone();
    let encoding = m.body_encoding;
    let props = m.properties.len();
    let Ok(out) = redrive_server::outgoing(m) else {
        return;
    };
    let bytes = redrive_server::body_in(body, encoding).expect("outgoing accepted the body");
    assert_eq!(out.body, bytes);
    assert_eq!(out.properties.len(), props, "every property kept");
    let (text, enc) = redrive_server::body_out(&out.body);
    let again = redrive_server::body_in(text, enc).expect("body_out's output reads back");
    assert_eq!(again, out.body, "body bytes survive the wire");
}

/// The send handler's dispatch: a `messages` member makes it a batch.
fn send(body: &[u8]) {
    let Some(v) = decode::<Value>(body) else {
        return;
    };
    let msgs = if v.get("messages").is_some() {
        match from_json::<SendRequest>(v) {
            Ok(SendRequest::Batch { messages }) => messages,
            Ok(SendRequest::One(m)) => vec![*m],
            Err(e) => return assert_malformed(&e),
        }
    } else {
        match from_json::<SendMessage>(v) {
            Ok(m) => vec![m],
            Err(e) => return assert_malformed(&e),
        }
    };
    for m in msgs {
        check_send(m);
    }
}

/// The settle handler's dispatch: a `settlements` member makes it a batch.
fn settle(body: &[u8]) {
    let Some(v) = decode::<Value>(body) else {
        return;
    };
    if v.get("settlements").is_some() {
        match from_json::<SettleRequest>(v) {
            Ok(r) => {
                round_trip(&r);
            }
            Err(e) => assert_malformed(&e),
        }
    } else {
        match from_json::<Settle>(v) {
            Ok(s) => {
                round_trip(&s);
            }
            Err(e) => assert_malformed(&e),
        }
    }
}

fn plain<T: Serialize + DeserializeOwned>(body: &[u8]) {
    if let Some(t) = decode::<T>(body) {
        round_trip(&t);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    match sel % 17 {
        0 => send(body),
        1 => settle(body),
        2 => plain::<ReceiveRequest>(body),
        3 => {
            if let Some(q) = decode::<CreateQueue>(body) {
                round_trip(&q);
                check_policy(&q.policy);
            }
        }
        4 => {
            if let Some(p) = decode::<QueuePolicy>(body) {
                check_policy(&p);
            }
        }
        5 => plain::<UpdateQueue>(body),
        6 => {
            if let Some(t) = decode::<CreateTopic>(body) {
                round_trip(&t);
            }
        }
        7 => {
            if let Some(s) = decode::<CreateSubscription>(body) {
                let back = round_trip(&s);
                assert_eq!(back.filter.validate(), s.filter.validate());
                assert_eq!(back.retry_policy.validate(), s.retry_policy.validate());
            }
        }
        8 => {
            if let Some(u) = decode::<UpdateSubscription>(body) {
                let back = round_trip(&u);
                if let (Some(a), Some(b)) = (&u.filter, &back.filter) {
                    assert_eq!(a.validate(), b.validate());
                }
            }
        }
        9 => plain::<ReceiveDeferred>(body),
        10 => plain::<AcceptSession>(body),
        11 => plain::<SessionTokenRequest>(body),
        12 => plain::<ReceiveDeadLetters>(body),
        13 => plain::<SettleDeadLetter>(body),
        14 => plain::<MoveDeadLetter>(body),
        15 => plain::<SendRequest>(body),
        _ => {
            // A transaction's sends are checked as single sends are.
            if let Some(t) = decode::<TransactionRequest>(body) {
                for op in round_trip(&t).operations {
                    if let redrive_api::transaction::TransactionOperation::Send {
                        message, ..
                    } = op
                    {
                        check_send(message);
                    }
                }
            }
        }
    }
});
