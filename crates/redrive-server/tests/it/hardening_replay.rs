//! Hardening of automatic replay against a dead-letter record this build cannot read, on
//! every backend, on the manual clock: the row is corrupted behind the server's back with
//! raw SQL (`TestServer::sql`) while it runs, and the replay passes are driven one at a
//! time (`Broker::replay_once`).

use redrive_core::register::Idempotency;
use redrive_testkit::Backend;
use serde_json::json;

use redrive_testkit::recovery::{self, Letter, dead_letter, register};

use crate::replay::server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_is_set_aside_and_every_other_dead_letter_still_replays() {
    for backend in Backend::all("the unreadable dead letter test") {
        let name = backend.name();
        let s = server(backend).await;
        for q in ["a", "b"] {
            s.queue(q, json!({"auto_replay": {"enabled": true}})).await;
            register(&s, &format!("{q}:*"), Idempotency::Idempotent).await;
        }
        let bad = dead_letter(&s, "a", Letter::new("bad")).await;
        s.sql(&format!(
            "UPDATE dead_letters SET count_quality = 'bogus' WHERE id = '{bad}'"
        ))
        .await;
        // Written after the corruption, on the same queue and on another.
        dead_letter(&s, "a", Letter::new("a-ok")).await;
        dead_letter(&s, "b", Letter::new("b-ok")).await;

        let p = recovery::replay_passes(&s).await;
        assert_eq!(p.undecodable.len(), 1, "{name}: {p:?}");
        assert_eq!(p.undecodable[0].id, bad, "{name}");
        assert_eq!(p.undecodable[0].queue, "a", "{name}");
        assert!(
            p.undecodable[0].reason.contains("count_quality"),
            "{name}: {}",
            p.undecodable[0].reason
        );
        assert_eq!(
            (p.judged, p.republished, p.archived, p.failed),
            (2, 2, 2, 0),
            "{name}: the others replay"
        );
        for (q, id) in [("a", "a-ok|1"), ("b", "b-ok|1")] {
            let got = s.receive(q, 1).await;
            assert_eq!(got[0]["message_id"], id, "{name}");
            let token = got[0]["lock_token"].as_str().unwrap();
            let (st, v) = s.settle(q, token, "complete", json!({})).await;
            assert!(st.is_success(), "{name}: {v}");
        }

        // Set aside once: not claimed (nor reported) again, even long after any claim
        // would have run out.
        s.clock().advance(std::time::Duration::from_secs(3_600));
        let p = recovery::replay_passes(&s).await;
        assert!(p.undecodable.is_empty(), "{name}: reported once: {p:?}");
        assert_eq!(p.judged, 0, "{name}");

        // The status shows it; the queues stay healthy otherwise.
        let (st, v) = s.get("/v1/replay/a").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(
            (
                &v["undecodable"],
                &v["live"],
                &v["candidates"],
                &v["failing"]
            ),
            (&json!(1), &json!(1), &json!(0), &json!(0)),
            "{name}: {v}"
        );
        let (_, v) = s.get("/v1/replay/b").await;
        assert_eq!(v["undecodable"], 0, "{name}: {v}");
        let (_, all) = s.get("/v1/replay").await;
        assert!(
            all["entities"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["queue"] == "a" && e["undecodable"] == 1),
            "{name}: {all}"
        );
        // ... and so does /metrics.
        let m = s.metrics().await;
        assert!(
            m.contains("redrive_replay_undecodable{queue=\"a\"} 1"),
            "{name}: {m}"
        );
        assert!(
            m.contains("redrive_replay_undecodable{queue=\"b\"} 0"),
            "{name}: {m}"
        );

        // The listing answers, naming the row it cannot read; a full page of it moves on.
        let (st, v) = s.get("/v1/queues/a/dead-letters").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["dead_letters"], json!([]), "{name}: {v}");
        assert_eq!(v["undecodable"][0]["id"], bad.as_str(), "{name}: {v}");
        assert!(
            v["undecodable"][0]["reason"]
                .as_str()
                .unwrap()
                .contains("count_quality"),
            "{name}: {v}"
        );
        let (st, v) = s.get("/v1/queues/a/dead-letters?limit=1").await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["next_cursor"], bad.as_str(), "{name}: {v}");
        let (st, v) = s
            .get(&format!("/v1/queues/a/dead-letters?limit=1&cursor={bad}"))
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert!(v.get("undecodable").is_none(), "{name}: {v}");
        // The record alone answers a typed problem, not a 500.
        let (st, v) = s.get(&format!("/v1/queues/a/dead-letters/{bad}")).await;
        assert_eq!(st, 409, "{name}: {v}");
        assert_eq!(v["code"], "dead_letter_undecodable", "{name}: {v}");
        assert_eq!(v["dead_letter_id"], bad.as_str(), "{name}: {v}");
        // A dead-letter receive passes over it.
        let (st, v) = s
            .post(
                "/v1/queues/a/dead-letters/receive",
                json!({"max_messages": 10}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        assert_eq!(v["dead_letters"], json!([]), "{name}: {v}");

        // The operator's fix (docs/operations.md): correct the value, clear the mark; the
        // record is a candidate again and replays.
        s.sql(&format!(
            "UPDATE dead_letters SET count_quality = 'exact', undecodable = NULL \
             WHERE id = '{bad}'"
        ))
        .await;
        let p = recovery::replay_passes(&s).await;
        assert_eq!((p.judged, p.republished), (1, 1), "{name}: {p:?}");
        let got = s.receive("a", 1).await;
        assert_eq!(got[0]["message_id"], "bad|1", "{name}");
        let (_, v) = s.get("/v1/replay/a").await;
        assert_eq!(v["undecodable"], 0, "{name}: {v}");
        s.stop().await;
    }
}
