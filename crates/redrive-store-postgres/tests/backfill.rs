//! The failure signatures of dead letters written before schema 19, filled in at
//! connect: a record without one is counted into the aggregate once, by the first
//! connect, whichever node makes it. Same database rule as `conformance.rs`.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use redrive_core::{Area, Classifier, Properties, PropertyValue, QueuePolicy, Timestamp};
use redrive_store::failure::{FailureQuery, FailureSignature};
use redrive_store::{NewMessage, SettleAction, Settlement, Store};
use redrive_store_conformance::{T0, at, msg, name, params};
use redrive_store_postgres::PostgresStore;
use redrive_testkit::postgres::{SchemaGuard, database};

const HOUR: i64 = 3_600_000;

/// Runs `sql` on the guard's schema through a connection of its own.
async fn raw(g: &SchemaGuard, sql: &str) -> Vec<tokio_postgres::SimpleQueryMessage> {
    let (client, connection) = tokio_postgres::connect(&g.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let io = tokio::spawn(connection);
    client
        .batch_execute(&format!("SET search_path TO \"{}\"", g.schema))
        .await
        .unwrap();
    let out = client.simple_query(sql).await.unwrap();
    drop(client);
    let _ = io.await;
    out
}

/// The first column of the first row of `sql`.
async fn scalar(g: &SchemaGuard, sql: &str) -> String {
    raw(g, sql)
        .await
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a row")
}

/// Dead-letters a new message of `q` with `description` at `now`.
async fn fail(store: &PostgresStore, q: &str, id: &str, description: &str, now: Timestamp) {
    let q = name(q);
    let mut properties = Properties::new();
    properties.insert("source".into(), PropertyValue::String("shop".into()));
    store
        .enqueue(
            &q,
            vec![NewMessage {
                properties,
                ..msg(id, b"{}")
            }],
            now,
        )
        .await
        .unwrap();
    let d = store
        .receive(params(&q, 1, 30_000, now, None))
        .await
        .unwrap()
        .deliveries;
    let out = store
        .settle(
            &q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: Some(description.into()),
                    by_broker: false,
                    classifier: Classifier::default(),
                },
            }],
            now,
        )
        .await
        .unwrap();
    assert!(out.results[0].as_ref().unwrap().dead_letter_id.is_some());
}

async fn failures(store: &PostgresStore, area: Area) -> Vec<FailureSignature> {
    store
        .list_failures(&FailureQuery {
            area,
            queues: None,
            from: None,
            to: None,
            after: None,
            limit: 100,
            now: at(3 * HOUR),
        })
        .await
        .unwrap()
}

/// Makes every record of the schema look written before schema 19: no signature, no
/// source, and nothing of them in the aggregate.
const FORGET_SIGNATURES: &str = "UPDATE dead_letters SET signature = NULL, source = NULL; \
     DELETE FROM failure_signatures; DELETE FROM failure_signature_counts; \
     DELETE FROM failure_signature_hours;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_signature_are_counted_once_at_connect() {
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store
        .create_queue(&name("orders"), &QueuePolicy::default(), T0)
        .await
        .unwrap();
    fail(&store, "orders", "m1", "order 17 has no amount", T0).await;
    fail(&store, "orders", "m2", "order 18 has no amount", at(HOUR)).await;
    fail(
        &store,
        "orders",
        "m3",
        "order 19 has no amount",
        at(2 * HOUR),
    )
    .await;
    fail(&store, "orders", "m4", "timeout after 30s", at(2 * HOUR)).await;
    let m4 = scalar(&g, "SELECT id FROM dead_letters WHERE message_id = 'm4'").await;
    store
        .move_dead_letter(&name("orders"), &m4, Area::Archived, at(2 * HOUR))
        .await
        .unwrap();
    // The live area counts m4's shape too (count 1, live 0): the backfill, which finds
    // m4 archived, cannot know it was live once.
    let written_live: Vec<FailureSignature> = failures(&store, Area::Live)
        .await
        .into_iter()
        .filter(|s| s.live > 0)
        .collect();
    let written_archived = failures(&store, Area::Archived).await;
    assert_eq!(written_live.len(), 1);
    assert_eq!(written_live[0].count, 3);
    store.close();

    raw(&g, FORGET_SIGNATURES).await;
    assert_eq!(
        scalar(&g, "SELECT count(*) FROM failure_signature_counts").await,
        "0"
    );
    // Two nodes start at once: each record is counted once.
    let (a, b) = tokio::join!(
        PostgresStore::connect(&g.url, g.options()),
        PostgresStore::connect(&g.url, g.options())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let live = failures(&a, Area::Live).await;
    assert_eq!(live.len(), 1, "the three records share one shape");
    let s = &live[0];
    assert_eq!(
        s.id, written_live[0].id,
        "the shape the insert path computes"
    );
    assert_eq!(s.shape, written_live[0].shape);
    assert_eq!(s.shape.source.as_deref(), Some("shop"));
    assert_eq!((s.count, s.live), (3, 3));
    assert_eq!((s.first_seen, s.last_seen), (T0, at(2 * HOUR)));
    assert_eq!(s.sparkline, written_live[0].sparkline);
    let archived = failures(&b, Area::Archived).await;
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].id, written_archived[0].id);
    assert_eq!((archived[0].count, archived[0].live), (1, 1));
    assert_eq!(
        scalar(
            &g,
            "SELECT count(*) FROM dead_letters WHERE signature IS NULL"
        )
        .await,
        "0"
    );
    a.close();
    b.close();

    // A later connect finds nothing to do and counts nothing twice.
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let live = failures(&store, Area::Live).await;
    assert_eq!((live[0].count, live[0].live), (3, 3));
    assert_eq!(failures(&store, Area::Archived).await[0].count, 1);
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_cut_short_resumes_with_what_is_left() {
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store
        .create_queue(&name("orders"), &QueuePolicy::default(), T0)
        .await
        .unwrap();
    for i in 0..3 {
        fail(
            &store,
            "orders",
            &format!("m{i}"),
            "order 1 has no amount",
            T0,
        )
        .await;
    }
    store.close();
    let first = scalar(&g, "SELECT min(id) FROM dead_letters").await;
    let sig = scalar(&g, "SELECT min(signature) FROM dead_letters").await;
    raw(&g, FORGET_SIGNATURES).await;
    // A backfill that stopped after its first record: that one is signed (the shape's
    // fields kept, the record counted by the trigger), the others are not.
    raw(
        &g,
        &format!(
            "INSERT INTO failure_signatures (id, queue, reason, route_kind, outcome_class, \
               message_type, source, description) \
             SELECT '{sig}', 'orders', 'Bad', 'application', 'handler_error', NULL, 'shop', \
               'x'; \
             UPDATE dead_letters SET signature = '{sig}', source = 'shop' WHERE id = '{first}'"
        ),
    )
    .await;
    assert_eq!(
        scalar(&g, "SELECT count FROM failure_signature_counts").await,
        "1"
    );
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let live = failures(&store, Area::Live).await;
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].id.as_str(), live[0].count, live[0].live),
        (sig.as_str(), 3, 3)
    );
    store.close();
}
