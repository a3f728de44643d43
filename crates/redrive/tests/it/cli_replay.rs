//! Dead-letter import, export and restore, `replay status`, and dead-letter retention, end
//! to end against a real server: what each command prints, what the store holds after it,
//! and refusals that exit non-zero with a readable message and store nothing.

use std::collections::BTreeSet;
use std::path::Path;

use redrive_api::queue::{QueueInfo, QueueList};
use serde_json::Value;

use crate::support::{Server, printed_admin_token};

fn server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Server::start(dir.path()), dir)
}

/// A tiny Event Grid dead-letter blob: two events of the Event Grid schema.
const EVENT_GRID_BLOB: &str = r#"[
  {"id": "ev-1", "eventType": "orders.created", "subject": "/orders/1",
   "eventTime": "2026-01-01T00:00:00Z", "dataVersion": "1", "data": {"n": 1},
   "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 3,
   "lastDeliveryOutcome": "Probation", "lastHttpStatusCode": 503,
   "publishTime": "2026-01-01T00:00:00Z", "lastDeliveryAttemptTime": "2026-01-01T00:05:00Z"},
  {"id": "ev-2", "eventType": "orders.created", "subject": "/orders/2",
   "eventTime": "2026-01-01T00:01:00Z", "dataVersion": "1", "data": {"n": 2},
   "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 3,
   "lastDeliveryOutcome": "Probation", "lastHttpStatusCode": 503,
   "publishTime": "2026-01-01T00:01:00Z", "lastDeliveryAttemptTime": "2026-01-01T00:06:00Z"}
]"#;

/// Tiny SQS `ReceiveMessage` output: two messages, one with an attribute.
const SQS_OUTPUT: &str = r#"{"Messages": [
  {"MessageId": "sqs-1", "ReceiptHandle": "AQEB1", "MD5OfBody": "5d41402abc4b2a76b9719d911017c592",
   "Body": "hello",
   "Attributes": {"ApproximateReceiveCount": "4", "SentTimestamp": "1767225600000"},
   "MessageAttributes": {"tenant": {"DataType": "String", "StringValue": "acme"}}},
  {"MessageId": "sqs-2", "ReceiptHandle": "AQEB2", "Body": "two",
   "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767225601000"}}
]}"#;

/// Every record of `queue`'s area, as the API sends them (bodies included: no auth).
fn records(s: &Server, queue: &str, area: &str) -> Vec<Value> {
    let page: Value = s
        .cli(&[
            "--json", "dlq", "list", queue, "--area", area, "--limit", "1000",
        ])
        .json();
    page["dead_letters"].as_array().unwrap().clone()
}

/// The `dl_…` ids an import printed, one per line after its summary.
fn printed_ids(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("dl_"))
        .map(str::to_owned)
        .collect()
}

