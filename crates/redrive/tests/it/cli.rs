//! The operator CLI end to end against a real server: queues, messages, dead letters,
//! stats, `--json`, and refusal of bad input with a clear message and exit code.

use redrive_api::dead_letter::{DeadLetter, DeadLetterPage};
use redrive_api::message::{BodyEncoding, MessageList, SendResponse};
use redrive_api::queue::{Backoff, QueueInfo, QueueList};
use redrive_api::topic::SubscriptionInfo;
use serde_json::{Value, json};

use crate::support::{Server, cli, free_port};

fn server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Server::start(dir.path()), dir)
}

#[test]
fn queue_create_show_list_update_and_delete() {
    let (s, _dir) = server();
    let out = s.cli(&[
        "queue",
        "create",
        "orders",
        "--lock-duration",
        "5s",
        "--max-delivery-count",
        "4",
        "--default-ttl",
        "1h",
        "--backoff",
        "exponential:100ms:10s:0.5",
        "--dead-letter-on-expiry",
    ]);
    assert!(out.ok().contains("created queue orders"), "{}", out.stdout);

    let q: QueueInfo = s.cli(&["--json", "queue", "show", "orders"]).json();
    assert_eq!(q.name, "orders");
    assert_eq!(q.policy.lock_duration_ms, 5_000);
    assert_eq!(q.policy.max_delivery_count, 4);
    assert_eq!(q.policy.default_ttl_ms, Some(3_600_000));
    assert!(q.policy.dead_letter_on_expiry);
    assert_eq!(
        q.policy.redelivery_backoff,
        Backoff::Exponential {
            initial_ms: 100,
            max_ms: 10_000,
            jitter: 0.5
        }
    );
    let table = s.cli(&["queue", "show", "orders"]);
    assert!(table.ok().contains("lock_duration:"), "{}", table.stdout);
    assert!(table.stdout.contains("5s"), "{}", table.stdout);

    s.cli(&["queue", "create", "audit"]).ok();
    let list: QueueList = s.cli(&["--json", "queue", "list"]).json();
    let names: Vec<&str> = list.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["audit", "orders"]);
    let table = s.cli(&["queue", "list"]);
    assert!(table.ok().starts_with("NAME"), "{}", table.stdout);
    assert!(table.stdout.contains("orders"));

    // Update sends only the given fields: the lock duration stays.
    let q: QueueInfo = s
        .cli(&[
            "--json",
            "queue",
            "update",
            "orders",
            "--max-delivery-count",
            "7",
        ])
        .json();
    assert_eq!(q.policy.max_delivery_count, 7);
    assert_eq!(q.policy.lock_duration_ms, 5_000);
    assert_eq!(q.policy_version, 2);
    // A backoff of another kind replaces the old one entirely; `none` clears the TTL.
    let q: QueueInfo = s
        .cli(&[
            "--json",
            "queue",
            "update",
            "orders",
            "--backoff",
            "fixed:2s",
            "--default-ttl",
            "none",
        ])
        .json();
    assert_eq!(
        q.policy.redelivery_backoff,
        Backoff::Fixed { delay_ms: 2_000 }
    );
    assert_eq!(q.policy.default_ttl_ms, None);
    s.cli(&["queue", "update", "orders"])
        .fails(2, "nothing to update");

    s.cli(&["queue", "create", "orders"])
        .fails(1, "queue_exists");

    s.cli(&["send", "orders", "keep me"]).ok();
    s.cli(&["queue", "delete", "orders"])
        .fails(1, "queue_not_empty");
    assert!(
        s.cli(&["queue", "delete", "orders", "--force"])
            .ok()
            .contains("deleted queue orders")
    );
    s.cli(&["queue", "show", "orders"])
        .fails(1, "queue_not_found");
    let list: QueueList = s.cli(&["--json", "queue", "list"]).json();
    assert_eq!(list.queues.len(), 1);
}

