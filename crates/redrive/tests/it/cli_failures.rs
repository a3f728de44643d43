//! `redrive failures` end to end: dead letters grouped by failure signature, as a table
//! and as JSON, and `dlq list --signature` and the other list filters.

use redrive_api::dead_letter::DeadLetterPage;
use redrive_api::failure::FailurePage;

use crate::support::Server;

fn server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Server::start(dir.path()), dir)
}

/// Sends `body` to `queue` with `message_type` and dead-letters it.
fn dead_letter(s: &Server, queue: &str, body: &str, reason: &str, description: &str) {
    s.cli(&["send", queue, body, "--type", "order.created"])
        .ok();
    let out = s.cli(&[
        "receive",
        queue,
        "--dead-letter",
        reason,
        "--description",
        description,
    ]);
    assert!(out.ok().contains("dead-lettered"), "{}", out.stdout);
}

#[test]
fn failures_groups_dead_letters_by_signature_and_dlq_list_filters_by_it() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "billing"]).ok();
    let empty = s.cli(&["failures"]);
    assert!(empty.ok().contains("no failures"), "{}", empty.stdout);
    dead_letter(
        &s,
        "billing",
        "a",
        "BadInput",
        "no amount in order ord_7Hx91KzQ",
    );
    dead_letter(
        &s,
        "billing",
        "b",
        "BadInput",
        "no amount in order ord_3Jd82LpA",
    );
    dead_letter(&s, "billing", "c", "Unpriced", "no price for sku 4411");

    let page: FailurePage = s.cli(&["--json", "failures"]).json();
    assert_eq!(page.signatures.len(), 2, "{page:?}");
    let grouped = page
        .signatures
        .iter()
        .find(|f| f.reason == "BadInput")
        .unwrap();
    assert_eq!(grouped.count, 2);
    assert_eq!(grouped.live, 2);
    assert_eq!(grouped.description, "no amount in order <id>");
    assert_eq!(grouped.message_type.as_deref(), Some("order.created"));
    assert_eq!(grouped.sparkline.len(), 24);
    assert!(page.next_cursor.is_none());

    let table = s.cli(&["failures", "--queue", "billing"]);
    let out = table.ok();
    assert!(out.contains(&grouped.id), "{out}");
    assert!(out.contains("no amount in order <id>"), "{out}");
    assert!(out.contains("handler_error"), "{out}");

    // One signature's records, by the id the table shows.
    let records: DeadLetterPage = s
        .cli(&[
            "--json",
            "dlq",
            "list",
            "billing",
            "--signature",
            &grouped.id,
        ])
        .json();
    let bodies: Vec<_> = records
        .dead_letters
        .iter()
        .map(|d| d.body.clone().unwrap_or_default())
        .collect();
    assert_eq!(bodies, ["a", "b"]);
    let by_text: DeadLetterPage = s
        .cli(&["--json", "dlq", "list", "billing", "--text", "NO PRICE"])
        .json();
    assert_eq!(by_text.dead_letters.len(), 1);
    let by_type: DeadLetterPage = s
        .cli(&[
            "--json",
            "dlq",
            "list",
            "billing",
            "--type",
            "order.created",
        ])
        .json();
    assert_eq!(by_type.dead_letters.len(), 3);

    // Paging, and bad input refused with the usage or the server's reason.
    let first: FailurePage = s.cli(&["--json", "failures", "--limit", "1"]).json();
    let cursor = first.next_cursor.clone().unwrap();
    let out = s.cli(&["failures", "--limit", "1"]);
    assert!(out.ok().contains("more: --cursor"), "{}", out.stdout);
    let second: FailurePage = s
        .cli(&["--json", "failures", "--limit", "1", "--cursor", &cursor])
        .json();
    assert_eq!(second.signatures.len(), 1);
    assert_ne!(second.signatures[0].id, first.signatures[0].id);
    s.cli(&["failures", "--limit", "501"]).fails(2, "501");
    s.cli(&["failures", "--area", "lost"]).fails(2, "area");
    // The server's refusal of a bad value is a usage error too.
    s.cli(&["failures", "--cursor", "nonsense"])
        .fails(2, "invalid_request");
    s.cli(&["failures", "--queue", "missing"])
        .fails(1, "queue_not_found");
    s.cli(&["dlq", "list", "billing", "--signature", "xyz"])
        .fails(2, "invalid_request");
}