fn write(dir: &Path, name: &str, content: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Sends `body` to `queue` and dead-letters it with `reason`; returns its record id.
fn dead_letter(s: &Server, queue: &str, body: &[u8], message_id: &str) -> String {
    s.cli_stdin(&["send", queue, "--message-id", message_id], body)
        .ok();
    s.cli(&["receive", queue, "--dead-letter", "Broken"]).ok();
    records(s, queue, "live")
        .iter()
        .find(|r| r["message_id"] == message_id)
        .unwrap_or_else(|| panic!("{message_id} not dead-lettered"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A dead letter whose stored row the server cannot read (edited behind its back) is
/// named by `dlq list` with the reason and left out of `dlq export` with a warning; the
/// others list and export as before.
#[test]
fn an_unreadable_dead_letter_is_named_by_list_and_left_out_of_export() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "src"]).ok();
    let bad = dead_letter(&s, "src", b"one", "m-bad");
    dead_letter(&s, "src", b"two", "m-good");
    let conn = rusqlite::Connection::open(dir.path().join("redrive.db")).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.execute(
        "UPDATE dead_letters SET count_quality = 'bogus' WHERE id = ?1",
        [&bad],
    )
    .unwrap();
    drop(conn);

    let out = s.cli(&["dlq", "list", "src"]);
    let listed = out.ok();
    assert!(
        listed.contains(&format!("cannot be read: {bad} (")),
        "{listed}"
    );
    assert!(listed.contains("m-good"), "{listed}");
    let out = s.cli(&["dlq", "export", "src"]);
    let lines: Vec<Value> = out
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(lines[0]["message_id"], "m-good");
    assert!(out.stderr.contains(&bad), "{}", out.stderr);
}

#[test]
fn an_event_grid_blob_and_sqs_output_import_and_list() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "inbox"]).ok();

    let blob = write(dir.path(), "blob.json", EVENT_GRID_BLOB.as_bytes());
    let out = s.cli(&["dlq", "import", "inbox", "--format", "eventgrid", &blob]);
    assert!(
        out.ok().contains("imported 1 dead letter into inbox"),
        "{}",
        out.stdout
    );
    let blob_ids = printed_ids(&out.stdout);
    assert_eq!(blob_ids.len(), 1, "{}", out.stdout);

    let out = s.cli_stdin(
        &["dlq", "import", "inbox", "--format", "sqs", "-"],
        SQS_OUTPUT.as_bytes(),
    );
    assert!(
        out.ok().contains("imported 2 dead letters into inbox"),
        "{}",
        out.stdout
    );
    let sqs_ids = printed_ids(&out.stdout);
    assert_eq!(sqs_ids.len(), 2, "{}", out.stdout);

    let listed = records(&s, "inbox", "live");
    assert_eq!(listed.len(), 3);
    let by_id = |id: &str| listed.iter().find(|r| r["id"] == id).unwrap().clone();
    let b = by_id(&blob_ids[0]);
    assert_eq!(b["format"], "events");
    assert_eq!(b["message_id"], "ev-1");
    assert_eq!(b["body"], EVENT_GRID_BLOB, "the blob's bytes, unchanged");
    assert_eq!(b["reason"], "MaxDeliveryAttemptsExceeded");
    let m: Vec<(Value, Value, Value)> = sqs_ids
        .iter()
        .map(|id| {
            let r = by_id(id);
            (
                r["format"].clone(),
                r["message_id"].clone(),
                r["body"].clone(),
            )
        })
        .collect();
    assert_eq!(
        m,
        [
            ("message".into(), "sqs-1".into(), "hello".into()),
            ("message".into(), "sqs-2".into(), "two".into()),
        ]
    );
    let table = s.cli(&["dlq", "list", "inbox"]);
    for id in blob_ids.iter().chain(&sqs_ids) {
        assert!(table.ok().contains(id.as_str()), "{}", table.stdout);
    }

    // `dlq show` prints the format and the replay state; --json the API's fields.
    let shown = s.cli(&["dlq", "show", "inbox", &blob_ids[0]]);
    let text = shown.ok();
    for line in ["format:", "replay:", "replay_failures:", "judgement:"] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(text.contains("events"), "{text}");
    let shown: Value = s
        .cli(&["--json", "dlq", "show", "inbox", &sqs_ids[0]])
        .json();
    assert_eq!(shown["replay"]["failures"], 0, "{shown}");
    assert!(shown["replay"]["candidate"].is_boolean(), "{shown}");

    // --json prints the API's answer.
    let r: Value = s
        .cli_stdin(
            &["--json", "dlq", "import", "inbox", "--format", "sqs", "-"],
            SQS_OUTPUT.as_bytes(),
        )
        .json();
    assert_eq!(r["imported"], 2, "{r}");
    assert_eq!(r["ids"].as_array().unwrap().len(), 2, "{r}");
}

/// What must survive an export and an import: the record's own content.
fn content(r: &Value) -> [String; 8] {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
    [
        s("message_id"),
        s("body"),
        s("body_encoding"),
        s("body_sha256"),
        s("format"),
        s("reason"),
        s("type"),
        r["properties"].to_string(),
    ]
}

