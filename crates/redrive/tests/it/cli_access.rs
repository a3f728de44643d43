//! Tokens and the audit log end to end: `serve --auth` prints a bootstrap admin token
//! once, the CLI sends `--token`/`REDRIVE_TOKEN`, roles are enforced, revocation is
//! immediate, and `redrive audit verify` detects an edited entry in the database file.

use serde_json::Value;

use crate::support::{Server, command, printed_admin_token};

#[test]
fn tokens_roles_revocation_and_a_tampered_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_native(dir.path(), true);
    let admin = printed_admin_token(&s.log());
    assert!(
        !s.log()
            .lines()
            .any(|l| l.contains(" INFO ") && l.contains(&admin)),
        "the token must not reach the log lines"
    );

    // Without a token: refused, with a clear line.
    s.cli(&["queue", "list"]).fails(1, "unauthenticated");
    s.cli(&["--token", &admin, "queue", "create", "orders"])
        .ok();

    let created: Value = s
        .cli(&[
            "--token",
            &admin,
            "--json",
            "token",
            "create",
            "--name",
            "shop",
            "--grant",
            "producer:orders",
        ])
        .json();
    let shop = created["secret"].as_str().unwrap().to_owned();
    let shop_id = created["id"].as_str().unwrap().to_owned();
    s.cli(&["--token", &shop, "send", "orders", "hello"]).ok();
    s.cli(&["--token", &shop, "queue", "list"])
        .fails(1, "forbidden");
    s.cli(&["--token", &shop, "peek", "orders"])
        .fails(1, "payload-reader");
    // A grant that is not one is refused before anything is sent.
    s.cli(&[
        "--token", &admin, "token", "create", "--name", "x", "--grant", "owner",
    ])
    .fails(2, "unknown role");

    let list = s.cli(&["--token", &admin, "token", "list"]);
    assert!(list.ok().contains("shop"), "{}", list.stdout);
    assert!(!list.stdout.contains("rdt_"), "{}", list.stdout);

    s.cli(&["--token", &admin, "token", "revoke", &shop_id])
        .ok();
    s.cli(&["--token", &shop, "send", "orders", "again"])
        .fails(1, "unauthenticated");

    let audit: Value = s
        .cli(&[
            "--token", &admin, "--json", "audit", "list", "--limit", "1000",
        ])
        .json();
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for a in [
        "token.create",
        "token.revoke",
        "denied:ReadMetadata",
        "denied:Peek",
    ] {
        assert!(actions.contains(&a), "{a} not in {actions:?}");
    }
    let ok = s.cli(&["--token", &admin, "audit", "verify"]);
    assert!(ok.ok().contains("audit log intact"), "{}", ok.stdout);

    // Someone with the database file edits an entry: the chain no longer holds.
    let db = rusqlite::Connection::open(dir.path().join("redrive.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let changed = db
        .execute(
            "UPDATE audit_log SET outcome = 'ok' WHERE action = 'denied:Peek'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    s.cli(&["--token", &admin, "audit", "verify"])
        .fails(1, "broken");
}

#[test]
fn the_bootstrap_token_is_printed_once_and_a_configured_one_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Server::start_native(dir.path(), true);
    let admin = printed_admin_token(&first.log());
    first.terminate();
    let again = Server::start_native(dir.path(), true);
    assert!(
        !again.log().contains("Admin token (shown only now)"),
        "{}",
        again.log()
    );
    again.cli(&["--token", &admin, "token", "list"]).ok();
    drop(again);

    let other = tempfile::tempdir().unwrap();
    let configured = format!("rdt_{}", "c".repeat(64));
    let s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--sqs-listen")
            .arg("off")
            .arg("--data-dir")
            .arg(other.path())
            .env("REDRIVE_AUTH_ENABLED", "true")
            .env("REDRIVE_BOOTSTRAP_TOKEN", &configured);
    });
    assert!(!s.log().contains("Admin token (shown only now)"));
    assert!(!s.log().contains(&configured), "a secret reached the log");
    s.cli(&["--token", &configured, "token", "list"]).ok();
}

#[test]
fn without_authentication_only_loopback_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let out = command()
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--sqs-listen",
            "off",
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without authentication"), "{err}");
    // On loopback it starts, and says loudly that it is open.
    let s = Server::start(dir.path());
    assert!(s.log().contains("AUTHENTICATION IS OFF"), "{}", s.log());
    s.cli(&["queue", "list"]).ok();
}

#[test]
fn with_auth_the_startup_log_says_what_the_sqs_endpoint_checks_and_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--sqs-listen")
            .arg("127.0.0.1:0")
            .arg("--sqs-public-url")
            .arg("https://sqs.example.test")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--auth");
    });
    let log = s.log();
    assert!(!log.contains("any signature accepted"), "{log}");
    assert!(
        log.contains(
            "sqs_access_keys=(none: signatures verified against the API tokens' SQS keys, \
             unsigned requests refused)"
        ),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("SQS endpoint enabled")
            && l.contains("public_url=https://sqs.example.test")),
        "{log}"
    );
}
