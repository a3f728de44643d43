//! Recovery cases from the CLI end to end: a dead letter opens a case that the server's
//! case worker advances; `case list|counts|show` read it; two operators' tokens show that
//! one owner at a time works a case (`case claim`, then diagnose, correct, note); a bad
//! correction kind is refused before anything is sent; `intent cancel` closes the case;
//! and `effect-authority set|list|delete` round-trips.

use std::time::{Duration, Instant};

use redrive_api::case::{Case, CaseCounts, CasePage, EffectAuthorityList, Intent};

use crate::support::{Server, printed_admin_token};

/// How long the server's case worker may take to advance a new case on a busy machine
/// before the test gives up; not a timing rule of the broker.
const WORKER_BOUND: Duration = Duration::from_secs(60);

/// A token named `name` with `grant`, created by `admin`; returns its secret.
fn token(s: &Server, admin: &str, name: &str, grant: &str) -> String {
    let created: serde_json::Value = s
        .cli(&[
            "--token", admin, "--json", "token", "create", "--name", name, "--grant", grant,
        ])
        .json();
    created["secret"].as_str().unwrap().to_owned()
}

/// Polls `case list --json` (bounded) until the queue's one case has left
/// `route_observed`, and returns it.
fn advanced_case(s: &Server, token: &str, queue: &str) -> CasePage {
    let started = Instant::now();
    loop {
        let page: CasePage = s
            .cli(&["--token", token, "--json", "case", "list", "--queue", queue])
            .json();
        if page.cases.iter().any(|c| c.state != "route_observed") {
            return page;
        }
        assert!(
            started.elapsed() < WORKER_BOUND,
            "the case worker never advanced the case: {page:?}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn show(s: &Server, token: &str, id: &str) -> Case {
    s.cli(&["--token", token, "--json", "case", "show", id])
        .json()
}

#[test]
fn a_dead_letter_opens_a_case_one_owner_works_and_a_cancelled_intent_closes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_native(dir.path(), true);
    let admin = printed_admin_token(&s.log());
    let alice = token(&s, &admin, "alice", "operator:orders");
    let bob = token(&s, &admin, "bob", "operator:orders");

    s.cli(&["--token", &admin, "queue", "create", "orders"])
        .ok();
    s.cli(&[
        "--token",
        &admin,
        "send",
        "orders",
        "poison pill",
        "--message-id",
        "p1",
    ])
    .ok();
    s.cli(&[
        "--token",
        &admin,
        "receive",
        "orders",
        "--dead-letter",
        "BadInput",
        "--description",
        "cannot parse",
    ])
    .ok();

    let page = advanced_case(&s, &alice, "orders");
    assert_eq!(page.cases.len(), 1, "{page:?}");
    let id = page.cases[0].id.clone();
    assert_eq!(page.cases[0].reason, "BadInput");
    assert_eq!(page.cases[0].intent_id, "p1");

    let table = s.cli(&["--token", &alice, "case", "list", "--reason", "BadInput"]);
    assert!(table.ok().starts_with("ID "), "{}", table.stdout);
    assert!(table.stdout.contains(&id), "{}", table.stdout);
    let none = s.cli(&[
        "--token", &alice, "case", "list", "--queue", "orders", "--reason", "Other",
    ]);
    assert!(none.ok().contains("no cases"), "{}", none.stdout);
    let counts: CaseCounts = s
        .cli(&[
            "--token", &alice, "--json", "case", "counts", "--queue", "orders",
        ])
        .json();
    assert_eq!(counts.total, 1);
    assert_eq!(counts.by_reason.get("BadInput"), Some(&1));

    let text = s.cli(&["--token", &alice, "case", "show", &id]);
    let out = text.ok();
    assert!(out.contains("timeline:"), "{out}");
    let entries: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "timeline:")
        .skip(1)
        .collect();
    assert!(
        entries[0].contains(" broker  route_observed  "),
        "first timeline line: {out}"
    );

    // The exact bytes are a separate read, for a payload reader (here the admin).
    let payload = s.cli(&["--token", &admin, "case", "payload", &id]);
    assert_eq!(payload.ok(), "poison pill");
    s.cli(&["--token", &alice, "case", "payload", &id])
        .fails(1, "payload-reader");

    // Nobody holds it: a change without a claim is refused, naming why.
    s.cli(&[
        "--token",
        &bob,
        "case",
        "diagnose",
        &id,
        "--hypothesis",
        "h",
        "--disconfirming",
        "e",
    ])
    .fails(1, "not_case_owner");

    let claimed = s.cli(&["--token", &alice, "case", "claim", &id, "--lease", "15m"]);
    assert!(claimed.ok().contains("as alice"), "{}", claimed.stdout);
    // Another operator's claim is refused with the owner's name.
    let refused = s.cli(&["--token", &bob, "case", "claim", &id]);
    refused.fails(1, "claimed by alice");
    assert!(
        refused.stderr.contains("case_claimed"),
        "{}",
        refused.stderr
    );
    let mine: CasePage = s
        .cli(&[
            "--token", &alice, "--json", "case", "list", "--owner", "alice",
        ])
        .json();
    assert_eq!(mine.cases.len(), 1);

    s.cli(&[
        "--token",
        &alice,
        "case",
        "diagnose",
        &id,
        "--hypothesis",
        "the producer sends a truncated body",
        "--disconfirming",
        "a full body from the same producer fails too",
    ])
    .ok();
    let corrected = s.cli(&[
        "--token",
        &alice,
        "case",
        "correct",
        &id,
        "--kind",
        "code",
        "--identity",
        "commit 1a2b3c",
        "--addresses",
        "truncated body",
    ]);
    // The line says where the case stands after the broker's own next step.
    assert!(
        corrected
            .ok()
            .starts_with(&format!("corrected {id}: state ")),
        "{}",
        corrected.stdout
    );
    s.cli(&["--token", &alice, "case", "note", &id, "deploying the fix"])
        .ok();
    let worked = show(&s, &alice, &id);
    let states: Vec<&str> = worked.timeline.iter().map(|e| e.state.as_str()).collect();
    assert!(states.contains(&"diagnosis_proposed"), "{states:?}");
    assert!(states.contains(&"correction_identified"), "{states:?}");
    // A note is kept in the case's record, not on the timeline.
    let notes = worked.record["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{}", worked.record);
    assert_eq!(notes[0]["text"], "deploying the fix");
    assert_eq!(notes[0]["actor"], "alice");

    // A kind that is not one is refused before anything is sent; nothing changes.
    s.cli(&[
        "--token",
        &alice,
        "case",
        "correct",
        &id,
        "--kind",
        "nonsense",
        "--identity",
        "x",
        "--addresses",
        "y",
    ])
    .fails(2, "nonsense");
    assert_eq!(
        show(&s, &alice, &id).summary.version,
        worked.summary.version
    );

    // The producer withdraws the intent: the open case closes as cancelled.
    let intent: Intent = s
        .cli(&[
            "--token",
            &admin,
            "--json",
            "intent",
            "cancel",
            "p1",
            "--reason",
            "order withdrawn",
        ])
        .json();
    assert_eq!(intent.status, "cancelled");
    assert_eq!(intent.closed, std::slice::from_ref(&id));
    let closed = show(&s, &alice, &id);
    assert_eq!(closed.summary.state, "cancelled");
    assert!(closed.summary.closed_at.is_some());
    let shown = s.cli(&["--token", &alice, "intent", "show", "p1"]);
    assert!(shown.ok().contains("cancelled"), "{}", shown.stdout);
}

#[test]
fn effect_authorities_set_list_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_native(dir.path(), false);
    let set = s.cli(&[
        "effect-authority",
        "set",
        "order.created",
        "http://ledger.example.invalid/effects",
        "--timeout",
        "2s",
    ]);
    assert!(set.ok().contains("timeout 2s"), "{}", set.stdout);
    let list: EffectAuthorityList = s.cli(&["--json", "effect-authority", "list"]).json();
    assert_eq!(list.authorities.len(), 1);
    assert_eq!(list.authorities[0].message_type, "order.created");
    assert_eq!(
        list.authorities[0].url,
        "http://ledger.example.invalid/effects"
    );
    assert_eq!(list.authorities[0].timeout_ms, 2000);
    let table = s.cli(&["effect-authority", "list"]);
    assert!(table.ok().contains("order.created"), "{}", table.stdout);

    s.cli(&["effect-authority", "delete", "order.created"]).ok();
    let empty = s.cli(&["effect-authority", "list"]);
    assert!(
        empty.ok().contains("no effect authorities"),
        "{}",
        empty.stdout
    );
    s.cli(&["effect-authority", "delete", "order.created"])
        .fails(1, "not_found");
}