#[test]
fn an_export_imports_into_another_queue_with_the_same_bodies() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "src"]).ok();
    s.cli(&["queue", "create", "dst"]).ok();
    s.cli(&[
        "send",
        "src",
        "typed",
        "--message-id",
        "m-props",
        "--type",
        "orders.created",
        "--property",
        "n=42",
        "--property",
        "tenant=\"acme\"",
        "--property",
        "ok=true",
    ])
    .ok();
    s.cli(&["receive", "src", "--dead-letter", "Broken"]).ok();
    dead_letter(&s, "src", b"plain text", "m-text");
    dead_letter(&s, "src", &[0xff, 0x00, 0x01, 0xfe], "m-binary");
    dead_letter(&s, "src", b"{\"order\": 7}\n", "m-json");
    let blob = write(dir.path(), "blob.json", EVENT_GRID_BLOB.as_bytes());
    s.cli(&["dlq", "import", "src", "--format", "eventgrid", &blob])
        .ok();
    let source = records(&s, "src", "live");
    assert_eq!(source.len(), 5);
    let typed = source
        .iter()
        .find(|r| r["message_id"] == "m-props")
        .unwrap();
    assert_eq!(typed["properties"]["n"], 42, "{typed}");
    assert!(
        source.iter().any(|r| r["body_encoding"] == "base64"),
        "a binary body is exported as base64"
    );

    let file = dir.path().join("export.jsonl");
    let out = s.cli(&["dlq", "export", "src", file.to_str().unwrap()]);
    assert!(
        out.ok().contains(&format!(
            "exported 5 dead letters of src to {}",
            file.display()
        )),
        "{}",
        out.stdout
    );
    let written = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "one record per line:\n{written}");
    assert!(
        lines.iter().all(|l| l["body"].is_string()),
        "bodies included"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // To stdout (no argument, or `-`): the same lines and nothing else.
    assert_eq!(s.cli(&["dlq", "export", "src"]).ok(), written);
    assert_eq!(s.cli(&["dlq", "export", "src", "-"]).ok(), written);

    let out = s.cli(&[
        "dlq",
        "import",
        "dst",
        "--format",
        "json",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.ok().contains("imported 5 dead letters into dst"),
        "{}",
        out.stdout
    );
    let imported = records(&s, "dst", "live");
    let want: BTreeSet<_> = source.iter().map(content).collect();
    let got: BTreeSet<_> = imported.iter().map(content).collect();
    assert_eq!(got, want);
    assert!(imported.iter().all(|r| r["queue"] == "dst"));

    // Another area: the quarantine of src holds nothing yet, so its export is empty.
    assert_eq!(
        s.cli(&["dlq", "export", "src", "--area", "quarantine"])
            .ok(),
        ""
    );
    s.cli(&["dlq", "export", "src", "--area", "attic"])
        .fails(2, "invalid area");
    s.cli(&["dlq", "export", "nope"])
        .fails(1, "queue_not_found");
}

#[test]
fn restore_previews_with_dry_run_then_moves_the_record_back_to_live() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders"]).ok();
    let id = dead_letter(&s, "orders", b"retry me", "m-1");
    let area = |s: &Server| -> String {
        let d: Value = s.cli(&["--json", "dlq", "show", "orders", &id]).json();
        d["area"].as_str().unwrap().to_owned()
    };

    // A live record is not in quarantine: refused, nothing changes.
    s.cli(&["dlq", "restore", "orders", &id])
        .fails(1, "dead_letter_not_quarantined");
    s.cli(&["dlq", "move", "orders", &id, "quarantine"]).ok();
    assert_eq!(area(&s), "quarantine");

    let out = s.cli(&["dlq", "restore", "orders", &id, "--dry-run"]);
    let text = out.ok();
    assert!(text.contains("dry run"), "{text}");
    assert!(text.contains("was not restored"), "{text}");
    assert!(text.contains("republish:"), "{text}");
    assert!(text.contains("quarantine again:"), "{text}");
    assert!(text.contains("auto replay:"), "{text}");
    assert!(text.contains("off for orders"), "{text}");
    let preview: Value = s
        .cli(&["--json", "dlq", "restore", "orders", &id, "--dry-run"])
        .json();
    assert_eq!(preview["id"], id.as_str());
    assert_eq!(preview["restored"], false);
    assert_eq!(preview["replay_enabled"], false);
    let requarantined: u64 = preview["requarantine"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        preview["republish"].as_u64().unwrap() + requarantined,
        1,
        "one message, one event: {preview}"
    );
    assert_eq!(area(&s), "quarantine", "a dry run changes nothing");

    let out = s.cli(&["dlq", "restore", "orders", &id]);
    assert!(
        out.ok()
            .contains(&format!("restored {id} of orders to the live area")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("the next replay judgement will:"));
    assert_eq!(area(&s), "live");

    s.cli(&["dlq", "restore", "orders", &id])
        .fails(1, "dead_letter_not_quarantined");
    s.cli(&["dlq", "restore", "orders", "dl_does_not_exist"])
        .fails(1, "dead_letter_not_found");
    s.cli(&["dlq", "restore", "nope", &id])
        .fails(1, "queue_not_found");

    // With auto replay on, the preview says so.
    s.cli(&["queue", "create", "held"]).ok();
    let held = dead_letter(&s, "held", b"x", "m-2");
    s.cli(&["dlq", "move", "held", &held, "quarantine"]).ok();
    s.cli(&[
        "queue",
        "update",
        "held",
        "--auto-replay",
        "--replay-delay",
        "7d",
    ])
    .ok();
    let out = s.cli(&["dlq", "restore", "held", &held, "--dry-run"]);
    assert!(out.ok().contains("on for held"), "{}", out.stdout);
}

#[test]
fn replay_status_counts_each_queue_after_imports() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "alpha"]).ok();
    s.cli(&["queue", "create", "beta"]).ok();
    s.cli(&["queue", "create", "empty"]).ok();
    let blob = write(dir.path(), "blob.json", EVENT_GRID_BLOB.as_bytes());
    s.cli(&["dlq", "import", "alpha", "--format", "eventgrid", &blob])
        .ok();
    let out = s.cli_stdin(
        &["dlq", "import", "beta", "--format", "sqs", "-"],
        SQS_OUTPUT.as_bytes(),
    );
    let beta_ids = printed_ids(out.ok());
    s.cli(&["dlq", "move", "beta", &beta_ids[0], "quarantine"])
        .ok();
    let second = s.cli(&["dlq", "import", "alpha", "--format", "eventgrid", &blob]);
    let second = printed_ids(second.ok());
    s.cli(&["dlq", "move", "alpha", &second[0], "archived"])
        .ok();

    let all: Value = s.cli(&["--json", "replay", "status"]).json();
    let entities = all["entities"].as_array().unwrap();
    let of = |q: &str| {
        entities
            .iter()
            .find(|e| e["queue"] == q)
            .unwrap_or_else(|| panic!("{q} not in {all}"))
            .clone()
    };
    let alpha = of("alpha");
    assert_eq!(
        (alpha["live"].as_u64(), alpha["archived"].as_u64()),
        (Some(1), Some(1))
    );
    let beta = of("beta");
    assert_eq!(beta["live"], 1, "{beta}");
    assert_eq!(beta["quarantined"]["manual"], 1, "{beta}");
    assert!(
        entities.iter().all(|e| e["queue"] != "empty"),
        "only queues with dead letters: {all}"
    );

    let table = s.cli(&["replay", "status"]);
    let lines: Vec<&str> = table.ok().lines().collect();
    assert!(lines[0].starts_with("QUEUE"), "{}", table.stdout);
    for header in [
        "LIVE",
        "CANDIDATES",
        "FAILING",
        "FLAGGED",
        "UNDECODABLE",
        "ARCHIVED",
        "QUARANTINED",
    ] {
        assert!(lines[0].contains(header), "{header}: {}", table.stdout);
    }
    let beta_line = lines
        .iter()
        .find(|l| l.starts_with("beta"))
        .unwrap_or_else(|| panic!("no beta row:\n{}", table.stdout));
    assert!(beta_line.contains("manual=1"), "{beta_line}");

    let one = s.cli(&["replay", "status", "beta"]);
    assert_eq!(one.ok().lines().count(), 2, "{}", one.stdout);
    let one: Value = s.cli(&["--json", "replay", "status", "alpha"]).json();
    assert_eq!(one["queue"], "alpha");
    assert_eq!(one["live"], 1);
    s.cli(&["replay", "status", "nope"])
        .fails(1, "queue_not_found");
}

