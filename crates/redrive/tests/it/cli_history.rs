//! `redrive queue history` (a queue's policy versions, as a table and as JSON, paged) and
//! `redrive replay preview --signature` (a plan's selection by failure signature), end to
//! end against a real server.

use redrive_api::failure::FailurePage;
use redrive_api::queue::PolicyVersionList;
use serde_json::Value;

use crate::support::Server;

fn server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Server::start(dir.path()), dir)
}

#[test]
fn queue_history_lists_every_policy_version_newest_first() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders", "--max-delivery-count", "3"])
        .ok();
    for n in ["4", "5"] {
        s.cli(&["queue", "update", "orders", "--max-delivery-count", n])
            .ok();
    }
    let page: PolicyVersionList = s.cli(&["--json", "queue", "history", "orders"]).json();
    let seen: Vec<(u64, u32)> = page
        .versions
        .iter()
        .map(|v| (v.version, v.policy.max_delivery_count))
        .collect();
    assert_eq!(seen, [(3, 5), (2, 4), (1, 3)]);
    assert_eq!(page.next, None);

    let table = s.cli(&["queue", "history", "orders", "--limit", "2"]);
    let text = table.ok();
    assert!(text.starts_with("VERSION"), "{text}");
    assert!(text.contains("\"max_delivery_count\":5"), "{text}");
    assert!(!text.contains("\"max_delivery_count\":3"), "{text}");
    assert!(text.contains("more: --before 2"), "{text}");
    let rest: PolicyVersionList = s
        .cli(&["--json", "queue", "history", "orders", "--before", "2"])
        .json();
    assert_eq!(
        rest.versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        [1]
    );

    s.cli(&["queue", "history", "orders", "--limit", "0"])
        .fails(2, "out of range");
    s.cli(&["queue", "history", "orders", "--limit", "101"])
        .fails(2, "out of range");
    s.cli(&["queue", "history", "nope"])
        .fails(1, "queue_not_found");
}

/// Sends `body` to `orders` and dead-letters it with `reason` and `description`.
fn dead_letter(s: &Server, body: &str, reason: &str, description: &str) {
    s.cli(&["send", "orders", body, "--type", "order.created"])
        .ok();
    let out = s.cli(&[
        "receive",
        "orders",
        "--dead-letter",
        reason,
        "--description",
        description,
    ]);
    assert!(out.ok().contains("dead-lettered"), "{}", out.stdout);
}

#[test]
fn replay_preview_by_signature_selects_that_shape_only() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders"]).ok();
    s.cli(&["queue", "create", "other"]).ok();
    dead_letter(&s, "a", "BadInput", "no amount in order ord_7Hx91KzQ");
    dead_letter(&s, "b", "BadInput", "no amount in order ord_3Jd82LpA");
    dead_letter(&s, "c", "Unpriced", "no price for sku 4411");
    let page: FailurePage = s.cli(&["--json", "failures"]).json();
    let sig = page
        .signatures
        .iter()
        .find(|f| f.reason == "BadInput")
        .unwrap()
        .id
        .clone();
    let budget = [
        "--items-per-s",
        "1",
        "--bytes-per-s",
        "64KiB",
        "--concurrency",
        "2",
        "--dependency",
        "ledger",
        "--probe",
        "http://ledger/health",
        "--max-error-rate",
        "0.05",
        "--max-latency",
        "250ms",
    ];
    let mut args = vec!["--json", "replay", "preview", "--signature", sig.as_str()];
    args.extend(budget);
    let p: Value = s.cli(&args).json();
    assert_eq!(p["items"], 2, "{p}");
    assert_eq!(p["by_reason"], serde_json::json!({"BadInput": 2}), "{p}");

    let mut args = vec!["replay", "preview", "other", "--signature", sig.as_str()];
    args.extend(budget);
    s.cli(&args).fails(2, "selection.signature");
    let mut args = vec![
        "replay",
        "preview",
        "--signature",
        sig.as_str(),
        "--case",
        "case_x",
    ];
    args.extend(budget);
    s.cli(&args).fails(2, "cannot be used with");
}
