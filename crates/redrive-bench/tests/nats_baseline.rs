//! `redrive-bench nats-baseline` and `--compare nats` against the real NATS server at
//! 127.0.0.1:4222 (JetStream on): each scenario runs end to end, consumes what it
//! publishes, deletes its stream unless told to keep it, and refuses a stream that
//! already exists; `--compare nats` alternates rounds against an in-process redrive
//! server. A URL nothing listens on fails at once with an error naming it and how to
//! start a server.
//!
//! Without a NATS server the tests that need one say they are skipped; under CI (`CI`
//! set), where the machine runs one, they fail instead.

// Helpers outside `#[test]` functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;

/// The NATS server the tests use.
const NATS_URL: &str = "nats://127.0.0.1:4222";

/// Whether a NATS server listens at 127.0.0.1:4222; without one, says that `what` is
/// skipped (under CI: fails).
fn nats_answers(what: &str) -> bool {
    let addr: SocketAddr = "127.0.0.1:4222".parse().unwrap();
    if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "{what} must run in CI, but no NATS server listens at {NATS_URL} \
         (the machine starts one: nats-server -js)"
    );
    // Straight to stderr: the harness's capture would swallow `eprintln!`.
    let _ = writeln!(
        std::io::stderr(),
        "{what} skipped: no NATS server listens at {NATS_URL} (start one: nats-server -js)"
    );
    false
}