#[test]
fn dead_letter_retention_round_trips_and_bad_values_are_refused() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "kept", "--dead-letter-retention", "7d"])
        .ok();
    let q: QueueInfo = s.cli(&["--json", "queue", "show", "kept"]).json();
    assert_eq!(q.policy.dead_letter_retention_ms, 604_800_000);
    let shown = s.cli(&["queue", "show", "kept"]);
    let line = shown
        .ok()
        .lines()
        .find(|l| l.starts_with("dead_letter_retention:"))
        .unwrap_or_else(|| panic!("no retention line:\n{}", shown.stdout));
    assert!(line.ends_with(" 7d"), "{line}");

    let q: QueueInfo = s
        .cli(&[
            "--json",
            "queue",
            "update",
            "kept",
            "--dead-letter-retention",
            "0",
        ])
        .json();
    assert_eq!(q.policy.dead_letter_retention_ms, 0);
    assert_eq!(q.policy_version, 2);
    assert!(
        s.cli(&["queue", "show", "kept"]).ok().contains("forever"),
        "0 keeps forever"
    );
    s.cli(&["queue", "create", "plain"]).ok();
    let q: QueueInfo = s.cli(&["--json", "queue", "show", "plain"]).json();
    assert_eq!(q.policy.dead_letter_retention_ms, 2_592_000_000, "30 days");

    s.cli(&["topic", "create", "events"]).ok();
    let sub: Value = s
        .cli(&[
            "--json",
            "sub",
            "create",
            "events",
            "audit",
            "--dead-letter-retention",
            "90d",
        ])
        .json();
    assert_eq!(sub["dead_letter_retention_ms"], 7_776_000_000_u64, "{sub}");
    let sub: Value = s
        .cli(&[
            "--json",
            "sub",
            "update",
            "events",
            "audit",
            "--dead-letter-retention",
            "0",
        ])
        .json();
    assert_eq!(sub["dead_letter_retention_ms"], 0, "{sub}");
    assert_eq!(
        sub["auto_replay"]["enabled"], false,
        "auto replay untouched"
    );
    let shown = s.cli(&["sub", "show", "events", "audit"]);
    assert!(
        shown
            .ok()
            .lines()
            .any(|l| l.starts_with("dead letter retention:") && l.ends_with("forever")),
        "{}",
        shown.stdout
    );

    // Refused before anything is sent, with a readable message and exit 2.
    s.cli(&["queue", "create", "bad", "--dead-letter-retention", "3651d"])
        .fails(2, "dead-letter retention");
    s.cli(&["queue", "update", "kept", "--dead-letter-retention", "soon"])
        .fails(2, "duration");
    s.cli(&[
        "sub",
        "update",
        "events",
        "audit",
        "--dead-letter-retention",
        "11000d",
    ])
    .fails(2, "at most 3650d");
    s.cli(&[
        "sub",
        "create",
        "events",
        "bad",
        "--dead-letter-retention",
        "1y",
    ])
    .fails(2, "unknown unit");
    let list: QueueList = s.cli(&["--json", "queue", "list"]).json();
    let names: Vec<&str> = list.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["events.audit", "kept", "plain"]);
    let q: QueueInfo = s.cli(&["--json", "queue", "show", "kept"]).json();
    assert_eq!(q.policy_version, 2, "refusals changed nothing");
}

