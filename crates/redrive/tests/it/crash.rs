//! Durability under `kill -9`: the real server is killed with SIGKILL while tasks send
//! and complete concurrently, restarted on the same data directory several times, and
//! then every acknowledged send must be either completed or still present, and no
//! acknowledged completion may come back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_api::message::{MessageList, SendResponse, SettleResponse};
use redrive_api::queue::QueueInfo;
use serde_json::json;
use tokio::sync::Notify;

use crate::support::Server;

const ROUNDS: usize = 4;
const SENDERS: usize = 4;
const RECEIVERS: usize = 2;
const QUEUE: &str = "crash";

/// What the clients saw. "In doubt" means the request was sent but its answer was not
/// seen, so the test cannot know whether the server applied it.
#[derive(Debug, Default)]
struct Ledger {
    /// Every id a send request carried.
    attempted: HashSet<String>,
    /// Ids whose send was answered 201.
    acked: HashSet<String>,
    /// Ids whose complete was answered 200 without an item error, in order (a repeat
    /// would mean a completed message came back).
    completed: Vec<String>,
    /// Ids whose complete request got no answer.
    complete_in_doubt: HashSet<String>,
}

type Shared = Arc<Mutex<Ledger>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_work_survives_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let ledger: Shared = Arc::default();

    let mut server = Server::start(dir.path());
    let created = http
        .post(format!("{}/v1/queues", server.url))
        .json(&json!({
            "name": QUEUE,
            // No message may reach the dead-letter store through redeliveries caused by
            // the crashes; 1 s locks let messages locked at a crash come back soon.
            "policy": {"lock_duration_ms": 1_000, "max_delivery_count": 10_000},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());

    for round in 0..ROUNDS {
        if round > 0 {
            server = Server::start(dir.path());
        }
        let acked_this_round = Arc::new(AtomicU64::new(0));
        let kill_after = fastrand::u64(100..800);
        let trigger = Arc::new(Notify::new());
        let mut tasks = tokio::task::JoinSet::new();
        for s in 0..SENDERS {
            tasks.spawn(sender(
                http.clone(),
                server.url.clone(),
                format!("r{round}-s{s}"),
                ledger.clone(),
                acked_this_round.clone(),
                kill_after,
                trigger.clone(),
            ));
        }
        for _ in 0..RECEIVERS {
            tasks.spawn(receiver(http.clone(), server.url.clone(), ledger.clone()));
        }
        // Kill once this round has had `kill_after` acknowledged sends: a moment that
        // differs from round to round, with sends and completes in flight.
        tokio::time::timeout(Duration::from_secs(120), trigger.notified())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no progress\n{}", server.log()));
        server.kill();
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }

    // Restart once more, drain what can be received, then list what is left.
    let server = Server::start(dir.path());
    let mut rounds = 0;
    loop {
        let got = receive_and_complete(&http, &server.url, &ledger, 100, 0).await;
        match got {
            Some(0) => break,
            Some(_) => {}
            None => panic!("drain failed\n{}", server.log()),
        }
        rounds += 1;
        assert!(rounds < 10_000, "the drain does not end\n{}", server.log());
    }
    let present = peek_all(&http, &server.url).await;
    let info: QueueInfo = json_of(http.get(format!("{}/v1/queues/{QUEUE}", server.url))).await;

    let ledger = ledger.lock().unwrap();
    let mut seen = HashSet::new();
    for id in &ledger.completed {
        assert!(seen.insert(id), "{id} was completed twice: it came back");
    }
    let completed: HashSet<&String> = ledger.completed.iter().collect();
    let present_ids: HashSet<&String> = present.keys().collect();
    assert_eq!(present_ids.len(), present.len());
    for id in &present_ids {
        assert!(
            !completed.contains(id),
            "{id} is present although its complete was acknowledged"
        );
        assert!(ledger.attempted.contains(*id), "{id} was never sent");
    }
    let missing: Vec<&String> = ledger
        .acked
        .iter()
        .filter(|id| {
            !present_ids.contains(id)
                && !completed.contains(id)
                && !ledger.complete_in_doubt.contains(*id)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged sends are lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let c = info.counts;
    assert_eq!(
        c.active + c.scheduled + c.locked + c.deferred,
        present.len() as u64,
        "queue counts disagree with peek: {c:?}"
    );
    assert_eq!(c.dead_lettered, 0);

    // The books balance: each acknowledged send is present, completed, or its
    // complete is in doubt; sends whose ack was not seen may add to present/completed.
    let acked_present = ledger
        .acked
        .iter()
        .filter(|id| present_ids.contains(id))
        .count();
    let acked_completed = ledger
        .acked
        .iter()
        .filter(|id| completed.contains(id))
        .count();
    let acked_in_doubt = ledger.acked.len() - acked_present - acked_completed;
    let unacked_survivors = present.len() + completed.len() - acked_present - acked_completed;
    eprintln!(
        "crash test: {} sends attempted, {} acknowledged; {} completed, {} present \
         ({} locked); {} acknowledged with complete in doubt; {} unacknowledged sends survived",
        ledger.attempted.len(),
        ledger.acked.len(),
        completed.len(),
        present.len(),
        present.values().filter(|s| s.as_str() == "locked").count(),
        acked_in_doubt,
        unacked_survivors,
    );
    assert!(
        ledger.acked.len() >= ROUNDS * 100,
        "too little load to mean anything"
    );
    assert!(acked_in_doubt <= ledger.complete_in_doubt.len());
}

async fn sender(
    http: reqwest::Client,
    url: String,
    prefix: String,
    ledger: Shared,
    acked_this_round: Arc<AtomicU64>,
    kill_after: u64,
    trigger: Arc<Notify>,
) {
    let mut n = 0u64;
    loop {
        let ids: Vec<String> = (0..fastrand::usize(1..=8))
            .map(|_| {
                n += 1;
                format!("{prefix}-{n}")
            })
            .collect();
        ledger.lock().unwrap().attempted.extend(ids.iter().cloned());
        let body = json!({
            "messages": ids.iter().map(|id| json!({"message_id": id, "body": format!("payload of {id}")})).collect::<Vec<_>>()
        });
        let resp = match http
            .post(format!("{url}/v1/queues/{QUEUE}/messages"))
            .json(&body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(_) => return, // the server is gone
        };
        let status = resp.status();
        if status.is_server_error() {
            continue;
        }
        assert_eq!(
            status,
            201,
            "send: {}",
            resp.text().await.unwrap_or_default()
        );
        let Ok(answer) = resp.json::<SendResponse>().await else {
            return; // the answer was cut off: not acknowledged
        };
        let answered: Vec<&str> = answer
            .results
            .iter()
            .map(|r| r.message_id.as_str())
            .collect();
        assert_eq!(answered, ids.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(answer.results.iter().all(|r| !r.duplicate));
        ledger.lock().unwrap().acked.extend(ids.iter().cloned());
        let k = ids.len() as u64;
        let before = acked_this_round.fetch_add(k, Ordering::SeqCst);
        if before < kill_after && before + k >= kill_after {
            trigger.notify_one();
        }
    }
}

async fn receiver(http: reqwest::Client, url: String, ledger: Shared) {
    while receive_and_complete(&http, &url, &ledger, 16, 100)
        .await
        .is_some()
    {}
}

/// One receive and one batch complete. `None` once the server is unreachable;
/// otherwise how many messages were received.
async fn receive_and_complete(
    http: &reqwest::Client,
    url: &str,
    ledger: &Shared,
    max: u32,
    wait_ms: u64,
) -> Option<usize> {
    let resp = http
        .post(format!("{url}/v1/queues/{QUEUE}/receive"))
        .json(&json!({"max_messages": max, "wait_ms": wait_ms}))
        .send()
        .await
        .ok()?;
    if resp.status().is_server_error() {
        return Some(1); // transient; try again
    }
    assert_eq!(
        resp.status(),
        200,
        "receive: {}",
        resp.text().await.unwrap_or_default()
    );
    let list: MessageList = resp.json().await.ok()?;
    if list.messages.is_empty() {
        return Some(0);
    }
    let by_token: HashMap<String, String> = list
        .messages
        .iter()
        .map(|m| (m.lock_token.clone().unwrap(), m.message_id.clone()))
        .collect();
    let settlements: Vec<_> = by_token
        .keys()
        .map(|t| json!({"lock_token": t, "action": "complete"}))
        .collect();
    ledger
        .lock()
        .unwrap()
        .complete_in_doubt
        .extend(by_token.values().cloned());
    let resp = http
        .post(format!("{url}/v1/queues/{QUEUE}/settle"))
        .json(&json!({"settlements": settlements}))
        .send()
        .await
        .ok()?;
    if resp.status() != 200 {
        // Not acknowledged: the ids stay in doubt.
        assert!(resp.status().is_server_error(), "settle: {}", resp.status());
        return Some(list.messages.len());
    }
    let answer: SettleResponse = resp.json().await.ok()?;
    let mut l = ledger.lock().unwrap();
    for r in answer.results {
        let id = by_token[&r.lock_token].clone();
        l.complete_in_doubt.remove(&id);
        if r.error.is_none() {
            l.completed.push(id);
        }
    }
    Some(list.messages.len())
}

/// Sends `request` and reads its answer's JSON body (the test fails on either).
async fn json_of<T: serde::de::DeserializeOwned>(request: reqwest::RequestBuilder) -> T {
    request.send().await.unwrap().json().await.unwrap()
}

/// Every message on the queue, whatever its state: id → state.
async fn peek_all(http: &reqwest::Client, url: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut from = 0i64;
    loop {
        let list: MessageList = json_of(http.get(format!(
            "{url}/v1/queues/{QUEUE}/messages?from_sequence={from}&limit=100"
        )))
        .await;
        let Some(last) = list.messages.last() else {
            return out;
        };
        from = last.sequence_number + 1;
        for m in list.messages {
            let previous = out.insert(m.message_id.clone(), m.state.clone());
            assert!(previous.is_none(), "{} is on the queue twice", m.message_id);
        }
    }
}

/// The lock of a plain receive is held in the server's memory: a SIGKILL loses which
/// messages were delivered, never that they may have been. After the restart the message
/// received before the kill counts that delivery, and the dead letter made of it says its
/// count is approximate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_lost_with_the_process_still_counts_approximate() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut server = Server::start(dir.path());
    let url = server.url.clone();
    let created = http
        .post(format!("{url}/v1/queues"))
        .json(&json!({"name": "counted", "policy": {"max_delivery_count": 2}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    let sent = http
        .post(format!("{url}/v1/queues/counted/messages"))
        .json(&json!({"messages": [{"message_id": "a", "body": "a"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 201, "{}", sent.text().await.unwrap());
    let receive = |url: String| {
        let http = http.clone();
        async move {
            let list: serde_json::Value = json_of(
                http.post(format!("{url}/v1/queues/counted/receive"))
                    .json(&json!({"max_messages": 1})),
            )
            .await;
            list["messages"][0].clone()
        }
    };
    let first = receive(url).await;
    assert_eq!(first["delivery_count"], 1, "{first}");
    server.kill();

    let server = Server::start(dir.path());
    let url = server.url.clone();
    let again = receive(url.clone()).await;
    assert_eq!(again["message_id"], "a", "{again}\n{}", server.log());
    assert_eq!(
        again["delivery_count"], 2,
        "the lost delivery counts: {again}"
    );
    let settled = http
        .post(format!("{url}/v1/queues/counted/settle"))
        .json(&json!({"settlements": [
            {"lock_token": again["lock_token"], "action": "abandon"}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(settled.status(), 200, "{}", settled.text().await.unwrap());
    let records: serde_json::Value =
        json_of(http.get(format!("{url}/v1/queues/counted/dead-letters"))).await;
    let record = &records["dead_letters"][0];
    assert_eq!(record["delivery_count"], 2, "{records}");
    assert_eq!(record["delivery_count_quality"], "approximate", "{records}");
    assert!(
        server
            .log()
            .contains("raised by one and marked approximate"),
        "the restart says what it did\n{}",
        server.log()
    );
}
