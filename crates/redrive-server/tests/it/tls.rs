//! Outgoing `https://` on real handshakes: push delivery with its validation handshake,
//! an effect authority and a dependency probe, each behind a TLS front on 127.0.0.1 whose
//! certificate a CA made in the test issued, and the same endpoints refused when they
//! present a certificate the broker does not trust.

use redrive_core::register::Idempotency;
use redrive_testkit::tls::{TestCa, TlsFront};
use redrive_testkit::{Backend, Receiver, Reply, TestServer, default_settings};
use reqwest::StatusCode;
use serde_json::json;

use crate::topics::{event, the_dead_letter, until_stats};

/// A server whose outgoing requests trust `ca` alone.
async fn trusting(ca: &TestCa, settings: redrive_server::Settings) -> TestServer {
    TestServer::builder()
        .trust(ca.trust())
        .settings(settings)
        .start()
        .await
}

#[tokio::test]
async fn push_over_https_validates_delivers_and_retries_a_refused_certificate() {
    let ca = TestCa::new("redrive test CA");
    let stranger = TestCa::new("someone else's CA");
    let good = ca.issue(&["localhost"]);
    // Each answer closes its connection, so each attempt makes a handshake of its own.
    let rx = Receiver::webhook(|_, _| Reply::status(200).header("connection", "close")).await;
    let front = TlsFront::before(&rx, &good).await;
    let s = trusting(&ca, default_settings()).await;
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": front.url("/hook"),
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": {"max_delivery_attempts": 2, "jitter": 0.0}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["kind"]["validation"], "validated", "{v}");
    assert!(
        rx.requests()[0].is_handshake(),
        "the handshake came over TLS"
    );
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let got = rx.wait_for(1).await;
    assert_eq!(got[0].header("ce-id"), "", "structured mode");
    assert_eq!(got[0].json()["id"], "1");
    until_stats(&s, "hook", json!({"delivered": 1})).await;

    // The endpoint now presents a certificate nobody here trusts: a TLS failure, counted
    // as its own class and retried like a connection failure.
    front.present(&stranger.issue(&["localhost"]));
    s.publish("orders", &[event("2", "order.created", "/eu/2")])
        .await;
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 1, "failed_attempts": {"tls_error": 1}}),
    )
    .await;
    // Its certificate fixed, the retry delivers.
    front.present(&good);
    s.advance(10_000);
    let got = rx.wait_for(2).await;
    assert_eq!(got[1].json()["id"], "2");
    until_stats(&s, "hook", json!({"in_backoff": 0, "delivered": 2})).await;

    // Refused on every attempt: dead-lettered, the outcome saying TLS and why.
    front.present(&stranger.issue(&["localhost"]));
    s.publish("orders", &[event("3", "order.created", "/eu/3")])
        .await;
    until_stats(&s, "hook", json!({"in_backoff": 1})).await;
    s.advance(10_000);
    until_stats(&s, "hook", json!({"dead_lettered": 1})).await;
    let (_, evidence) = the_dead_letter(&s).await;
    assert_eq!(evidence["lastDeliveryOutcome"], "tls error", "{evidence}");
    let error = evidence["lastDeliveryError"].as_str().unwrap();
    assert!(
        error.starts_with("TLS: the server's certificate is not issued by a trusted authority"),
        "{error}"
    );
    // Three refused handshakes: event 2's first attempt, event 3's two.
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(
            "redrive_push_failed_attempts_total{topic=\"orders\",subscription=\"hook\",class=\"tls_error\"} 3"
        ),
        "{metrics}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_push_endpoint_with_an_untrusted_certificate_is_refused_at_creation() {
    let ca = TestCa::new("redrive test CA");
    let rx = Receiver::webhook(|_, _| Reply::status(200)).await;
    let wrong_name = TlsFront::before(&rx, &ca.issue(&["hooks.example.com"])).await;
    let untrusted = TlsFront::before(&rx, &TestCa::new("other").issue(&["localhost"])).await;
    let s = trusting(&ca, default_settings()).await;
    s.topic("orders", json!({})).await;
    for (front, why) in [
        (&wrong_name, "not valid for the host name"),
        (&untrusted, "not issued by a trusted authority"),
    ] {
        let (st, v) = s
            .post(
                "/v1/topics/orders/subscriptions",
                json!({"name": "hook", "type": "push", "endpoint": front.url("/hook"),
                       "dead_letter": {"type": "own_store"}}),
            )
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("TLS") && detail.contains(why), "{why}: {v}");
    }
    assert!(rx.requests().is_empty(), "no request got past a handshake");
    let (_, subs) = s.get("/v1/topics/orders/subscriptions").await;
    assert_eq!(subs["subscriptions"], json!([]), "nothing created: {subs}");
    s.stop().await;
}

