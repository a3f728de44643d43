//! `redrive session list` end to end: a queue's sessions as a table and as JSON, paged.

use redrive_api::message::SessionPage;

use crate::support::Server;

#[test]
fn session_list_shows_each_session_and_pages_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    s.cli(&["queue", "create", "orders", "--requires-session"])
        .ok();
    for (session, body) in [("c-2", "x"), ("c-1", "y"), ("c-1", "z")] {
        s.cli(&["send", "orders", body, "--session-id", session])
            .ok();
    }
    // Takes c-1 and one of its messages, and leaves both locked.
    s.cli(&["receive", "orders", "--session", "c-1", "--max", "1"])
        .ok();

    let page: SessionPage = s.cli(&["--json", "session", "list", "orders"]).json();
    let ids: Vec<&str> = page
        .sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect();
    assert_eq!(ids, ["c-1", "c-2"]);
    let c1 = &page.sessions[0];
    assert_eq!((c1.active, c1.in_flight), (1, 1));
    assert!(c1.locked && c1.locked_until.is_some(), "{c1:?}");
    let c2 = &page.sessions[1];
    assert_eq!((c2.active, c2.in_flight, c2.locked), (1, 0, false));
    assert!(page.next.is_none());

    let table = s.cli(&["session", "list", "orders", "--limit", "1"]);
    let out = table.ok();
    assert!(out.starts_with("SESSION"), "{out}");
    assert!(out.contains("c-1") && !out.contains("c-2"), "{out}");
    assert!(out.contains("more: --after c-1"), "{out}");
    let rest = s.cli(&["session", "list", "orders", "--after", "c-1"]);
    let out = rest.ok();
    assert!(out.contains("c-2") && !out.contains("c-1"), "{out}");
    assert!(!out.contains("more:"), "{out}");

    s.cli(&["session", "list", "orders", "--limit", "0"])
        .fails(2, "out of range");
    s.cli(&["session", "list", "nope"])
        .fails(1, "queue_not_found");
}
