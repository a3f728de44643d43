//! Case groups from the CLI end to end, against a real server with authentication: three
//! dead letters of one failure become one group; one owner claims, diagnoses, corrects
//! and tests them by one command each; a case someone else holds is named as refused
//! and the command exits 5 while the others take the decision; `case group show` prints
//! the decisions and the members; a bad vocabulary word exits 2 before anything is
//! sent; and `replay preview --group` selects the group's members.

use std::time::{Duration, Instant};

use redrive_api::case::{CaseGroup, CasePage};

use crate::support::{Server, printed_admin_token};

/// How long the server's case worker may take to advance new cases on a busy machine
/// before the test gives up; not a timing rule of the broker.
const WORKER_BOUND: Duration = Duration::from_secs(60);

fn token(s: &Server, admin: &str, name: &str, grants: &[&str]) -> String {
    let mut args = vec![
        "--token", admin, "--json", "token", "create", "--name", name,
    ];
    for g in grants {
        args.extend(["--grant", g]);
    }
    let created: serde_json::Value = s.cli(&args).json();
    created["secret"].as_str().unwrap().to_owned()
}

/// Waits (bounded) until every open case of `queue` has left `route_observed`.
fn advanced(s: &Server, token: &str, queue: &str, n: usize) -> CasePage {
    let started = Instant::now();
    loop {
        let page: CasePage = s
            .cli(&["--token", token, "--json", "case", "list", "--queue", queue])
            .json();
        if page.cases.len() == n && page.cases.iter().all(|c| c.state != "route_observed") {
            return page;
        }
        assert!(
            started.elapsed() < WORKER_BOUND,
            "the case worker never advanced the cases: {page:?}\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_group_is_worked_by_one_command_per_decision() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_native(dir.path(), true);
    let admin = printed_admin_token(&s.log());
    let alice = token(
        &s,
        &admin,
        "alice",
        &[
            "operator:orders",
            "payload-reader:orders",
            "producer:orders-sandbox",
            "replayer:orders",
        ],
    );
    let bob = token(&s, &admin, "bob", &["operator:orders"]);
    s.cli(&["--token", &admin, "queue", "create", "orders"])
        .ok();
    s.cli(&[
        "--token",
        &admin,
        "queue",
        "create",
        "orders-sandbox",
        "--test-sandbox",
    ])
    .ok();
    for (k, order) in ["ord_7Hx91KzQ", "ord_3Jd82LpA", "ord_9Qw55TnB"]
        .iter()
        .enumerate()
    {
        let id = format!("o-{k}");
        let body = format!("{{\"order\":\"{order}\"}}");
        s.cli(&[
            "--token",
            &admin,
            "send",
            "orders",
            &body,
            "--message-id",
            &id,
        ])
        .ok();
        s.cli(&[
            "--token",
            &admin,
            "receive",
            "orders",
            "--dead-letter",
            "ValidationFailed",
            "--description",
            &format!("no amount in order {order}"),
        ])
        .ok();
    }
    let page = advanced(&s, &alice, "orders", 3);
    let held = page.cases[1].id.clone();
    s.cli(&["--token", &bob, "case", "claim", &held]).ok();

    let shown = s.cli(&["--token", &alice, "case", "show", &page.cases[0].id]);
    assert!(
        shown.ok().contains("no amount in order <id>"),
        "the signature is shown: {}",
        shown.stdout
    );
    let group: CaseGroup = s
        .cli(&[
            "--token",
            &alice,
            "--json",
            "case",
            "group",
            "create",
            "orders",
            "--reason",
            "ValidationFailed",
            "--signature",
            "no amount in order <id>",
        ])
        .json();
    assert_eq!(group.size, 3, "{group:?}");
    let gid = group.id.clone();

    // Bob's case refuses each decision, alone: named, exit 5; the others take it.
    let claimed = s.cli(&[
        "--token", &alice, "case", "group", "claim", &gid, "--lease", "1h",
    ]);
    claimed.fails(5, "1 of the 3 cases");
    assert!(
        claimed.stdout.contains(&format!("refused {held}"))
            && claimed.stdout.contains("case_conflict:case_claimed")
            && claimed.stdout.contains("claimed 2 of 3 cases"),
        "{}",
        claimed.stdout
    );
    s.cli(&[
        "--token",
        &alice,
        "case",
        "group",
        "diagnose",
        &gid,
        "--hypothesis",
        "the v2 parser drops amounts",
        "--disconfirming",
        "v1 parses the same bytes",
    ])
    .fails(5, "refused the decision");
    // A word outside the vocabulary: refused before anything is sent.
    s.cli(&[
        "--token",
        &alice,
        "case",
        "group",
        "correct",
        &gid,
        "--kind",
        "magic",
        "--identity",
        "x",
        "--addresses",
        "y",
    ])
    .fails(2, "magic");
    s.cli(&[
        "--token",
        &alice,
        "case",
        "group",
        "correct",
        &gid,
        "--kind",
        "code",
        "--identity",
        "commit abc123",
        "--addresses",
        "no amount in order <id>",
    ])
    .fails(5, "refused the decision");
    s.cli(&[
        "--token",
        &alice,
        "case",
        "group",
        "test",
        &gid,
        "--destination",
        "orders-sandbox",
        "--send",
        "--outcome",
        "pass",
        "--evidence",
        "sandbox consumer completed",
    ])
    .fails(5, "refused the decision");
    let text = s.cli(&["--token", &alice, "case", "group", "show", &gid]);
    let out = text.ok();
    for needle in [
        "decisions:",
        "claim  applied 2 refused 1",
        "diagnose  applied 2 refused 1",
        "hypothesis=the v2 parser drops amounts",
        "test  applied 2 refused 1",
        "correction_isolated=2",
        &held,
    ] {
        assert!(out.contains(needle), "{needle:?} in:\n{out}");
    }
    let listed = s.cli(&[
        "--token", &alice, "case", "group", "list", "--queue", "orders",
    ]);
    assert!(listed.ok().contains(&gid), "{}", listed.stdout);

    // The plan's dry run of the group: its three members, the queue left out.
    let preview: serde_json::Value = s
        .cli(&[
            "--token",
            &alice,
            "--json",
            "replay",
            "preview",
            "--group",
            &gid,
            "--items-per-s",
            "1",
            "--bytes-per-s",
            "64KiB",
            "--concurrency",
            "2",
            "--dependency",
            "ledger-db",
            "--probe",
            "http://ledger.internal/health",
            "--max-error-rate",
            "0.05",
            "--max-latency",
            "250ms",
        ])
        .json();
    assert_eq!(preview["items"], 3, "{preview}");
    s.cli(&["--token", &alice, "replay", "preview"])
        .fails(2, "<QUEUE>");
}
