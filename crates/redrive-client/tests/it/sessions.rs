//! Sessions through the receiver: accept one (named or the next), its messages in order,
//! held by one receiver at a time, its lock renewed and released.

use std::time::Duration;

use redrive_client::{ErrorKind, Message};
use redrive_testkit::{T0, TestServer};
use serde_json::json;

use crate::support::client;

#[tokio::test]
async fn a_session_is_held_by_one_receiver_and_delivers_in_order() {
    let s = TestServer::start().await;
    s.queue(
        "orders",
        json!({"requires_session": true, "lock_duration_ms": 30_000}),
    )
    .await;
    let c = client(&s);
    let sender = c.sender("orders");
    for (session, body) in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")] {
        sender
            .send(Message::new(body).with_session_id(session))
            .await
            .unwrap();
    }
    let r = c.receiver("orders");
    let a = r
        .accept_session(Some("a"), Duration::ZERO)
        .await
        .unwrap()
        .expect("session a");
    assert_eq!(a.session_id(), "a");
    assert_eq!(a.locked_until(), T0.plus_millis(30_000));
    // Another receiver cannot take it while it is held.
    let err = c
        .receiver("orders")
        .accept_session(Some("a"), Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.code(), Some("session_locked"));
    let mut bodies = Vec::new();
    loop {
        let got = a.receive(1, Duration::ZERO).await.unwrap();
        if got.is_empty() {
            break;
        }
        bodies.push(got[0].body_str().unwrap().to_owned());
        a.complete(&got[0]).await.unwrap();
    }
    assert_eq!(bodies, ["a1", "a2", "a3"]);
    s.advance(20_000);
    assert_eq!(
        a.renew_session_lock().await.unwrap(),
        T0.plus_millis(50_000)
    );
    a.release().await.unwrap();
    // Released: the next accept (of any session with messages) gets b.
    let b = r
        .accept_session(None, Duration::ZERO)
        .await
        .unwrap()
        .expect("session b");
    assert_eq!(b.session_id(), "b");
    b.release().await.unwrap();
    // A released lock is gone.
    let err = b.renew_session_lock().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    s.stop().await;
}

#[tokio::test]
async fn no_session_available_is_none_not_an_error() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"requires_session": true})).await;
    let c = client(&s);
    let got = c
        .receiver("orders")
        .accept_session(None, Duration::ZERO)
        .await
        .unwrap();
    assert!(got.is_none());
    let err = c
        .receiver("orders")
        .accept_session(Some(""), Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!((err.kind(), err.attempts()), (ErrorKind::Invalid, 0));
    s.stop().await;
}