#[test]
fn a_bad_import_exits_non_zero_and_stores_nothing() {
    let (s, dir) = server();
    s.cli(&["queue", "create", "q"]).ok();
    let d = dir.path();

    let broken = write(d, "broken.json", b"[{\"id\": ");
    s.cli(&["dlq", "import", "q", "--format", "eventgrid", &broken])
        .fails(2, "invalid_request");
    let not_receive = write(d, "object.json", br#"{"Messages": {"a": 1}}"#);
    s.cli(&["dlq", "import", "q", "--format", "sqs", &not_receive])
        .fails(2, "Messages");
    // An exported line, then the same record as a caller without payload access would
    // have exported it (no body): all or nothing.
    s.cli(&["queue", "create", "other"]).ok();
    dead_letter(&s, "other", b"fine", "m-1");
    let good = s.cli(&["dlq", "export", "other"]).ok().to_owned();
    let mut bodiless: Value = serde_json::from_str(good.trim()).unwrap();
    bodiless.as_object_mut().unwrap().remove("body");
    let lines = write(d, "lines.jsonl", format!("{good}{bodiless}\n").as_bytes());
    s.cli(&["dlq", "import", "q", "--format", "json", &lines])
        .fails(2, "line 2");
    s.cli(&["dlq", "import", "q", "--format", "json", &lines])
        .fails(2, "`body` is missing");
    let missing = d.join("missing.json");
    s.cli(&[
        "dlq",
        "import",
        "q",
        "--format",
        "json",
        missing.to_str().unwrap(),
    ])
    .fails(2, "cannot read");
    let binary = write(d, "binary.bin", &[b'[', 0xff, 0xfe, b']']);
    s.cli(&["dlq", "import", "q", "--format", "eventgrid", &binary])
        .fails(2, "not UTF-8");
    // Over 64 MiB: refused from the file's size, before anything is read or sent (a
    // sparse file, so the test writes nothing).
    let big = d.join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    s.cli(&[
        "dlq",
        "import",
        "q",
        "--format",
        "json",
        big.to_str().unwrap(),
    ])
    .fails(2, "64 MiB");
    s.cli(&["dlq", "import", "q", "--format", "csv", &broken])
        .fails(2, "invalid value");
    s.cli_stdin(
        &["dlq", "import", "nope", "--format", "sqs", "-"],
        SQS_OUTPUT.as_bytes(),
    )
    .fails(1, "queue_not_found");

    assert!(records(&s, "q", "live").is_empty(), "nothing stored");
    let list: Value = s.cli(&["--json", "replay", "status"]).json();
    assert!(
        list["entities"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["queue"] != "q"),
        "{list}"
    );
}

/// `serve --auth`, and its bootstrap admin token.
fn start_with_auth(dir: &Path) -> (Server, String) {
    let s = Server::start_native(dir, true);
    let token = printed_admin_token(&s.log());
    (s, token)
}

#[test]
fn an_export_without_the_payload_reader_role_fails_and_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let (s, admin) = start_with_auth(dir.path());
    let as_admin = |args: &[&str]| {
        let mut all = vec!["--token", admin.as_str()];
        all.extend_from_slice(args);
        s.cli(&all)
    };
    as_admin(&["queue", "create", "orders"]).ok();
    as_admin(&["send", "orders", "secret body"]).ok();
    as_admin(&["receive", "orders", "--dead-letter", "Broken"]).ok();
    let created: Value = as_admin(&[
        "--json",
        "token",
        "create",
        "--name",
        "ops",
        "--grant",
        "operator:orders",
    ])
    .json();
    let ops = created["secret"].as_str().unwrap().to_owned();

    let file = dir.path().join("out.jsonl");
    s.cli(&[
        "--token",
        &ops,
        "dlq",
        "export",
        "orders",
        file.to_str().unwrap(),
    ])
    .fails(1, "payload-reader");
    assert!(!file.exists(), "no file from a failed export");
    let leftovers = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("partial")
        })
        .count();
    assert_eq!(leftovers, 0);
    let out = s.cli(&["--token", &ops, "dlq", "export", "orders"]);
    out.fails(1, "cannot be imported");
    assert!(!out.stdout.contains("secret body"));

    let out = as_admin(&["dlq", "export", "orders"]);
    assert!(out.ok().contains("secret body"), "{}", out.stdout);
}

