//! Configuration of `redrive serve` through the real binary: flag over environment over
//! file, unknown keys refused by name, unsupported stores refused, SIGTERM is graceful.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Server, command, free_port, healthy, logged_listen_addr};

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("redrive.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn flag_beats_environment_beats_file_for_the_listen_address() {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, env_port, flag_port) = (free_port(), free_port(), free_port());
    let data = dir.path().join("data");
    let config = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:{file_port}\"\ndata_dir = \"{}\"\n[server]\nsweep_interval_ms = 500\n",
            data.display()
        ),
    );

    let mut s = Server::start_with(|c| {
        c.arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{flag_port}"))
            .env("REDRIVE_LISTEN", format!("127.0.0.1:{env_port}"));
    });
    assert_eq!(s.addr.port(), flag_port, "the flag wins");
    assert!(healthy(s.addr));
    assert!(
        s.log().contains("server.sweep_interval_ms=500"),
        "{}",
        s.log()
    );
    assert!(s.terminate().success());

    let mut s = Server::start_with(|c| {
        c.env("REDRIVE_CONFIG", &config)
            .env("REDRIVE_LISTEN", format!("127.0.0.1:{env_port}"));
    });
    assert_eq!(s.addr.port(), env_port, "the environment beats the file");
    assert!(s.terminate().success());

    let mut s = Server::start_with(|c| {
        c.arg("--config").arg(&config);
    });
    assert_eq!(s.addr.port(), file_port, "the file beats the default");
    assert!(
        data.join("redrive.db").exists(),
        "data_dir from the file is used"
    );
    assert!(s.terminate().success());
}

/// Runs `redrive serve ARGS` that is expected to exit on its own; returns (code, stderr).
fn serve_expecting_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = command()
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("`redrive serve {}` did not exit", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_config_keys_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "listen = \"127.0.0.1:0\"\n[server]\nsweep_intervall_ms = 5\n",
    );
    let (code, stderr) = serve_expecting_exit(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("sweep_intervall_ms"), "{stderr}");

    let config = write_config(dir.path(), "colour = \"blue\"\n");
    let (code, stderr) = serve_expecting_exit(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("colour"), "{stderr}");
}

#[test]
fn unsupported_stores_are_refused_without_leaking_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = serve_expecting_exit(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--store",
        "mysql://app:hunter2@db.example/redrive",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unsupported store"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn an_unreachable_postgres_store_fails_the_start_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = serve_expecting_exit(&[
        "--listen",
        "127.0.0.1:0",
        "--sqs-listen",
        "off",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--store",
        // Nothing listens on port 1.
        "postgres://app:hunter2@127.0.0.1:1/redrive?connect_timeout=2",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn sqlite_store_url_names_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("elsewhere").join("broker.db");
    let mut s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path().join("unused"))
            .env("REDRIVE_STORE", format!("sqlite://{}", db.display()));
    });
    assert!(db.exists(), "{}", s.log());
    assert!(!dir.path().join("unused").join("redrive.db").exists());
    assert!(s.terminate().success());
}

#[test]
fn sigterm_stops_the_server_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    assert_eq!(logged_listen_addr(&s.log()), Some(s.addr));
    let status = s.terminate();
    assert!(status.success(), "{status}\n{}", s.log());
    let log = s.log();
    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(log.contains("closing the store"), "{log}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--log-format")
            .arg("json");
    });
    assert!(s.terminate().success());
    for line in s.log().lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
}

/// Sends one JSON-protocol SQS request with the `Host` header `host` and reads the answer
/// to the close.
fn sqs_with_host(port: u16, host: &str, action: &str, input: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        c,
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: AmazonSQS.{action}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{input}",
        input.len()
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn sqs_queue_urls_name_the_listen_address_or_the_public_url_never_the_host_header() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--sqs-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path());
    });
    let forged = "attacker.example";
    let created = sqs_with_host(port, forged, "CreateQueue", r#"{"QueueName":"jobs"}"#);
    assert!(
        created.contains(&format!("http://127.0.0.1:{port}/000000000000/jobs")),
        "{created}"
    );
    assert!(!created.contains("attacker"), "{created}");
    drop(s);

    let port = free_port();
    let _s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--sqs-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path())
            .env("REDRIVE_SQS_PUBLIC_URL", "https://sqs.example.test/");
    });
    let listed = sqs_with_host(port, forged, "ListQueues", "{}");
    assert!(
        listed.contains("https://sqs.example.test/000000000000/jobs"),
        "{listed}"
    );
    assert!(!listed.contains("attacker"), "{listed}");
}

/// Listening on every address (with authentication on, as it must be there) starts, and
/// the log says the queue URLs name localhost until `sqs_public_url` says better (the URL
/// itself: `config::tests::sqs_queue_urls_come_from_the_configuration`).
#[test]
fn an_sqs_endpoint_on_every_address_names_localhost_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut s = Server::start_with(|c| {
        c.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--auth")
            .arg("--sqs-listen")
            .arg(format!("0.0.0.0:{port}"))
            .arg("--data-dir")
            .arg(dir.path());
    });
    assert!(s.terminate().success());
    let log = s.log();
    assert!(
        log.contains("WARN")
            && log.contains("set sqs_public_url")
            && log.contains(&format!("http://localhost:{port}")),
        "{log}"
    );
}