#[test]
fn send_from_argument_file_and_stdin_then_receive_complete_and_peek() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "work"]).ok();

    let sent: SendResponse = s
        .cli(&[
            "--json",
            "send",
            "work",
            "from argument",
            "--message-id",
            "m-arg",
            "--property",
            "n=42",
            "--property",
            "ok=true",
            "--property",
            "s=\"7\"",
            "--correlation-id",
            "c-1",
            "--content-type",
            "text/plain",
        ])
        .json();
    assert_eq!(sent.results[0].message_id, "m-arg");
    assert!(!sent.results[0].duplicate);

    let file = dir.path().join("body.json");
    std::fs::write(&file, b"{\"from\":\"file\"}").unwrap();
    let out = s.cli(&[
        "send",
        "work",
        "--file",
        file.to_str().unwrap(),
        "--message-id",
        "m-file",
    ]);
    assert!(out.ok().contains("sent message m-file"), "{}", out.stdout);

    s.cli_stdin(&["send", "work", "--message-id", "m-stdin"], b"from stdin")
        .ok();
    s.cli_stdin(
        &["send", "work", "--message-id", "m-binary"],
        &[0xff, 0xfe, 0x00, 0x01],
    )
    .ok();

    let peeked: MessageList = s.cli(&["--json", "peek", "work"]).json();
    let bodies: Vec<(&str, &str)> = peeked
        .messages
        .iter()
        .map(|m| (m.message_id.as_str(), m.body.as_str()))
        .collect();
    assert_eq!(
        bodies,
        [
            ("m-arg", "from argument"),
            ("m-file", "{\"from\":\"file\"}"),
            ("m-stdin", "from stdin"),
            ("m-binary", "//4AAQ=="),
        ]
    );
    assert_eq!(peeked.messages[3].body_encoding, BodyEncoding::Base64);
    let first = &peeked.messages[0];
    assert_eq!(first.properties.get("n"), Some(&json!(42)));
    assert_eq!(first.properties.get("ok"), Some(&json!(true)));
    assert_eq!(first.properties.get("s"), Some(&json!("7")));
    assert_eq!(first.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(first.content_type.as_deref(), Some("text/plain"));
    let table = s.cli(&["peek", "work", "--limit", "2"]);
    assert!(table.ok().contains("m-file"), "{}", table.stdout);
    assert!(!table.stdout.contains("m-stdin"), "{}", table.stdout);
    let from: MessageList = s
        .cli(&[
            "--json",
            "peek",
            "work",
            "--from",
            &peeked.messages[2].sequence_number.to_string(),
        ])
        .json();
    assert_eq!(from.messages.len(), 2);

    let received: Value = s
        .cli(&["--json", "receive", "work", "--max", "10", "--complete"])
        .json();
    assert_eq!(received["messages"].as_array().unwrap().len(), 4);
    let results = received["settled"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r.get("error").is_none()),
        "{received}"
    );

    assert!(s.cli(&["peek", "work"]).ok().contains("no messages"));
    let q: QueueInfo = s.cli(&["--json", "stats", "work"]).json();
    assert_eq!(q.counts.active + q.counts.locked, 0);
    let table = s.cli(&["receive", "work", "--complete"]);
    assert!(table.ok().contains("no messages"), "{}", table.stdout);
}

#[test]
fn receive_without_action_prints_lock_tokens_then_settle_by_token() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "jobs"]).ok();
    s.cli(&["send", "jobs", "job-1", "--message-id", "j1"]).ok();

    let table = s.cli(&["receive", "jobs", "--lock", "30s"]);
    assert!(table.ok().contains("LOCK-TOKEN"), "{}", table.stdout);
    let token = table
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("lk_"))
        .unwrap_or_else(|| panic!("no lock token in:\n{}", table.stdout))
        .to_owned();
    let peeked: MessageList = s.cli(&["--json", "peek", "jobs"]).json();
    assert_eq!(peeked.messages[0].state, "locked");

    let renewed: Value = s
        .cli(&["--json", "settle", "jobs", &token, "renew", "--lock", "20s"])
        .json();
    assert!(renewed["locked_until"].is_string(), "{renewed}");
    s.cli(&["settle", "jobs", &token, "complete", "--lock", "5s"])
        .fails(2, "--lock");
    s.cli(&["settle", "jobs", &token, "complete"]).ok();
    s.cli(&["settle", "jobs", &token, "complete"])
        .fails(1, "lock_lost");
    assert!(s.cli(&["peek", "jobs"]).ok().contains("no messages"));
}

#[test]
fn queue_purge_removes_locked_messages_too() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "jobs"]).ok();
    s.cli(&["send", "jobs", "one"]).ok();
    s.cli(&["send", "jobs", "two"]).ok();
    let received: Value = s
        .cli(&["--json", "receive", "jobs", "--max", "1", "--lock", "1m"])
        .json();
    let token = received["messages"][0]["lock_token"]
        .as_str()
        .unwrap_or_else(|| panic!("a lock token in {received}"))
        .to_owned();

    let out = s.cli(&["queue", "purge", "jobs"]);
    assert!(
        out.ok().contains("purged queue jobs: 2 messages removed"),
        "{}",
        out.stdout
    );
    s.cli(&["settle", "jobs", &token, "complete"])
        .fails(1, "lock_lost");
    let again: Value = s.cli(&["--json", "queue", "purge", "jobs"]).json();
    assert_eq!(again, json!({"removed": 0}));
    s.cli(&["queue", "purge", "missing"])
        .fails(1, "queue_not_found");
}

