//! The CLI against a server that speaks TLS, with a certificate a CA made in the test
//! issued: trusted through `--ca-file` or `REDRIVE_CA_FILE`, refused (exit 3, saying why)
//! without; an `https://` push endpoint created from the CLI; a CA bundle that cannot be
//! used is an input error, for the CLI and for `serve`.

use std::path::Path;
use std::process::Stdio;

use redrive_testkit::tls::{TestCa, TlsFront};
use redrive_testkit::{Receiver, Reply, TestServer, default_settings};

use crate::support::{self, Cli};

/// Runs `redrive ARGS...` with `env` set, off the test's runtime.
async fn redrive(args: &[&str], env: &[(&str, &Path)]) -> Cli {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, std::path::PathBuf)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_path_buf()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = support::command();
        cmd.args(&args).stdin(Stdio::null());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        Cli {
            args,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn the_cli_reaches_a_tls_server_it_is_told_to_trust_and_says_why_it_refuses_one_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("redrive test CA");
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"]).write(dir.path());
    let ca_file = ca.write(dir.path(), "ca.pem");
    let s = TestServer::builder()
        .trust(ca.trust())
        .settings(redrive_server::Settings {
            tls_cert_file: Some(cert),
            tls_key_file: Some(key),
            ..default_settings()
        })
        .start()
        .await;
    let url = format!("https://localhost:{}", s.addr.port());
    let ca_path = ca_file.to_str().unwrap();

    redrive(
        &[
            "--url",
            &url,
            "--ca-file",
            ca_path,
            "queue",
            "create",
            "orders",
        ],
        &[],
    )
    .await
    .ok();
    let out = redrive(&["--url", &url, "--ca-file", ca_path, "stats"], &[]).await;
    assert!(out.ok().contains("orders"), "{}", out.stdout);
    // The same trust from the environment, and by address as well as by name.
    let by_ip = format!("https://127.0.0.1:{}", s.addr.port());
    redrive(
        &["--url", &by_ip, "stats"],
        &[("REDRIVE_CA_FILE", &ca_file)],
    )
    .await
    .ok();
    // Without it the platform's roots do not know the test CA: exit 3, saying why.
    redrive(&["--url", &url, "stats"], &[]).await.fails(
        3,
        "the server's certificate is not issued by a trusted authority",
    );
    redrive(&["--url", &url, "stats"], &[])
        .await
        .fails(3, "--ca-file");

    // An https push endpoint from the CLI: the server validates it over TLS.
    let rx = Receiver::webhook(|_, _| Reply::status(200)).await;
    let front = TlsFront::before(&rx, &ca.issue(&["localhost"])).await;
    redrive(
        &[
            "--url",
            &url,
            "--ca-file",
            ca_path,
            "topic",
            "create",
            "events",
        ],
        &[],
    )
    .await
    .ok();
    let hook = front.url("/hook");
    let out = redrive(
        &[
            "--url",
            &url,
            "--ca-file",
            ca_path,
            "sub",
            "create",
            "events",
            "hook",
            "--push",
            &hook,
            "--dead-letter",
            "own",
        ],
        &[],
    )
    .await;
    out.ok();
    assert!(rx.requests()[0].is_handshake(), "validated over https");
    s.stop().await;
}

#[tokio::test]
async fn a_ca_bundle_that_cannot_be_used_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    redrive(&["--ca-file", missing, "stats"], &[])
        .await
        .fails(2, "missing.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").unwrap();
    redrive(&["--ca-file", empty.to_str().unwrap(), "stats"], &[])
        .await
        .fails(2, "no PEM certificate");
    // serve refuses it before it listens; from the flag, the environment or the file.
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let serve = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--sqs-listen",
        "off",
        "--data-dir",
        data,
    ];
    let mut args = vec!["--ca-file", missing];
    args.extend(serve);
    redrive(&args, &[]).await.fails(2, "ca_file");
    redrive(&serve, &[("REDRIVE_CA_FILE", Path::new(missing))])
        .await
        .fails(2, "missing.pem");
    let config = dir.path().join("redrive.toml");
    std::fs::write(
        &config,
        format!("ca_file = {:?}\n", empty.to_str().unwrap()),
    )
    .unwrap();
    let mut args = serve.to_vec();
    args.extend(["--config", config.to_str().unwrap()]);
    redrive(&args, &[]).await.fails(2, "no PEM certificate");
}