/// `replay preview`: an unbounded plan exits non-zero naming what it leaves out; a bounded
/// one prints the items, the lower bound under the budget and each item's gate, and
/// touches nothing.
#[test]
fn replay_preview_refuses_an_unbounded_plan_and_names_each_items_gate() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders"]).ok();
    for id in ["o-1", "o-2"] {
        dead_letter(&s, "orders", b"payload", id);
    }
    s.cli(&["replay", "preview", "orders", "--items-per-s", "1"])
        .fails(2, "bytes_per_s, max_concurrent, dependency");
    let budget = [
        "--items-per-s",
        "1",
        "--bytes-per-s",
        "64KiB",
        "--concurrency",
        "2",
        "--window",
        "10",
        "--dependency",
        "ledger",
        "--probe",
        "http://ledger/health",
        "--max-error-rate",
        "0.05",
        "--max-latency",
        "250ms",
    ];
    let mut args = vec!["--json", "replay", "preview", "orders"];
    args.extend(budget);
    let p: Value = s.cli(&args).json();
    assert_eq!(p["items"], 2, "{p}");
    assert_eq!(p["lower_bound_ms"], 2000, "{p}");
    assert_eq!(p["by_reason"]["Broken"], 2);
    assert_eq!(p["item_list"].as_array().unwrap().len(), 2);
    assert!(p["item_list"][0]["gate"].is_string(), "{p}");
    let mut args = vec!["replay", "preview", "orders"];
    args.extend(budget);
    let text = s.cli(&args);
    let text = text.ok();
    assert!(text.contains("at least:"), "{text}");
    assert!(text.contains("GATE"), "{text}");
    // Each blocking gate, with why it holds (no register entry says the type may be sent
    // twice); it waits on a person, not on the clock: no time.
    assert_eq!(
        p["gates"],
        serde_json::json!([{"gate": "not_repeatable", "items": 2,
                            "detail": "its type may not be delivered twice"}]),
        "{p}"
    );
    assert!(text.contains("CLEARS AT"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "not_repeatable",
                    "2",
                    "-",
                    "its",
                    "type",
                    "may",
                    "not",
                    "be",
                    "delivered",
                    "twice"
                ]),
        "{text}"
    );
    assert_eq!(
        records(&s, "orders", "live").len(),
        2,
        "nothing was touched"
    );
}

