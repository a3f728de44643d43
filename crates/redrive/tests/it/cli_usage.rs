//! Usage errors as a person meets them: one `error:` line and the help hint of the command
//! the arguments name, exit 2; a negative number given to a numeric option reaches its
//! range check (the server's range); `serve` refuses the operator options; the global
//! options have their own help section; a token sent to a server without authentication is
//! reported; `stats --watch` and `receive --watch` are live views that stop at `--count`.

use std::process::Output;

use crate::support::{Server, command};

fn run(args: &[&str]) -> Output {
    command().args(args).output().unwrap()
}

/// Asserts exit 2 and a stderr of exactly two lines: the error naming `needle`, then the
/// hint to `hint --help`.
#[track_caller]
fn usage_error(args: &[&str], needle: &str, hint: &str) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{args:?}: one line and the hint: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(
        lines[0].contains(needle),
        "{args:?}: {needle:?} in {stderr}"
    );
    assert_eq!(
        lines[1],
        format!("For more information, try '{hint} --help'."),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout");
}

#[test]
fn usage_errors_are_one_line_and_the_help_hint_of_their_command() {
    usage_error(
        &["queue", "create", "q", "--max-delivery-count", "-1"],
        "-1 is out of range (expected a whole number from 1 to 10000)",
        "redrive queue create",
    );
    usage_error(
        &["queue", "create", "q", "--max-delivery-count", "4294967295"],
        "from 1 to 10000",
        "redrive queue create",
    );
    usage_error(
        &["sub", "create", "t", "s", "--max-attempts", "-3"],
        "from 1 to 30",
        "redrive sub create",
    );
    usage_error(
        &["dlq", "list", "q", "--limit", "-5"],
        "from 1 to 1000",
        "redrive dlq list",
    );
    usage_error(
        &["replay", "items", "plan_1", "--limit", "0"],
        "from 1 to 10000",
        "redrive replay items",
    );
    usage_error(
        &["queue", "create", "q", "--lock-duration", "-5s"],
        "cannot be negative",
        "redrive queue create",
    );
    usage_error(
        &["queue", "create"],
        "required arguments were not provided: <NAME>",
        "redrive queue create",
    );
    usage_error(
        &["queue", "craete", "q"],
        "a similar subcommand exists: 'create'",
        "redrive queue",
    );
    usage_error(&["bogus-command"], "unrecognized subcommand", "redrive");
    usage_error(
        &["send", "q", "x", "--valid-until", "2020-01-01T00:00:00Z"],
        "2020-01-01T00:00:00.000Z is already past",
        "redrive send",
    );
    usage_error(
        &["send", "q", "x", "--valid-until", "-1h"],
        "is already past",
        "redrive send",
    );
}

#[test]
fn serve_refuses_the_operator_options_and_keeps_the_ca_file() {
    for (flag, value) in [
        ("--url", Some("http://x")),
        ("--token", Some("rdt_x")),
        ("--json", None),
    ] {
        let mut args = vec!["serve", flag];
        args.extend(value);
        usage_error(
            &args,
            &format!("{flag} is an option of the operator commands, not of serve"),
            "redrive serve",
        );
    }
    let help = run(&["serve", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--ca-file"), "{text}");
    assert!(!text.contains("--token"), "{text}");
}

#[test]
fn global_options_have_their_own_help_section() {
    let help = run(&["queue", "create", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    let (own, global) = text
        .split_once("Global options:")
        .unwrap_or_else(|| panic!("no global section: {text}"));
    for flag in ["--url", "--token", "--json", "--ca-file"] {
        assert!(
            global.contains(flag),
            "{flag} in the global section: {text}"
        );
        assert!(
            !own.contains(flag),
            "{flag} not among the command's own: {text}"
        );
    }
    assert!(own.contains("--max-delivery-count"), "{text}");
}

#[test]
fn a_token_sent_to_a_server_without_authentication_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    let with = s.cli(&["--token", "rdt_unchecked", "queue", "list"]);
    with.ok();
    assert!(
        with.stderr.contains(
            "runs without authentication: the token sent (--token or REDRIVE_TOKEN) was not checked"
        ),
        "{}",
        with.stderr
    );
    // Reported on a refusal too: the token did not make the difference.
    let refused = s.cli(&["--token", "rdt_unchecked", "queue", "show", "nope"]);
    refused.fails(1, "queue_not_found");
    assert!(
        refused.stderr.contains("was not checked"),
        "{}",
        refused.stderr
    );
    // Without a token, nothing to report.
    let without = s.cli(&["queue", "list"]);
    without.ok();
    assert!(without.stderr.is_empty(), "{}", without.stderr);
}

#[test]
fn stats_and_receive_watch_until_their_count() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path());
    s.cli(&["queue", "create", "orders"]).ok();
    for i in 0..3 {
        s.cli(&["send", "orders", &format!("{{\"n\": {i}}}")]).ok();
    }
    // Two refreshes as JSON lines, then two as tables under the time they were read.
    let lines = s.cli(&[
        "--json",
        "stats",
        "--watch",
        "--interval",
        "100ms",
        "--count",
        "2",
    ]);
    let docs: Vec<serde_json::Value> = lines
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "{}", lines.stdout);
    assert_eq!(
        docs[1]["queues"][0]["counts"]["active"], 3,
        "{}",
        lines.stdout
    );
    let tables = s.cli(&[
        "stats",
        "orders",
        "--watch",
        "--interval",
        "100ms",
        "--count",
        "2",
    ]);
    let text = tables.ok();
    assert_eq!(text.matches("QUEUE").count(), 2, "{text}");
    assert_eq!(
        text.lines().filter(|l| l.ends_with('Z')).count(),
        2,
        "{text}"
    );

    // The receiving view completes what arrives and stops after three messages.
    let watched = s.cli(&[
        "--json",
        "receive",
        "orders",
        "--watch",
        "--complete",
        "--max",
        "2",
        "--wait",
        "1s",
        "--count",
        "3",
    ]);
    let seen: Vec<serde_json::Value> = watched
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 3, "{}", watched.stdout);
    for line in &seen {
        assert!(line["message"]["body"].is_string(), "{line}");
        assert!(line["settled"]["error"].is_null(), "settled: {line}");
    }
    let counts: serde_json::Value = s.cli(&["--json", "stats", "orders"]).json();
    assert_eq!(counts["counts"]["active"], 0, "{counts}");
    assert_eq!(counts["counts"]["locked"], 0, "{counts}");
    usage_error(
        &["receive", "orders", "--watch", "--next-session"],
        "cannot be used with",
        "redrive receive",
    );
}

/// A reader that stops reading (`redrive … | head -1`) ends the command quietly, with the
/// status a shell gives a program SIGPIPE stopped (141), never a panic and a backtrace.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_native(dir.path(), false);
    for q in ["a", "b", "c"] {
        s.cli(&["queue", "create", q]).ok();
    }
    let mut child = command()
        .args(["--url", &s.url, "--json", "queue", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the command has its answer to print.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