#[test]
fn dead_letters_list_show_and_resubmit() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "billing"]).ok();
    s.cli(&["send", "billing", "poison pill", "--message-id", "p1"])
        .ok();
    let out = s.cli(&[
        "receive",
        "billing",
        "--dead-letter",
        "BadInput",
        "--description",
        "cannot parse",
    ]);
    assert!(out.ok().contains("dead-lettered"), "{}", out.stdout);

    let page: DeadLetterPage = s.cli(&["--json", "dlq", "list", "billing"]).json();
    assert_eq!(page.dead_letters.len(), 1);
    let dl = &page.dead_letters[0];
    assert_eq!(dl.reason, "BadInput");
    assert_eq!(dl.message_id, "p1");
    assert_eq!(dl.area, "live");
    let table = s.cli(&["dlq", "list", "billing", "--reason", "BadInput"]);
    assert!(table.ok().contains(&dl.id), "{}", table.stdout);
    let none: DeadLetterPage = s
        .cli(&["--json", "dlq", "list", "billing", "--reason", "Other"])
        .json();
    assert!(none.dead_letters.is_empty());

    let shown: DeadLetter = s.cli(&["--json", "dlq", "show", "billing", &dl.id]).json();
    assert_eq!(shown.description.as_deref(), Some("cannot parse"));
    assert_eq!(shown.body.as_deref(), Some("poison pill"));
    assert_eq!(shown.routed_by, "application");
    let text = s.cli(&["dlq", "show", "billing", &dl.id]);
    assert!(text.ok().contains("reason:"), "{}", text.stdout);
    assert!(text.stdout.contains("poison pill"), "{}", text.stdout);

    let q: QueueInfo = s.cli(&["--json", "stats", "billing"]).json();
    assert_eq!(q.counts.dead_lettered, 1);
    let stats = s.cli(&["stats"]);
    assert!(stats.ok().contains("billing"), "{}", stats.stdout);

    let out = s.cli(&["dlq", "resubmit", "billing", &dl.id]);
    assert!(out.ok().contains("resubmitted"), "{}", out.stdout);
    let peeked: MessageList = s.cli(&["--json", "peek", "billing"]).json();
    assert_eq!(peeked.messages.len(), 1);
    assert_eq!(peeked.messages[0].body, "poison pill");

    s.cli(&["dlq", "show", "billing", "dl_does_not_exist"])
        .fails(1, "dead_letter_not_found");
}

#[test]
fn stats_lists_every_queue_with_a_total() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "a"]).ok();
    s.cli(&["queue", "create", "b"]).ok();
    s.cli(&["send", "a", "1"]).ok();
    s.cli(&["send", "a", "2"]).ok();
    s.cli(&["send", "b", "3"]).ok();
    let table = s.cli(&["stats"]);
    let lines: Vec<&str> = table.ok().lines().collect();
    assert_eq!(lines.len(), 4, "{}", table.stdout);
    assert!(lines[0].starts_with("QUEUE"));
    assert!(lines[3].starts_with("(total)"));
    let list: QueueList = s.cli(&["--json", "stats"]).json();
    let active: u64 = list.queues.iter().map(|q| q.counts.active).sum();
    assert_eq!(active, 3);
}

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "bad name!"])
        .fails(2, "invalid name");
    s.cli(&["queue", "show", "nope"])
        .fails(1, "queue_not_found");
    s.cli(&["send", "nope", "x"]).fails(1, "queue_not_found");
    s.cli(&["queue", "create", "q", "--lock-duration", "30"])
        .fails(2, "duration");
    s.cli(&["queue", "create", "q", "--lock-duration", "soon"])
        .fails(2, "duration");
    s.cli(&["queue", "create", "q", "--max-delivery-count", "0"])
        .fails(2, "--max-delivery-count <N>': 0 is out of range");
    s.cli(&["queue", "create", "q", "--backoff", "linear:1s"])
        .fails(2, "backoff");
    s.cli(&["send", "q", "x", "--property", "novalue"])
        .fails(2, "KEY=VALUE");
    s.cli(&["send", "q", "x", "--schedule", "tomorrow"])
        .fails(2, "time");
    s.cli(&["bogus-command"]).fails(2, "unrecognized");
    // Nothing was created by the refused commands.
    let list: QueueList = s.cli(&["--json", "queue", "list"]).json();
    assert!(list.queues.is_empty());
}

#[test]
fn an_unreachable_server_exits_3() {
    let url = format!("http://127.0.0.1:{}", free_port());
    cli(&url, &["queue", "list"], None).fails(3, "cannot reach the server");
    cli("not a url", &["queue", "list"], None).fails(2, "invalid server URL");
}