/// `replay plan|start|status|pause|resume|cancel|plans|items` against a real server (its
/// plan runner on): an unbounded plan exits non-zero naming what it leaves out; a bounded
/// one is created planned and listed with its items; a pause of a planned plan exits
/// non-zero with the `plan_state` reason; `start --follow` prints the progress until the
/// plan ends — here stopped, its dependency probe on an address the network rules refuse
/// (`budget_unobservable`) — and exits 4 naming the stop reason, which `status` shows after.
#[test]
fn replay_plans_are_created_moved_and_followed_from_the_cli() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders"]).ok();
    s.cli(&["queue", "create", "repair"]).ok();
    for id in ["o-1", "o-2"] {
        dead_letter(&s, "orders", b"payload", id);
    }
    s.cli(&[
        "replay",
        "plan",
        "orders",
        "--destination",
        "repair",
        "--items-per-s",
        "1",
    ])
    .fails(2, "bytes_per_s, max_concurrent, dependency");
    let budget = [
        "--items-per-s",
        "2",
        "--bytes-per-s",
        "64KiB",
        "--concurrency",
        "2",
        "--window",
        "5",
        "--dependency",
        "ledger",
        "--probe",
        "http://127.0.0.1:9/health",
        "--max-error-rate",
        "0.05",
        "--max-latency",
        "250ms",
    ];
    let mut args = vec!["replay", "plan", "orders", "--destination", "nowhere"];
    args.extend(budget);
    s.cli(&args).fails(1, "destination_invalid");
    // The origin dead-lettered the items' reason just now: the failing path, refused with
    // the time it clears (five minutes after those dead letters).
    let mut args = vec!["replay", "plan", "orders"];
    args.extend(budget);
    s.cli(&args)
        .fails(1, "is the failing path: it dead-lettered Broken");
    let mut args = vec![
        "--json",
        "replay",
        "plan",
        "orders",
        "--reason",
        "Broken",
        "--destination",
        "repair",
        "--correction",
        "fix-1",
        "--lease",
        "2h",
        "--observe",
        "30s",
    ];
    args.extend(budget);
    let plan: Value = s.cli(&args).json();
    assert_eq!(plan["status"], "planned", "{plan}");
    assert_eq!(plan["progress"]["items"], 2, "{plan}");
    assert_eq!(plan["lease_ms"], 7_200_000);
    assert_eq!(plan["observe_ms"], 30_000);
    assert_eq!(plan["correction"], "fix-1");
    assert_eq!(plan["selection"]["reasons"], serde_json::json!(["Broken"]));
    let first = plan["id"].as_str().unwrap().to_owned();

    let mut args = vec!["replay", "plan", "orders", "--destination", "repair"];
    args.extend(budget);
    let out = s.cli(&args);
    let text = out.ok();
    assert!(text.starts_with("created plan plan_"), "{text}");
    assert!(text.contains("(planned)"), "{text}");
    assert!(text.contains("items:"), "{text}");
    let second = text.split_whitespace().nth(2).unwrap().to_owned();

    // A pause of a planned plan: refused, with the reason.
    s.cli(&["replay", "pause", &first]).fails(1, "plan_state");
    s.cli(&["replay", "resume", &first]).fails(1, "plan_state");
    s.cli(&["replay", "status", "plan_nope"])
        .fails(1, "replay_plan_not_found");

    let shown = s.cli(&["replay", "status", &first]);
    let text = shown.ok();
    assert!(text.contains("planned"), "{text}");
    assert!(text.contains("destination:"), "{text}");
    let listed: Value = s
        .cli(&["--json", "replay", "plans", "--status", "planned"])
        .json();
    assert_eq!(listed["plans"].as_array().unwrap().len(), 2, "{listed}");
    let table = s.cli(&["replay", "plans", "--queue", "orders"]);
    let text = table.ok();
    assert!(text.lines().next().unwrap().starts_with("ID"), "{text}");
    assert!(text.contains(&first) && text.contains(&second), "{text}");
    assert!(
        s.cli(&["replay", "plans", "--queue", "repair"])
            .ok()
            .contains("no replay plans")
    );
    s.cli(&["replay", "plans", "--status", "lost"])
        .fails(2, "plan status");
    let items: Value = s
        .cli(&["--json", "replay", "items", &first, "--state", "waiting"])
        .json();
    assert_eq!(items["items"].as_array().unwrap().len(), 2, "{items}");
    let table = s.cli(&["replay", "items", &first]);
    let text = table.ok();
    assert!(text.lines().next().unwrap().starts_with("SEQ"), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    // A page: the first item, then the one after it.
    let page: Value = s
        .cli(&["--json", "replay", "items", &first, "--limit", "1"])
        .json();
    let page = page["items"].as_array().unwrap().clone();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(page[0]["seq"], 0, "{page:?}");
    let next: Value = s
        .cli(&[
            "--json", "replay", "items", &first, "--after", "0", "--limit", "1",
        ])
        .json();
    assert_eq!(next["items"][0]["seq"], 1, "{next}");

    // Cancel one; follow the other until it ends.
    let out = s.cli(&["replay", "cancel", &second]);
    assert!(out.ok().contains("cancelled plan"), "{}", out.stdout);
    s.cli(&["replay", "cancel", &second]).fails(1, "plan_state");
    let followed = s.cli(&["replay", "status", &second, "--follow"]);
    let text = followed.ok();
    assert_eq!(
        text.lines().count(),
        1,
        "one line for an ended plan: {text}"
    );
    assert!(text.contains("cancelled"), "{text}");

    // A followed plan that stops on a stop condition exits 4 after its progress and stop
    // detail, so that a script notices.
    let followed = s.cli(&["replay", "start", &first, "--follow"]);
    followed.fails(4, "stopped (budget_unobservable)");
    let text = followed.stdout.as_str();
    let last = text.lines().rev().find(|l| l.starts_with(&first)).unwrap();
    assert!(last.contains("/2 items done"), "{text}");
    assert!(last.contains("stopped (budget_unobservable)"), "{text}");
    assert!(text.contains("items/s"), "{text}");
    assert!(text.contains("eta "), "{text}");
    assert!(text.contains("\nstopped: "), "the stop detail: {text}");
    let shown = s.cli(&["replay", "status", &first]);
    let text = shown.ok();
    assert!(text.contains("stop reason:"), "{text}");
    assert!(text.contains("budget_unobservable"), "{text}");
    let plan: Value = s.cli(&["--json", "replay", "status", &first]).json();
    assert_eq!(plan["status"], "stopped", "{plan}");
    s.cli(&["replay", "status", "orders", "--follow"])
        .fails(2, "--follow takes a plan id");
}