/// The outcome of one `redrive-bench` run.
struct Run {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts success and returns stdout as JSON.
    #[track_caller]
    fn json(&self) -> Value {
        assert_eq!(
            self.code,
            Some(0),
            "`redrive-bench {}` failed:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// Asserts exit code `code` and an `error:` line on stderr mentioning each needle.
    #[track_caller]
    fn fails(&self, code: i32, needles: &[&str]) {
        assert_eq!(
            self.code,
            Some(code),
            "`redrive-bench {}`: expected exit {code}:\nstdout: {}\nstderr: {}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        assert!(self.stderr.starts_with("error:"), "{}", self.stderr);
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "`redrive-bench {}`: stderr lacks {needle:?}:\n{}",
                self.args.join(" "),
                self.stderr
            );
        }
    }
}

/// Runs `redrive-bench --json ARGS…` with the redrive URL pointing nowhere unless ARGS
/// name one.
fn bench(args: &[&str]) -> Run {
    let mut all = vec!["--json"];
    if !args.contains(&"--url") {
        all.extend(["--url", "http://127.0.0.1:9"]);
    }
    all.extend_from_slice(args);
    let out = Command::new(env!("CARGO_BIN_EXE_redrive-bench"))
        .args(&all)
        .env_remove("REDRIVE_URL")
        .env_remove("REDRIVE_TOKEN")
        .env_remove("REDRIVE_BENCH_NATS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        args: all.iter().map(|s| (*s).to_owned()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A stream name no other run uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}_{:012x}", fastrand::u64(..1 << 48))
}

async fn js() -> jetstream::Context {
    jetstream::new(async_nats::connect(NATS_URL).await.unwrap())
}

async fn stream_exists(js: &jetstream::Context, name: &str) -> bool {
    js.get_stream(name).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w1_runs_end_to_end_and_cleans_up() {
    if !nats_answers("the nats-baseline w1 test") {
        return;
    }
    let js = js().await;
    let stream = fresh("rd_nb_w1");
    let report = bench(&[
        "--nats-url",
        NATS_URL,
        "nats-baseline",
        "--stream",
        &stream,
        "w1",
        "-n",
        "2000",
    ])
    .json();
    assert_eq!(report["scenario"], "nats-baseline w1", "{report}");
    assert_eq!(report["queue"], stream.as_str(), "{report}");
    assert_eq!(report["messages"], 2000, "{report}");
    assert_eq!(report["publish_acks_in_flight"], 256, "{report}");
    for rate in ["publish_rate", "receive_ack_rate"] {
        assert!(report[rate].as_u64().unwrap() > 0, "{rate}: {report}");
    }
    assert!(
        !stream_exists(&js, &stream).await,
        "the stream is deleted afterwards"
    );

    // With --keep the stream stays, empty: every message was acked, and a work queue
    // drops what is acked.
    let kept = fresh("rd_nb_keep");
    let report = bench(&[
        "nats-baseline",
        "--stream",
        &kept,
        "--keep",
        "w1",
        "-n",
        "300",
        "--in-flight",
        "8",
        "--receive-batch",
        "50",
    ])
    .json();
    assert_eq!(report["publish_acks_in_flight"], 8, "{report}");
    let mut s = js.get_stream(&kept).await.unwrap();
    let info = s.info().await.unwrap();
    assert_eq!(info.state.messages, 0, "{info:?}");
    assert_eq!(info.state.last_sequence, 300, "{info:?}");
    assert_eq!(
        info.config.retention,
        jetstream::stream::RetentionPolicy::WorkQueue
    );
    assert_eq!(info.config.storage, jetstream::stream::StorageType::File);

    // A stream that exists is refused, and left as it was.
    bench(&["nats-baseline", "--stream", &kept, "w1", "-n", "10"])
        .fails(2, &["already exists", &kept]);
    let info = js
        .get_stream(&kept)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.state.last_sequence, 300, "nothing was published to it");
    js.delete_stream(&kept).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w2_counts_one_max_deliveries_advisory_per_message() {
    if !nats_answers("the nats-baseline w2 test") {
        return;
    }
    let stream = fresh("rd_nb_w2");
    let report = bench(&[
        "nats-baseline",
        "--stream",
        &stream,
        "w2",
        "-n",
        "300",
        "--consumers",
        "2",
    ])
    .json();
    assert_eq!(report["messages"], 300, "{report}");
    assert!(report["dead_letter_rate"].as_u64().unwrap() > 0, "{report}");
    // Each message is delivered max_deliver (3) times before its advisory; a delivery
    // buffered when the run stops may add a few more.
    assert!(
        report["deliveries"].as_u64().unwrap() >= 900,
        "every message delivered 3 times: {report}"
    );
    assert!(!stream_exists(&js().await, &stream).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_reports_percentiles_of_every_message() {
    if !nats_answers("the nats-baseline latency test") {
        return;
    }
    let stream = fresh("rd_nb_lat");
    let report = bench(&[
        "nats-baseline",
        "--stream",
        &stream,
        "latency",
        "--rate",
        "500",
        "--duration",
        "1s",
    ])
    .json();
    let sent = report["sent"].as_u64().unwrap();
    assert!((450..=500).contains(&sent), "{report}");
    assert_eq!(report["received"].as_u64(), Some(sent), "{report}");
    let p50 = report["latency_p50"].as_f64().unwrap();
    let p99 = report["latency_p99"].as_f64().unwrap();
    let max = report["latency_max"].as_f64().unwrap();
    assert!(p50 <= p99 && p99 <= max, "{report}");
    assert!(!stream_exists(&js().await, &stream).await);
}

#[test]
fn a_url_nothing_listens_on_fails_at_once_naming_it() {
    let started = Instant::now();
    let run = bench(&[
        "--nats-url",
        "nats://127.0.0.1:1",
        "nats-baseline",
        "w1",
        "-n",
        "10",
    ]);
    run.fails(1, &["nats://127.0.0.1:1", "nats-server -js", "--nats-url"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    bench(&[
        "--nats-url",
        "nats://127.0.0.1:1",
        "nats-baseline",
        "latency",
    ])
    .fails(1, &["nats://127.0.0.1:1", "nats-server -js"]);
    // A URL that is not nats:// is bad input.
    bench(&["--nats-url", "http://127.0.0.1:4222", "nats-baseline", "w1"])
        .fails(2, &["--nats-url"]);
    // --rounds without --compare is a usage error.
    let run = bench(&["w1", "--rounds", "2"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--compare"), "{}", run.stderr);
}

/// How many queues the server has.
async fn queue_count(server: &redrive_testkit::TestServer) -> usize {
    let queues: Value = server
        .http
        .get(format!("{}/v1/queues", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    queues["queues"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_alternates_rounds_and_reports_ratios() {
    if !nats_answers("the --compare nats test") {
        return;
    }
    let server = redrive_testkit::TestServer::builder()
        .system_clock()
        .start()
        .await;
    // A missing NATS server fails the run before its first round: no queue is created.
    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        bench(&[
            "--url",
            &url,
            "--nats-url",
            "nats://127.0.0.1:1",
            "w1",
            "-n",
            "10",
            "--compare",
            "nats",
        ])
    })
    .await
    .unwrap();
    run.fails(1, &["nats://127.0.0.1:1", "nats-server -js"]);
    assert_eq!(queue_count(&server).await, 0);

    let url = server.url.clone();
    let run = tokio::task::spawn_blocking(move || {
        bench(&[
            "--url",
            &url,
            "w1",
            "-n",
            "500",
            "--compare",
            "nats",
            "--rounds",
            "2",
        ])
    })
    .await
    .unwrap();
    let report = run.json();
    assert_eq!(report["scenario"], "w1", "{report}");
    let rounds = report["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{report}");
    let js = js().await;
    for round in rounds {
        assert_eq!(round["redrive"]["messages"], 500, "{round}");
        assert_eq!(round["nats"]["messages"], 500, "{round}");
        let ratio = round["ratios"]["consume_rate"].as_f64().unwrap();
        let expect = round["redrive"]["receive_complete_rate"].as_f64().unwrap()
            / round["nats"]["receive_ack_rate"].as_f64().unwrap();
        assert!((ratio - expect).abs() < 0.01, "{round}");
        assert!(
            !stream_exists(&js, round["stream"].as_str().unwrap()).await,
            "{round}"
        );
    }
    let publish = &report["summary"]["publish_rate"];
    assert_eq!(publish["rounds"], 2, "{report}");
    assert_eq!(publish["ratio"], "redrive/NATS", "{report}");
    let (min, median, max) = (
        publish["min"].as_f64().unwrap(),
        publish["median"].as_f64().unwrap(),
        publish["max"].as_f64().unwrap(),
    );
    assert!(min <= median && median <= max, "{report}");
    assert_eq!(
        queue_count(&server).await,
        0,
        "every round's queue is deleted"
    );
    server.stop().await;
}
