//! The idempotency register through the real binary: `[[replay.register]]` applied at
//! start (audited once; a restart with the same file changes and audits nothing), a bad
//! entry stops the server with exit 2 naming it, and `redrive register list|set|delete`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Server, command};

const FILE: &str = r#"
[[replay.register]]
key = "com.example.blob.deleted"
answer = "idempotent"
ordering_attribute = "sequence"

[[replay.register]]
key = "orders:*"
answer = "not_idempotent"
"#;

fn start(data: &std::path::Path, config: &std::path::Path) -> Server {
    Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data)
            .arg("--config")
            .arg(config);
    })
}

fn register_actions(s: &Server) -> Vec<(String, String)> {
    let v: Value = s
        .cli(&["--json", "audit", "list", "--limit", "1000"])
        .json();
    let entries = v["entries"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("register."))
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                format!(
                    "{}/{}",
                    e["actor_id"].as_str().unwrap(),
                    e["actor_name"].as_str().unwrap()
                ),
            )
        })
        .collect()
}

#[test]
fn the_config_file_register_is_applied_at_start_and_the_cli_changes_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redrive.toml");
    std::fs::write(&config, FILE).unwrap();
    let data = dir.path().join("data");
    {
        let s = start(&data, &config);
        let list: Vec<Value> = s.cli(&["--json", "register", "list"]).json();
        let keys: Vec<(&str, &str)> = list
            .iter()
            .map(|e| (e["key"].as_str().unwrap(), e["answer"].as_str().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("com.example.blob.deleted", "idempotent"),
                ("orders:*", "not_idempotent")
            ]
        );
        assert_eq!(list[0]["ordering_attribute"], "sequence");
        assert_eq!(register_actions(&s).len(), 2);

        let out = s
            .cli(&["register", "set", "webhook.process", "not_idempotent"])
            .ok()
            .to_owned();
        assert!(out.contains("webhook.process is not_idempotent"), "{out}");
        let out = s
            .cli(&["register", "set", "webhook.process", "not_idempotent"])
            .ok()
            .to_owned();
        assert!(out.contains("unchanged"), "{out}");
        let table = s.cli(&["register", "list"]).ok().to_owned();
        assert!(
            table.contains("webhook.process") && table.contains("KEY"),
            "{table}"
        );
        s.cli(&["register", "set", "a b", "idempotent"])
            .fails(2, "invalid register key");
        s.cli(&["register", "set", "t", "maybe"])
            .fails(2, "idempotent or not_idempotent");
        s.cli(&[
            "register",
            "set",
            "t",
            "not_idempotent",
            "--ordering-attribute",
            "seq",
        ])
        .fails(2, "only for an idempotent type");
        s.cli(&["register", "delete", "webhook.process"]).ok();
        s.cli(&["register", "delete", "webhook.process"])
            .fails(1, "no register entry");
        assert_eq!(register_actions(&s).len(), 4);
    }
    // The same file again: nothing changes, nothing more is audited.
    let s = start(&data, &config);
    assert_eq!(
        register_actions(&s)[..2],
        [
            ("register.set".to_owned(), "system/register".to_owned()),
            ("register.set".to_owned(), "system/register".to_owned()),
        ]
    );
    assert_eq!(register_actions(&s).len(), 4);
}

#[test]
fn a_bad_register_entry_stops_the_server_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redrive.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\n[[replay.register]]\nkey = \"orders:*\"\nanswer = \"idempotent\"\n\
         [[replay.register]]\nkey = \"order created\"\nanswer = \"idempotent\"\n",
    )
    .unwrap();
    let mut child = command()
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("the server did not stop on a bad register entry");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("replay.register entry 2 (\"order created\")"),
        "{stderr}"
    );
}