/// `replay plan` and `replay preview` judge each budget flag by the server's ranges
/// before sending anything: a rate of 1e-300 items/s, 2⁶⁴−1 bytes/s or ms of latency, a
/// 10 kB dependency name (and NaN) exit 2 naming the field and its range; the edges of
/// each range are taken; no plan is stored.
#[test]
fn replay_plan_flags_out_of_range_are_refused_naming_the_field_and_its_range() {
    let (s, _dir) = server();
    s.cli(&["queue", "create", "orders"]).ok();
    dead_letter(&s, "orders", b"payload", "o-1");
    let ok = [
        ("--items-per-s", "1"),
        ("--bytes-per-s", "64KiB"),
        ("--concurrency", "2"),
        ("--window", "10"),
        ("--dependency", "ledger"),
        ("--probe", "http://ledger/health"),
        ("--max-error-rate", "0.05"),
        ("--max-latency", "250ms"),
    ];
    let with = |flag: &str, value: &str| {
        ok.iter()
            .flat_map(|(f, v)| {
                [
                    f.to_string(),
                    if *f == flag { value } else { v }.to_string(),
                ]
            })
            .collect::<Vec<String>>()
    };
    let long_name = "d".repeat(10_000);
    let max = u64::MAX.to_string();
    let max_ms = format!("{max}ms");
    for (flag, value, needle) in [
        ("--items-per-s", "1e-300", "items_per_s"),
        ("--items-per-s", "NaN", "items_per_s"),
        ("--items-per-s", "inf", "items_per_s"),
        ("--bytes-per-s", max.as_str(), "bytes_per_s"),
        ("--bytes-per-s", "11GiB", "bytes_per_s"),
        (
            "--max-latency",
            max_ms.as_str(),
            "dependency.max_latency_ms",
        ),
        ("--dependency", long_name.as_str(), "dependency.name"),
        ("--concurrency", "0", "max_concurrent"),
        ("--max-error-rate", "1.5", "dependency.max_error_rate"),
    ] {
        for verb in ["plan", "preview"] {
            let mut args = vec!["replay".to_owned(), verb.to_owned(), "orders".to_owned()];
            args.extend(with(flag, value));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = s.cli(&args);
            out.fails(2, needle);
            assert!(out.stderr.contains("must be"), "{flag}: {}", out.stderr);
        }
    }
    let listed: Value = s.cli(&["--json", "replay", "plans"]).json();
    assert_eq!(
        listed["plans"],
        serde_json::json!([]),
        "nothing stored: {listed}"
    );
    // The edges are taken.
    let mut args: Vec<String> = ["--json", "replay", "preview", "orders"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(with("--items-per-s", "0.001"));
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.as_str() {
            "64KiB" => "10GiB".to_owned(),
            "250ms" => "1h".to_owned(),
            "2" => "1000".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let p: Value = s.cli(&args).json();
    assert_eq!(p["items"], 1, "{p}");
}
