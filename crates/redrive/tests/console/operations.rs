//! The operational pages in a browser, one story: sign in; a fresh install's overview
//! (the empty state with the commands that create a first queue); a queue created and a
//! message sent in the console, dead-lettered by a consumer (through the API); the
//! overview's highlight; the entity page with the policy's versions, and a session
//! queue's sessions; the dead letter
//! found by a filter, its evidence, its payload revealed (and the audit entry it wrote);
//! moved to quarantine and restored with its preview; the failures page, a replay
//! plan's dry run seeded with a signature, and a case group made from it and claimed; the quarantine and topics pages; and the narrow layout of a phone. Every page is screenshotted and checked for
//! accessible names and console errors.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{self, NARROW, WIDE};

/// Sends `body` to `queue` (unless the message is already there: `None`), receives the
/// next message and dead-letters it with `reason` and `description`; returns the record's
/// id.
async fn dead_letter(
    c: &harness::Console,
    queue: &str,
    body: Option<&str>,
    reason: &str,
    description: &str,
) -> String {
    if let Some(body) = body {
        let (st, v) = c
            .api(
                Method::POST,
                &format!("/v1/queues/{queue}/messages"),
                Some(json!({"body": body, "content_type": "application/json"})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }
    c.dead_letter_next(queue, reason, description).await
}

async fn area_of(c: &harness::Console, id: &str) -> Value {
    let (st, v) = c
        .api(
            Method::GET,
            &format!("/v1/queues/orders/dead-letters/{id}"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v["area"].clone()
}

#[tokio::test]
async fn an_operator_finds_inspects_reveals_and_restores_a_dead_letter() {
    let Some(c) = harness::start("operations").await else {
        return;
    };

    // Sign in; a fresh install shows how to create a first queue.
    c.sign_in().await;
    c.wait_for_text("No queues yet").await;
    c.wait_for_text("redrive queue create orders --max-delivery-count 3 --lock-duration 30s")
        .await;
    c.check_page("overview-empty").await;

    // A queue created and a message sent in the console.
    c.fill("Queue name", "orders").await;
    c.fill("Max delivery count", "3").await;
    c.click_button("Create queue").await;
    c.wait_for_text("Send a message").await;
    let (st, v) = c.api(Method::GET, "/v1/queues/orders", None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["policy"]["max_delivery_count"], 3, "{v}");
    c.fill("Message body", r#"{"order": 7, "amount": null}"#)
        .await;
    c.click_button("Send message").await;
    c.wait_for_text("Sent message").await;
    c.check_page("entity-sent").await;
    let (_, v) = c.api(Method::GET, "/v1/queues/orders", None).await;
    assert_eq!(v["counts"]["active"], 1, "{v}");

    // Two messages dead-lettered for two reasons (the consumer's side, through the API).
    let wanted = dead_letter(
        &c,
        "orders",
        None,
        "ValidationFailed",
        "no amount on order 7",
    )
    .await;
    let other = dead_letter(
        &c,
        "orders",
        Some(r#"{"order": 8}"#),
        "Timeout",
        "ledger took too long",
    )
    .await;

    // The overview lists the queue and highlights its dead letters.
    c.goto("overview").await;
    c.wait_for_text("orders: 2 dead letters").await;
    c.check_page("overview").await;

    // The entity page: policy, counts, rates, and the policy's versions with what each
    // changed (a change made through the API: version 2).
    let (st, v) = c
        .api(
            Method::PATCH,
            "/v1/queues/orders",
            Some(json!({"max_delivery_count": 5})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    c.goto("entity/orders").await;
    c.wait_for_text("Max delivery count").await;
    c.wait_for_text("Live rates").await;
    c.wait_for_text("Policy versions, newest first").await;
    c.wait_for_text("max_delivery_count: 3 → 5").await;
    c.wait_for_text("This queue does not use sessions.").await;
    c.check_page("entity").await;

    // A session queue's page lists its sessions: one waiting, one held by a consumer.
    let (st, v) = c
        .api(
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "carts", "policy": {"requires_session": true}})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    for session in ["cart-1", "cart-2"] {
        let (st, v) = c
            .api(
                Method::POST,
                "/v1/queues/carts/messages",
                Some(json!({"body": "{}", "session_id": session})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = c
        .api(
            Method::POST,
            "/v1/queues/carts/sessions/accept",
            Some(json!({"session_id": "cart-2"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    c.goto("entity/carts").await;
    c.wait_for_text("Sessions of carts").await;
    c.wait_for_text("cart-1").await;
    c.wait_for_text("held until").await;
    c.check_page("entity-sessions").await;

    // Dead letters: found by a filter on the reason.
    c.goto("dead-letters/orders").await;
    c.wait_for_text("ledger took too long").await;
    c.fill("Reason", "ValidationFailed").await;
    c.click_button("Apply filters").await;
    c.wait_for_text("1 record(s) on page 1").await;
    c.wait_for_text("no amount on order 7").await;
    c.assert_no_text("ledger took too long").await;
    c.check_page("dead-letters-filtered").await;

    // Its evidence.
    c.click_button(&format!("Inspect {wanted}")).await;
    c.wait_for_text(&format!("Evidence of {wanted}")).await;
    let (_, rec) = c
        .api(
            Method::GET,
            "/v1/queues/orders/dead-letters?reason=ValidationFailed",
            None,
        )
        .await;
    let digest = rec["dead_letters"][0]["body_sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    for text in [
        "Bytes digest (SHA-256)",
        digest.as_str(),
        "Attempts",
        "1 (exact)",
        "First attempt",
        "Last attempt",
        "Last outcome",
        "Policy version",
        "Routed by",
        "application",
        "Ordering scope",
    ] {
        c.wait_for_text(text).await;
    }
    // The list was read without payloads: the body is not on the page yet.
    c.assert_no_text("\"amount\": null").await;
    c.check_page("evidence").await;

    // Reveal the payload: the audited single-record read.
    c.click_button("Reveal payload").await;
    c.wait_for_text("\"amount\": null").await;
    c.wait_for_text("recorded in the audit log").await;
    c.assert_audited("dead_letter.read", &wanted).await;
    c.check_page("payload-revealed").await;

    // Move it to quarantine from the evidence panel (confirmed in a dialog).
    c.choose("Move to area", "quarantine").await;
    c.click_button("Move").await;
    c.wait_for_text(&format!("Move {wanted} from live to quarantine?"))
        .await;
    c.screenshot("move-confirm").await;
    c.click_button("Move").await;
    c.wait_for_text(&format!("Moved {wanted} to quarantine."))
        .await;
    assert_eq!(area_of(&c, &wanted).await, "quarantine");

    // Quarantine: restore with its preview.
    c.goto("quarantine").await;
    c.wait_for_text("Replay status per entity").await;
    c.wait_for_text("Quarantined in orders").await;
    c.check_page("quarantine").await;
    c.click_button(&format!("Restore {wanted}")).await;
    c.wait_for_text("Events the next judgement republishes")
        .await;
    c.screenshot("restore-preview").await;
    c.click_button("Restore").await;
    c.wait_for_text(&format!("Restored {wanted} to live."))
        .await;
    assert_eq!(area_of(&c, &wanted).await, "live");
    assert_eq!(area_of(&c, &other).await, "live");
    c.check_page("quarantine-restored").await;

    // Failures by signature: both shapes, with the link that filters the list.
    c.goto("failures").await;
    c.wait_for_text("Failures by signature").await;
    c.wait_for_text("ValidationFailed").await;
    c.check_page("failures").await;
    c.click_link("Show dead letters").await;
    c.wait_for_text("Dead letters of orders").await;
    c.check_page("failures-to-dead-letters").await;

    // "Plan a replay" seeds a plan's selection with the signature: its dry run holds the
    // one open case of that shape.
    c.goto("failures").await;
    c.wait_for_text("ValidationFailed").await;
    c.click_link("Plan a replay").await;
    c.wait_for_text("New plan").await;
    let seeded = c
        .eval("return document.querySelector('input[name=signature]').value")
        .await;
    assert!(
        seeded.as_str().is_some_and(|s| s.len() == 32),
        "the signature was not seeded: {seeded}"
    );
    c.fill("Dependency name", "ledger").await;
    c.fill("Dependency probe URL", "http://127.0.0.1:9/health")
        .await;
    c.click_button("Preview (dry run)").await;
    c.wait_for_text("Dry run").await;
    c.wait_for_text("1 item,").await;
    c.check_page("plan-by-signature").await;

    // A shape's open cases worked as one: a case group made from the failures page, then
    // claimed as a group on its page (one decision, each member's outcome shown).
    c.goto("failures").await;
    c.wait_for_text("ValidationFailed").await;
    c.click_button("Work as a case group").await;
    c.wait_for_text("Case group grp_").await;
    c.wait_for_text("Members as they are now").await;
    c.check_page("case-group").await;
    c.click_button("Claim the group").await;
    c.wait_for_text("Claim: 1 of 1 member took it").await;
    c.wait_for_text("Each member's outcome").await;
    let (st, groups) = c.api(Method::GET, "/v1/case-groups", None).await;
    assert_eq!(st, 200, "{groups}");
    let group = &groups["groups"][0];
    assert_eq!(group["size"], 1, "{groups}");
    assert_eq!(group["decisions"], 1, "{groups}");
    c.check_page("case-group-claimed").await;

    // Topics: a topic with a pull subscription.
    let (st, v) = c
        .api(Method::POST, "/v1/topics", Some(json!({"name": "events"})))
        .await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = c
        .api(
            Method::POST,
            "/v1/topics/events/subscriptions",
            Some(json!({"name": "audit", "type": "pull"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    c.goto("topics").await;
    c.wait_for_text("Topic events").await;
    c.wait_for_text("pull").await;
    c.check_page("topics").await;

    // A phone: the navigation collapses behind Menu; nothing overflows the page sideways.
    c.window(NARROW).await;
    c.goto("dead-letters/orders").await;
    c.wait_for_text("no amount on order 7").await;
    let nav_hidden = c
        .eval("return getComputedStyle(document.querySelector('nav.nav')).display === 'none'")
        .await;
    assert_eq!(
        nav_hidden,
        Value::Bool(true),
        "the navigation is shown on a phone"
    );
    // Nothing outside a scrolling box (a table's, a code block's) reaches past the right
    // edge of the screen.
    let overflowing = c
        .eval(
            "const boxed = (el) => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
               if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true; } return false; };
             return [...document.body.querySelectorAll('*')]
               .filter((el) => el.getClientRects().length && !boxed(el) && el.getBoundingClientRect().right > window.innerWidth + 1)
               .map((el) => el.outerHTML.slice(0, 120));",
        )
        .await;
    assert_eq!(overflowing, json!([]), "the page is wider than a phone");
    c.check_page("narrow-dead-letters").await;
    c.click_button("Menu").await;
    c.wait_for_text("Quarantine").await;
    c.click_link("Overview").await;
    c.wait_for_text("orders: 2 dead letters").await;
    c.check_page("narrow-overview").await;
    c.window(WIDE).await;

    // Signing out forgets the token: the sign-in screen again.
    c.click_button("Sign out").await;
    c.wait_for_text("Sign in to redrive").await;
    let kept = c
        .eval("return sessionStorage.getItem('redrive.token')")
        .await;
    assert_eq!(kept, Value::Null);
    c.check_page("signed-out").await;
    c.finish().await;
}
