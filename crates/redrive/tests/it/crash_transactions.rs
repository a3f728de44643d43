//! Transactions under `kill -9`: workers receive originals and, for each, apply one
//! transaction that completes it and sends its follow-up (seed 004's pattern), while the
//! real server is SIGKILLed several times and restarted on the same store. Afterwards,
//! for every original exactly one of {the original is still there, its follow-up is there
//! once} holds: no group was half applied, none twice; and every acknowledged group is
//! applied. On SQLite, and on PostgreSQL when `REDRIVE_TEST_POSTGRES_URL` is set.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_api::message::MessageList;
use redrive_api::transaction::TransactionResponse;
use redrive_testkit::postgres::SchemaGuard;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::Server;

const ROUNDS: usize = 4;
const WORKERS: usize = 4;
const ORIGINALS: usize = 1_200;
const ORIGINAL: &str = "originals";
const FOLLOW_UP: &str = "follow-ups";

/// What the workers saw: the originals whose group was answered 200.
#[derive(Debug, Default)]
struct Ledger {
    acked: HashSet<usize>,
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_transaction_is_all_or_nothing_across_sigkill_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    run(move || Server::start_native(&data, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_transaction_is_all_or_nothing_across_sigkill_on_postgres() {
    let Some(url) = redrive_testkit::postgres::url("the transaction crash test on PostgreSQL")
    else {
        return;
    };
    let schema = SchemaGuard::fresh(&url);
    let store = schema.store_url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    run(move || {
        let (store, data) = (store.clone(), data.clone());
        Server::start_with(move |c| {
            c.args(["--listen", "127.0.0.1:0", "--sqs-listen", "off", "--store"])
                .arg(&store)
                .arg("--data-dir")
                .arg(&data);
        })
    })
    .await;
    drop(schema);
}

async fn run(start: impl Fn() -> Server) {
    let http = http_client();
    let mut server = start();
    for (name, policy) in [
        // Locks held at a crash come back soon; no original reaches the dead-letter store
        // through the crashes' redeliveries.
        (
            ORIGINAL,
            json!({"lock_duration_ms": 1_000, "max_delivery_count": 10_000}),
        ),
        (FOLLOW_UP, json!({})),
    ] {
        let r = http
            .post(format!("{}/v1/queues", server.url))
            .json(&json!({"name": name, "policy": policy}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    for chunk in (0..ORIGINALS).collect::<Vec<_>>().chunks(200) {
        let messages: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"message_id": format!("o{i}"), "body": format!("order {i}")}))
            .collect();
        let r = http
            .post(format!("{}/v1/queues/{ORIGINAL}/messages", server.url))
            .json(&json!({ "messages": messages }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    for round in 0..ROUNDS {
        if round > 0 {
            server = start();
        }
        let acked_this_round = Arc::new(AtomicU64::new(0));
        let kill_after = fastrand::u64(20..120);
        let trigger = Arc::new(Notify::new());
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..WORKERS {
            tasks.spawn(worker(
                http.clone(),
                server.url.clone(),
                ledger.clone(),
                acked_this_round.clone(),
                kill_after,
                trigger.clone(),
            ));
        }
        // Kill once this round has had `kill_after` acknowledged groups, with others in
        // flight (or once its work ran out).
        tokio::time::timeout(Duration::from_secs(120), trigger.notified())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no progress\n{}", server.log()));
        server.kill();
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }

    let server = start();
    let originals = peek_all(&http, &server.url, ORIGINAL).await;
    let follow_ups = peek_all(&http, &server.url, FOLLOW_UP).await;
    let ledger = ledger.lock().unwrap();
    let mut applied = 0;
    for i in 0..ORIGINALS {
        let original = originals.get(&format!("o{i}")).copied().unwrap_or(0);
        let follow_up = follow_ups.get(&format!("f{i}")).copied().unwrap_or(0);
        assert!(original <= 1, "o{i} is on its queue {original} times");
        assert!(
            (original, follow_up) == (1, 0) || (original, follow_up) == (0, 1),
            "o{i}: original {original}, follow-up {follow_up}: a group was half applied \
             or applied twice\n{}",
            server.log()
        );
        if ledger.acked.contains(&i) {
            assert_eq!(
                (original, follow_up),
                (0, 1),
                "o{i}'s group was acknowledged but is not applied"
            );
        }
        applied += follow_up;
    }
    assert_eq!(
        originals.len() + follow_ups.len(),
        ORIGINALS,
        "nothing else is on the queues"
    );
    eprintln!(
        "transaction crash test: {ORIGINALS} originals, {} of them completed by an \
         acknowledged group, {applied} by an applied one, {} left",
        ledger.acked.len(),
        ORIGINALS - applied
    );
    assert!(
        ledger.acked.len() >= ROUNDS * 20,
        "too little load to mean anything"
    );
}

/// Receives originals and applies one group per 1 to 3 of them, until the server is gone
/// or nothing is left.
async fn worker(
    http: reqwest::Client,
    url: String,
    ledger: Arc<Mutex<Ledger>>,
    acked_this_round: Arc<AtomicU64>,
    kill_after: u64,
    trigger: Arc<Notify>,
) {
    loop {
        let Ok(resp) = http
            .post(format!("{url}/v1/queues/{ORIGINAL}/receive"))
            .json(&json!({"max_messages": fastrand::u32(1..=3), "wait_ms": 500}))
            .send()
            .await
        else {
            return; // the server is gone
        };
        if resp.status().is_server_error() {
            continue;
        }
        assert_eq!(resp.status(), 200, "receive");
        let Ok(list) = resp.json::<MessageList>().await else {
            return;
        };
        if list.messages.is_empty() {
            // Nothing visible for a whole long poll: the work ran out (what is left is
            // locked by a crashed round, or done), so this round ends now.
            trigger.notify_one();
            continue;
        }
        let mut ops = Vec::new();
        let mut group = Vec::new();
        for m in &list.messages {
            let i: usize = m.message_id.trim_start_matches('o').parse().unwrap();
            group.push(i);
            ops.push(json!({"kind": "complete", "queue": ORIGINAL,
                "lock_token": m.lock_token.clone().unwrap()}));
            ops.push(json!({"kind": "send", "queue": FOLLOW_UP,
                "message": {"message_id": format!("f{i}"), "body": format!("follow-up of {i}")}}));
        }
        // Some groups put the sends first, so a crash can fall between any two writes.
        if fastrand::bool() {
            ops.reverse();
        }
        let Ok(resp) = http
            .post(format!("{url}/v1/transactions"))
            .json(&json!({ "operations": ops }))
            .send()
            .await
        else {
            return; // in doubt: the final check decides it from the queues
        };
        let status = resp.status();
        if status == 409 {
            // A lock that ran out (a slow round): refused whole, the original comes back.
            continue;
        }
        if status.is_server_error() {
            continue;
        }
        assert_eq!(status, 200, "transaction");
        let Ok(answer) = resp.json::<TransactionResponse>().await else {
            return; // the answer was cut off: not acknowledged
        };
        assert_eq!(answer.results.len(), ops.len());
        ledger.lock().unwrap().acked.extend(group.iter().copied());
        let before = acked_this_round.fetch_add(1, Ordering::SeqCst);
        if before + 1 == kill_after {
            trigger.notify_one();
        }
    }
}

/// How many times each id is on the queue, whatever its state.
async fn peek_all(http: &reqwest::Client, url: &str, queue: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let mut from = 0i64;
    loop {
        let list: MessageList = http
            .get(format!(
                "{url}/v1/queues/{queue}/messages?from_sequence={from}&limit=500"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let Some(last) = list.messages.last() else {
            return out;
        };
        from = last.sequence_number + 1;
        for m in list.messages {
            *out.entry(m.message_id).or_insert(0) += 1;
        }
    }
}
