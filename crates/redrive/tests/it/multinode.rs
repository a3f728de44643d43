//! Several `redrive serve` nodes on one PostgreSQL database: producers and consumers
//! spread over three real processes, one node SIGKILLed mid-run and restarted. Afterwards
//! every acknowledged message was completed or is still present, none was completed twice,
//! and a message that always fails is dead-lettered after exactly max-delivery deliveries
//! although those happened on different nodes.
//!
//! Needs `REDRIVE_TEST_POSTGRES_URL` (as the PostgreSQL backend's own tests): without it
//! the test says it is skipped, and under CI it fails.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_api::message::{MessageList, SendResponse, SettleResponse};
use serde_json::{Value, json};

use redrive_testkit::postgres::{FreshDatabase, SchemaGuard};

use crate::support::Server;

/// A schema of its own on the test database for this test (dropped when the guard goes),
/// or `None` (skip).
fn database(what: &str) -> Option<SchemaGuard> {
    Some(SchemaGuard::fresh(&redrive_testkit::postgres::url(what)?))
}

fn node(store: &str, dir: &std::path::Path) -> Server {
    let (store, dir) = (store.to_owned(), dir.to_owned());
    Server::start_with(move |c| {
        c.args(["--listen", "127.0.0.1:0", "--sqs-listen", "off", "--store"])
            .arg(&store)
            .arg("--data-dir")
            .arg(&dir);
    })
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Option<(u16, Value)> {
    let r = http.post(url).json(&body).send().await.ok()?;
    let status = r.status().as_u16();
    let v = r.json::<Value>().await.unwrap_or(Value::Null);
    Some((status, v))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_share_one_database_through_a_node_crash() {
    let Some(schema) = database("the multi-node test") else {
        return;
    };
    let store = schema.store_url();
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Server> = (0..3).map(|_| node(&store, dir.path())).collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let http = http_client();

    let (st, v) = post(
        &http,
        format!("{}/v1/queues", urls[0]),
        json!({"name": "work", "policy": {"lock_duration_ms": 1_000, "max_delivery_count": 1_000}}),
    )
    .await
    .unwrap();
    assert_eq!(st, 201, "{v}");
    let (st, v) = post(
        &http,
        format!("{}/v1/queues", urls[1]),
        json!({"name": "poison", "policy": {"max_delivery_count": 3}}),
    )
    .await
    .unwrap();
    assert_eq!(st, 201, "{v}");

    // A message that always fails, abandoned once on each node.
    let (st, _) = post(
        &http,
        format!("{}/v1/queues/poison/messages", urls[2]),
        json!({"message_id": "p", "body": "x"}),
    )
    .await
    .unwrap();
    assert_eq!(st, 201);
    for (i, url) in urls.iter().enumerate() {
        let (_, got) = post(
            &http,
            format!("{url}/v1/queues/poison/receive"),
            json!({"wait_ms": 5_000}),
        )
        .await
        .unwrap();
        let m: MessageList = serde_json::from_value(got).unwrap();
        assert_eq!(m.messages.len(), 1, "node {i} gets the message");
        assert_eq!(
            m.messages[0].delivery_count as usize,
            i + 1,
            "the count carries across nodes"
        );
        let token = m.messages[0].lock_token.clone().unwrap();
        let settle_on = &urls[(i + 1) % 3]; // settled through another node than received
        let (st, v) = post(
            &http,
            format!("{settle_on}/v1/queues/poison/settle"),
            json!({"lock_token": token, "action": "abandon"}),
        )
        .await
        .unwrap();
        assert_eq!(st, 200, "{v}");
    }
    let page: Value = http
        .get(format!("{}/v1/queues/poison/dead-letters", urls[0]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let dl = &page["dead_letters"][0];
    assert_eq!(dl["reason"], "MaxDeliveryCountExceeded");
    assert_eq!(dl["delivery_count"], 3);

    // Load across the nodes, with node 1 killed and restarted in the middle.
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let completed: Arc<Mutex<Vec<String>>> = Arc::default();
    let in_doubt: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    let producing_left = Arc::new(std::sync::atomic::AtomicUsize::new(3));
    for (p, url) in urls.iter().enumerate() {
        let (http, url, acked, left) = (
            http.clone(),
            url.clone(),
            acked.clone(),
            producing_left.clone(),
        );
        tasks.spawn(async move {
            let _done = Done(left);
            for b in 0..40 {
                let ids: Vec<String> = (0..10).map(|i| format!("p{p}-{b}-{i}")).collect();
                let msgs: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"message_id": id, "body": id}))
                    .collect();
                if let Some((201, v)) = post(
                    &http,
                    format!("{url}/v1/queues/work/messages"),
                    json!({"messages": msgs}),
                )
                .await
                {
                    let r: SendResponse = serde_json::from_value(v).unwrap();
                    acked
                        .lock()
                        .unwrap()
                        .extend(r.results.into_iter().map(|r| r.message_id));
                }
            }
        });
    }
    let producing = producing_left;
    for url in &urls {
        let (http, url, completed, in_doubt, producing) = (
            http.clone(),
            url.clone(),
            completed.clone(),
            in_doubt.clone(),
            producing.clone(),
        );
        // Consumers run while anything is produced; the drain below takes the rest.
        tasks.spawn(async move {
            while producing.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                consume_once(&http, &url, &completed, &in_doubt, 200).await;
            }
        });
    }
    // The crash, while the load runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes[1].kill();
    while tasks.join_next().await.is_some() {}
    nodes[1] = node(&store, dir.path());

    // Drain through every node; locks the dead node held run out after a second.
    let mut idle_rounds = 0;
    while idle_rounds < 3 {
        let before = completed.lock().unwrap().len();
        for url in nodes.iter().map(|n| n.url.clone()) {
            consume_once(&http, &url, &completed, &in_doubt, 1_500).await;
        }
        if completed.lock().unwrap().len() == before {
            idle_rounds += 1;
        } else {
            idle_rounds = 0;
        }
    }

    let done = completed.lock().unwrap().clone();
    let unique: HashSet<&String> = done.iter().collect();
    assert_eq!(unique.len(), done.len(), "a message was completed twice");
    let acked = acked.lock().unwrap().clone();
    let left: Value = http
        .get(format!(
            "{}/v1/queues/work/messages?limit=1000",
            nodes[0].url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let present: HashSet<String> = left["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect();
    for id in &unique {
        assert!(!present.contains(*id), "completed {id} came back");
    }
    let in_doubt = in_doubt.lock().unwrap().clone();
    for id in &acked {
        assert!(
            unique.contains(id) || present.contains(id) || in_doubt.contains(id),
            "acknowledged {id} was lost"
        );
    }
    assert!(
        acked.len() >= 400,
        "most sends were acknowledged ({})",
        acked.len()
    );
}

/// Counts a producer down when it ends, however it ends.
struct Done(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One receive of up to 20 (waiting up to `wait_ms`) and a batch complete; records the ids
/// whose completion was acknowledged.
async fn consume_once(
    http: &reqwest::Client,
    url: &str,
    completed: &Mutex<Vec<String>>,
    in_doubt: &Mutex<HashSet<String>>,
    wait_ms: u64,
) {
    let Some((200, v)) = post(
        http,
        format!("{url}/v1/queues/work/receive"),
        json!({"max_messages": 20, "wait_ms": wait_ms}),
    )
    .await
    else {
        return;
    };
    let got: MessageList = serde_json::from_value(v).unwrap();
    if got.messages.is_empty() {
        return;
    }
    let settlements: Vec<Value> = got
        .messages
        .iter()
        .map(|m| json!({"lock_token": m.lock_token, "action": "complete"}))
        .collect();
    let Some((200, v)) = post(
        http,
        format!("{url}/v1/queues/work/settle"),
        json!({"settlements": settlements}),
    )
    .await
    else {
        // No answer (the node died): the completes may or may not have committed.
        in_doubt
            .lock()
            .unwrap()
            .extend(got.messages.iter().map(|m| m.message_id.clone()));
        return;
    };
    let r: SettleResponse = serde_json::from_value(v).unwrap();
    let mut done = completed.lock().unwrap();
    for (m, res) in got.messages.iter().zip(r.results) {
        if res.error.is_none() {
            done.push(m.message_id.clone());
        }
    }
}

/// The database sessions whose `application_name` is `app`.
async fn sessions(db: &tokio_postgres::Client, app: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
        &[&app],
    )
    .await
    .unwrap()
    .get(0)
}

/// `pool_size=N` in the store URL bounds the connections a node opens for its
/// operations: under 64 concurrent sends, the node's sessions in `pg_stat_activity` never
/// exceed N plus its wake-up listener and its clock connection, and every send succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_keeps_to_its_pool_size() {
    let Some(schema) = database("the pool size test") else {
        return;
    };
    let store = schema.store_url();
    let app = format!("rd_pool_{:08x}", fastrand::u32(..));
    let store = format!("{store}&pool_size=2&application_name={app}");
    let dir = tempfile::tempdir().unwrap();
    let node = node(&store, dir.path());
    let http = http_client();
    let (st, v) = post(
        &http,
        format!("{}/v1/queues", node.url),
        json!({"name": "pooled"}),
    )
    .await
    .unwrap();
    assert_eq!(st, 201, "{v}");

    let (db, conn) = tokio_postgres::connect(&schema.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);

    let mut sends = tokio::task::JoinSet::new();
    for i in 0..64 {
        let (http, url) = (http.clone(), node.url.clone());
        sends.spawn(async move {
            let body = json!({"messages": (0..20).map(|j| json!({"body": format!("{i}-{j}")})).collect::<Vec<_>>()});
            post(&http, format!("{url}/v1/queues/pooled/messages"), body).await
        });
    }
    let mut most = 0;
    while !sends.is_empty() {
        most = most.max(sessions(&db, &app).await);
        if let Some(done) = sends.try_join_next() {
            let (st, v) = done.unwrap().unwrap();
            assert_eq!(st, 201, "{v}");
        } else {
            tokio::task::yield_now().await;
        }
    }
    most = most.max(sessions(&db, &app).await);
    assert!(most >= 1, "the node's sessions were not seen: {most}");
    assert!(
        most <= 2 + 2,
        "pool_size=2 but the node had {most} sessions"
    );
    let r = http
        .get(format!("{}/v1/queues/pooled", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let q: Value = r.json().await.unwrap();
    assert_eq!(q["counts"]["active"], 64 * 20, "{q}");
}

/// A database taken out of service (`ALLOW_CONNECTIONS false`, its sessions ended): every
/// request is a 503 `unavailable` with `Retry-After`, never a 500, and `/healthz` says
/// that the store is what is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_refusing_connections_is_503_and_healthz_names_the_store() {
    let Some(admin) = redrive_testkit::postgres::url("the database outage test") else {
        return;
    };
    let db = FreshDatabase::create(&admin).await;
    let store = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut node = node(&store, dir.path());
    let http = http_client();
    let (st, v) = post(
        &http,
        format!("{}/v1/queues", node.url),
        json!({"name": "q"}),
    )
    .await
    .unwrap();
    assert_eq!(st, 201, "{v}");
    let health = |http: reqwest::Client, url: String| async move {
        let r = http.get(format!("{url}/healthz")).send().await.unwrap();
        let retry = r.headers().get("retry-after").cloned();
        (r.status().as_u16(), retry, r.json::<Value>().await.unwrap())
    };
    let (st, _, v) = health(http.clone(), node.url.clone()).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"status": "ok", "store": "ok", "backend": "postgres"})
    );

    db.refuse_connections().await;
    for i in 0..20 {
        let r = http
            .post(format!("{}/v1/queues/q/messages", node.url))
            .json(&json!({"body": format!("m{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 503, "send {i}");
        assert_eq!(r.headers()["retry-after"], "1");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "unavailable", "{v}");
    }
    let (st, retry, v) = health(http.clone(), node.url.clone()).await;
    assert_eq!(st, 503, "{v}");
    assert!(retry.is_some(), "Retry-After on an unhealthy answer");
    assert_eq!(v["dependency"], "store", "{v}");
    assert_eq!(v["backend"], "postgres", "{v}");
    assert_eq!(v["kind"], "unavailable", "{v}");

    node.kill();
    // The database is dropped with `db`.
}
