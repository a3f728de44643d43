//! Hardening of push delivery: every dead-letter record keeps the last attempt's evidence
//! whatever its reason. An event that failed its attempts and then waited for its time to
//! live is dead-lettered `TimeToLiveExceeded` without another attempt; its record still
//! names the last attempt's outcome, status code and time — also when the server restarted
//! between that attempt and the expiry (the evidence is on the message row, not in the
//! memory of the node that made the attempt). On every backend, with the manual clock and
//! a real local HTTP receiver.

use redrive_testkit::{Backend, Receiver, Reply, T0, TestServer};
use serde_json::json;

use crate::topics::{event, push_sub, the_dead_letter, until_stats};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_by_time_to_live_keeps_the_last_attempts_evidence_on_every_backend() {
    three_failures_then_the_time_to_live("the push time-to-live evidence test", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_attempts_evidence_survives_a_restart_before_the_expiry_on_every_backend() {
    three_failures_then_the_time_to_live("the push evidence across a restart test", true).await;
}

/// Three attempts answered 500, then the event waits for its time to live and is
/// dead-lettered at it with the third attempt's evidence; with `restart`, the server is
/// restarted over the same store and clock after the third attempt, and the new one
/// dead-letters it.
async fn three_failures_then_the_time_to_live(test: &str, restart: bool) {
    for backend in Backend::all(test) {
        let name = backend.name();
        let s = TestServer::builder().backend(backend).start().await;
        let rx = Receiver::webhook(|_, _| Reply::status(500)).await;
        s.topic("orders", json!({})).await;
        // Ten attempts allowed, one minute to live: attempts at 0 s, 10 s and 40 s; the
        // next would be at 100 s, past the minute, so the event waits for its expiry.
        push_sub(
            &s,
            &rx.url,
            json!({"event_time_to_live_minutes": 1, "jitter": 0.0}),
        )
        .await;
        s.publish("orders", &[event("1", "order.created", "/eu/1")])
            .await;
        let waiting = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
        rx.wait_for(1).await;
        until_stats(&s, "hook", waiting.clone()).await;
        s.advance(10_000);
        rx.wait_for(2).await;
        until_stats(&s, "hook", waiting.clone()).await;
        s.advance(30_000);
        rx.wait_for(3).await;
        until_stats(&s, "hook", waiting.clone()).await;
        let s = if restart {
            // The node that made the attempts is gone; the new one only has the store.
            let s = s.restart().await;
            until_stats(&s, "hook", waiting).await;
            s
        } else {
            s
        };
        // The time to live passes at 60 s: given up without a fourth attempt.
        s.advance(20_000);
        until_stats(
            &s,
            "hook",
            json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1}),
        )
        .await;
        assert_eq!(rx.attempts(), ["1", "2", "3"], "{name}");

        let (rec, evidence) = the_dead_letter(&s).await;
        assert_eq!(rec["reason"], "TimeToLiveExceeded", "{name}: {rec}");
        assert_eq!(
            rec["dead_lettered_at"],
            T0.plus_millis(60_000).to_rfc3339(),
            "{name}"
        );
        assert_eq!(
            evidence,
            json!({
                "deadLetterReason": "TimeToLiveExceeded",
                "deliveryAttempts": 3,
                "lastDeliveryOutcome": "500",
                "lastHttpStatusCode": 500,
                "publishTime": T0.to_rfc3339(),
                "lastDeliveryAttemptTime": T0.plus_millis(40_000).to_rfc3339(),
            }),
            "{name}"
        );
        s.stop().await;
    }
}
