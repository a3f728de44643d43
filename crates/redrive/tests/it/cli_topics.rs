//! The topic commands end to end against a real server: topics, pull and push
//! subscriptions (a real HTTP receiver), publishing, stats, pause/resume, the delete
//! rules, and refusal of bad input.

use std::time::Duration;

use redrive_api::message::MessageList;
use redrive_api::topic::{SubscriptionInfo, SubscriptionList, TopicInfo, TopicList};
use redrive_testkit::{Receiver, Reply};
use serde_json::Value;

use crate::support::Server;

/// A push endpoint (the kit's receiver: agrees to validation, answers 200) on a runtime
/// of its own, since the test itself is synchronous.
fn receiver() -> (Receiver, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let rx = rt.block_on(Receiver::webhook(|_, _| Reply::status(200)));
    (rx, rt)
}

fn sub_show(s: &Server, name: &str) -> SubscriptionInfo {
    s.cli(&["--json", "sub", "show", "orders", name]).json()
}

#[test]
fn topics_subscriptions_publish_and_stats() {
    let dir = tempfile::tempdir().unwrap();
    // The receiver is on loopback, which push endpoints may only be when allowed.
    let s = Server::start_with(|c| {
        c.args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("REDRIVE_PUSH_ALLOWED_NETWORKS", "127.0.0.0/8, ::1");
    });
    let (rx, rt) = receiver();
    let url = rx.url.clone();

    assert!(
        s.cli(&[
            "topic",
            "create",
            "orders",
            "--duplicate-detection-window",
            "10m"
        ])
        .ok()
        .contains("created topic orders")
    );
    let t: TopicInfo = s.cli(&["--json", "topic", "show", "orders"]).json();
    assert_eq!(t.policy.duplicate_detection_window_ms, 600_000);
    let l: TopicList = s.cli(&["--json", "topic", "list"]).json();
    assert_eq!(l.topics.len(), 1);

    // A pull subscription for one event type; a push subscription to the receiver.
    s.cli(&[
        "sub",
        "create",
        "orders",
        "created",
        "--type",
        "order.created",
    ])
    .ok();
    s.cli(&["sub", "create", "orders", "hook", "--push", &url])
        .fails(2, "dead_letter_destination_required");
    s.cli(&[
        "sub",
        "create",
        "orders",
        "hook",
        "--push",
        &url,
        "--dead-letter",
        "own",
        "--max-attempts",
        "3",
    ])
    .ok();
    let hook = sub_show(&s, "hook");
    assert_eq!(hook.retry_policy.max_delivery_attempts, 3);

    let out = s.cli(&[
        "publish",
        "orders",
        "--type",
        "order.created",
        "--source",
        "/shop",
        "--id",
        "1",
        r#"{"n":1}"#,
    ]);
    assert!(out.ok().contains("published event 1"), "{}", out.stdout);
    let again = s.cli(&[
        "publish",
        "orders",
        "--type",
        "order.created",
        "--source",
        "/shop",
        "--id",
        "1",
        r#"{"n":1}"#,
    ]);
    assert!(again.ok().contains("duplicate"), "{}", again.stdout);
    s.cli(&[
        "publish",
        "orders",
        "--type",
        "order.shipped",
        "--source",
        "/shop",
        "--id",
        "2",
        "shipped",
    ])
    .ok();

    // The pull subscription has the one matching event, once.
    assert_eq!(sub_show(&s, "created").stats.pending, 1);
    let got: MessageList = s.cli(&["--json", "peek", "orders.created"]).json();
    assert_eq!(got.messages.len(), 1);
    let body: Value = serde_json::from_str(&got.messages[0].body).unwrap();
    assert_eq!(body["id"], "1");
    assert_eq!(body["data"]["n"], 1);

    // The push subscription delivers both events; the receiver says when they are in.
    rt.block_on(rx.wait_for(2));
    // The server counts each delivery once its answer is back (bounded wait on a real
    // server).
    let mut hook = sub_show(&s, "hook");
    for _ in 0..500 {
        if hook.stats.delivered == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        hook = sub_show(&s, "hook");
    }
    assert_eq!(hook.stats.delivered, 2, "{:?}", hook.stats);
    assert_eq!(rx.deliveries().len(), 2);
    let shown = s.cli(&["sub", "show", "orders", "hook"]);
    assert!(shown.ok().contains("delivered"), "{}", shown.stdout);

    // Pause and resume show in stats and in the listing.
    s.cli(&["sub", "pause", "orders", "hook"]).ok();
    assert!(sub_show(&s, "hook").stats.paused);
    let table = s.cli(&["sub", "list", "orders"]);
    assert!(table.ok().starts_with("SUBSCRIPTION"), "{}", table.stdout);
    s.cli(&["sub", "resume", "orders", "hook"]).ok();
    let subs: SubscriptionList = s.cli(&["--json", "sub", "list", "orders"]).json();
    assert!(subs.subscriptions.iter().all(|s| !s.paused));

    // A subscription with undelivered events needs --force; so does a topic with
    // subscriptions.
    s.cli(&["sub", "delete", "orders", "created"])
        .fails(1, "subscription_not_empty");
    assert!(
        s.cli(&["sub", "delete", "orders", "created", "--force"])
            .ok()
            .contains("1 undelivered events discarded")
    );
    s.cli(&["topic", "delete", "orders"])
        .fails(1, "topic_has_subscriptions");
    s.cli(&["topic", "delete", "orders", "--force"]).ok();
    s.cli(&["topic", "show", "orders"])
        .fails(1, "topic_not_found");

    // Bad input: a clear message, exit 2, nothing sent.
    s.cli(&["sub", "create", "orders", "x", "--dead-letter", "somewhere"])
        .fails(2, "invalid dead-letter destination");
    s.cli(&["publish", "orders", "--type", "t"])
        .fails(2, "--source");
}