#[test]
fn migrate_brings_a_new_store_to_the_current_schema_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for _ in 0..2 {
        let out = crate::support::command()
            .args(["--json", "migrate", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["schema_version"], redrive_store_sqlite::SCHEMA_VERSION);
        assert!(v["store"].as_str().unwrap().ends_with("redrive.db"));
    }
    assert!(data.join("redrive.db").exists());
    let out = crate::support::command()
        .args(["migrate", "--store", "mysql://x@y/z"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported store"));
}

/// One process per SQLite file: while a server runs on a data directory, `redrive
/// migrate` and a second `redrive serve` on it are refused, naming the lock file, and the
/// server goes on; once it has stopped, the directory is free again.
#[test]
fn a_data_directory_in_use_is_refused_to_a_second_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut s = crate::support::Server::start(&data);
    s.cli(&["queue", "create", "q"]).ok();
    s.cli(&["send", "q", "kept"]).ok();
    let migrate = || {
        crate::support::command()
            .args(["migrate", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap()
    };
    let out = migrate();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("open in another process") && err.contains("redrive.db.lock"),
        "{err}"
    );
    assert_eq!(
        err.matches("open in another process").count(),
        1,
        "said once: {err}"
    );
    let out = crate::support::command()
        .args(["serve", "--listen", "127.0.0.1:0", "--sqs-listen", "off"])
        .arg("--data-dir")
        .arg(&data)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("open in another process"), "{err}");
    // The first server is as it was.
    let peeked = s.cli(&["--json", "peek", "q"]).ok().to_owned();
    assert!(peeked.contains("kept"), "{peeked}");
    assert!(s.terminate().success());
    let out = migrate();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn auto_replay_flags_set_the_policy_and_show_prints_it() {
    let (s, _dir) = server();
    s.cli(&[
        "queue",
        "create",
        "orders",
        "--auto-replay",
        "--max-replay-attempts",
        "5",
        "--replay-delay",
        "30s",
        "--replay-chunk-bytes",
        "512KiB",
        "--replay-chunk-events",
        "100",
    ])
    .ok();
    let q: QueueInfo = s.cli(&["--json", "queue", "show", "orders"]).json();
    let a = &q.policy.auto_replay;
    assert!(a.enabled);
    assert_eq!(
        (
            a.max_replay_attempts,
            a.judge_delay_ms,
            a.max_chunk_bytes,
            a.max_chunk_events
        ),
        (5, 30_000, 512 * 1024, 100)
    );
    let shown = s.cli(&["queue", "show", "orders"]);
    let text = shown.ok();
    for line in [
        "auto_replay:",
        "max_replay_attempts:",
        "replay_delay:",
        "replay_chunk_bytes:",
        "replay_chunk_events:",
        "replay_destination:",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(text.contains("origin"), "{text}");

    // An update sends only the flags given, at the next version.
    let q: QueueInfo = s
        .cli(&["--json", "queue", "update", "orders", "--auto-replay=false"])
        .json();
    assert_eq!(q.policy_version, 2);
    assert!(!q.policy.auto_replay.enabled);
    assert_eq!(q.policy.auto_replay.max_replay_attempts, 5, "kept");

    // Subscriptions: on create, and changed by `sub update`.
    s.cli(&["topic", "create", "events"]).ok();
    s.cli(&["sub", "create", "events", "audit", "--auto-replay"])
        .ok();
    let sub: SubscriptionInfo = s
        .cli(&[
            "--json",
            "sub",
            "update",
            "events",
            "audit",
            "--max-replay-attempts",
            "9",
        ])
        .json();
    assert_eq!(sub.version, 2);
    assert!(sub.auto_replay.enabled, "kept");
    assert_eq!(sub.auto_replay.max_replay_attempts, 9);
    let shown = s.cli(&["sub", "show", "events", "audit"]);
    assert!(
        shown.ok().contains("max replay attempts:"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains('9'), "{}", shown.stdout);

    // Out-of-bounds values are refused before anything is sent (exit 2).
    s.cli(&["queue", "create", "q", "--max-replay-attempts", "0"])
        .fails(
            2,
            "--max-replay-attempts <N>': 0 is out of range (expected a whole number from 1 to 100)",
        );
    s.cli(&[
        "sub",
        "create",
        "events",
        "bad",
        "--replay-chunk-events",
        "5001",
    ])
    .fails(
        2,
        "--replay-chunk-events <N>': 5001 is out of range (expected a whole number from 1 to 5000)",
    );
    s.cli(&["sub", "update", "events", "audit", "--replay-delay", "8d"])
        .fails(2, "auto_replay.judge_delay_ms");
    s.cli(&["sub", "update", "events", "audit"])
        .fails(2, "nothing to update");
    let sub: SubscriptionInfo = s.cli(&["--json", "sub", "show", "events", "audit"]).json();
    assert_eq!(sub.version, 2, "refusals changed nothing");
    let list: QueueList = s.cli(&["--json", "queue", "list"]).json();
    assert_eq!(
        list.queues.len(),
        2,
        "orders and the subscription's queue only"
    );
}