#[tokio::test]
async fn an_effect_authority_over_https_is_asked_and_an_untrusted_one_is_unreachable() {
    use redrive_testkit::recovery::{Letter, case, case_id, dead_letter, register, states, work};

    use crate::cases::Authority;
    let ca = TestCa::new("redrive test CA");
    let s = trusting(
        &ca,
        redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        },
    )
    .await;
    s.queue("orders", json!({})).await;
    register(&s, "order.placed", Idempotency::NotIdempotent).await;
    let authority = Authority::start("present", "ledger entry 9").await;
    let addr = authority.url();
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/hook")
        .parse()
        .unwrap();
    let trusted = TlsFront::start(&ca.issue(&["localhost"]), addr).await;
    let untrusted = TlsFront::start(&TestCa::new("other").issue(&["localhost"]), addr).await;
    for (ty, front) in [("order.placed", &trusted), ("order.shipped", &untrusted)] {
        if ty == "order.shipped" {
            register(&s, ty, Idempotency::NotIdempotent).await;
        }
        let (st, v) = s
            .call(
                reqwest::Method::PUT,
                &format!("/v1/effect-authorities/{ty}"),
                Some(json!({"url": front.url("/hook"), "timeout_ms": 2000})),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let present = dead_letter(
        &s,
        "orders",
        Letter::order("o-1")
            .with(json!({"type": "order.placed", "intent": "i-1"}))
            .reason("AckLost"),
    )
    .await;
    let refused = dead_letter(
        &s,
        "orders",
        Letter::order("o-2")
            .with(json!({"type": "order.shipped", "intent": "i-2"}))
            .reason("AckLost"),
    )
    .await;
    work(&s).await;
    let c = case(&s, &case_id(&present)).await;
    assert_eq!(c["state"], "completed", "asked over https: {c}");
    assert!(states(&c).contains(&"effect_present".to_owned()), "{c}");
    assert_eq!(
        authority.questions().len(),
        1,
        "only the trusted front got through"
    );
    let c = case(&s, &case_id(&refused)).await;
    assert!(
        !states(&c).contains(&"effect_present".to_owned()),
        "an untrusted authority answers nothing: {c}"
    );
    assert!(
        c.to_string().contains("UnknownIssuer"),
        "the timeline says why the authority could not be asked: {c}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_dependency_probe_over_https_is_read_and_an_untrusted_one_is_unobservable() {
    use redrive_testkit::recovery::plan;

    use crate::replay_plans::{Probe, act, budget, create, eligible, fixture, tick};
    for backend in [Backend::Sqlite] {
        let ca = TestCa::new("redrive test CA");
        let s = TestServer::builder()
            .backend(backend)
            .trust(ca.trust())
            .settings(crate::replay_plans::settings())
            .start()
            .await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let addr = probe.dependency()["probe_url"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .trim_end_matches("/hook")
            .parse()
            .unwrap();
        let trusted = TlsFront::start(&ca.issue(&["localhost"]), addr).await;
        let untrusted = TlsFront::start(&TestCa::new("other").issue(&["localhost"]), addr).await;
        eligible(&s, "orders", "o", 2, 100, None).await;
        // Over the threshold, read over https: the plan stops on the error rate.
        probe.set(0.4, 20);
        for (front, reason) in [
            (&trusted, "dependency_error_rate"),
            (&untrusted, "budget_unobservable"),
        ] {
            let mut b = budget(&probe, 1.0, 2, 10);
            b["dependency"]["probe_url"] = json!(front.url("/hook"));
            let p = create(&s, json!({"selection": {"queue": "orders"}, "budget": b})).await;
            let id = p["id"].as_str().unwrap().to_owned();
            act(&s, &id, "start").await;
            tick(&s, &ledger, 100).await;
            let p = plan(&s, &id).await;
            assert_eq!(p["status"], "stopped", "{p}");
            assert_eq!(p["stop_reason"], reason, "{p}");
            if reason == "budget_unobservable" {
                let detail = p["stop_detail"].as_str().unwrap();
                assert!(
                    detail.contains("TLS: the server's certificate is not issued"),
                    "{detail}"
                );
            }
        }
        s.stop().await;
    }
}
