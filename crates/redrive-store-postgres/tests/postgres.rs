//! PostgreSQL-specific behaviour beyond the shared suite: migrations (concurrent nodes, a
//! schema newer than the build), several stores ("nodes") on one schema, error
//! classification, close. Same database rule as `conformance.rs`.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use redrive_core::case::{CaseState, RouteTarget, TimelineEntry};
use redrive_core::{Area, QueuePolicy, Timestamp};
use redrive_store::skeleton::cases::case_id;
use redrive_store::{
    DeadLetterRecord, NewMessage, ReceiveParams, Store, StoreError, StoreErrorKind,
};
use redrive_store_postgres::{PostgresError, PostgresOptions, PostgresStore, SCHEMA_VERSION};

use redrive_testkit::postgres::{FreshDatabase, SchemaGuard, database};

use redrive_store_conformance::{T0, TestStore, name, secs};

/// A plain message whose body is its id.
fn msg(id: &str) -> NewMessage {
    redrive_store_conformance::msg(id, id.as_bytes())
}

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

fn schema_too_new(e: &StoreError) -> Option<(u32, u32)> {
    match e {
        StoreError::Backend { source } => match source.downcast_ref::<PostgresError>() {
            Some(PostgresError::SchemaTooNew { found, known }) => Some((*found, *known)),
            _ => None,
        },
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_newer_than_the_build_is_refused() {
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store
        .create_queue(&name("orders"), &QueuePolicy::default(), T0)
        .await
        .unwrap();
    store.close();
    let newer = SCHEMA_VERSION + 1;
    raw(
        &g,
        &format!("INSERT INTO redrive_schema_migrations (version) VALUES ({newer})"),
    )
    .await;
    let e = PostgresStore::connect(&g.url, g.options())
        .await
        .unwrap_err();
    assert_eq!(schema_too_new(&e), Some((newer, SCHEMA_VERSION)), "{e}");
    let e = PostgresStore::migrate(&g.url, g.options())
        .await
        .unwrap_err();
    assert_eq!(schema_too_new(&e), Some((newer, SCHEMA_VERSION)), "{e}");
    assert_eq!(
        scalar(&g, "SELECT count(*) FROM queues").await,
        "1",
        "nothing was changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_starting_at_once_migrate_once() {
    let g = Arc::new(SchemaGuard::fresh(&database()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let g = Arc::clone(&g);
        tasks.push(tokio::spawn(async move {
            PostgresStore::connect(&g.url, g.options())
                .await
                .map(|s| s.close())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        scalar(&g, "SELECT count(*) FROM redrive_schema_migrations").await,
        SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        PostgresStore::migrate(&g.url, g.options()).await.unwrap(),
        SCHEMA_VERSION
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_never_deliver_the_same_message() {
    const MESSAGES: usize = 200;
    let g = SchemaGuard::fresh(&database());
    let small = PostgresOptions {
        pool_size: 4,
        ..g.options()
    };
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small.clone()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small).await.unwrap());
    let q = name("orders");
    a.create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    let batch: Vec<NewMessage> = (0..MESSAGES).map(|i| msg(&format!("m{i}"))).collect();
    for chunk in batch.chunks(50) {
        b.enqueue(&q, chunk.to_vec(), T0).await.unwrap();
    }
    let mut tasks = Vec::new();
    for r in 0..8u32 {
        let store = Arc::clone(if r % 2 == 0 { &a } else { &b });
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let out = store
                    .receive(ReceiveParams {
                        queue: q.clone(),
                        max: 1 + r % 5,
                        lock_ms: 300_000,
                        now: T0,
                        session: None,
                    })
                    .await
                    .unwrap();
                if out.deliveries.is_empty() {
                    return got;
                }
                got.extend(out.deliveries.into_iter().map(|d| d.message.sequence));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), MESSAGES, "no message delivered twice");
    assert_eq!(distinct.len(), MESSAGES);
    assert_eq!(
        a.queue_counts(&q, T0).await.unwrap().locked,
        MESSAGES as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_wins_a_session() {
    let g = SchemaGuard::fresh(&database());
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let q = name("orders");
    let policy = QueuePolicy {
        requires_session: true,
        ..QueuePolicy::default()
    };
    a.create_queue(&q, &policy, T0).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = Arc::clone(if i % 2 == 0 { &a } else { &b });
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            store.accept_session(&q, Some("s1"), 30_000, T0).await
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(Some(_)) => won += 1,
            Err(StoreError::SessionLocked { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won, 1, "exactly one receiver holds the session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_is_unavailable() {
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store.list_queues().await.unwrap();
    store.close();
    store.close();
    let e = store.list_queues().await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_failures_are_unavailable_and_bad_settings_are_not() {
    // Nothing listens on port 1 of the loopback address: refused at once.
    let e = PostgresStore::connect(
        "postgres://postgres@127.0.0.1:1/test",
        PostgresOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    let e = PostgresStore::connect("postgres://[::1", PostgresOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Other, "{e}");
    let e = PostgresStore::connect(
        "postgres://postgres@127.0.0.1:1/test",
        PostgresOptions {
            pool_size: 0,
            ..PostgresOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Other, "{e}");
    // A bad statement timeout is refused before connecting.
    for bad in ["0", "x", "3600001"] {
        let e = PostgresStore::connect(
            &format!("postgres://postgres@127.0.0.1:1/test?statement_timeout_ms={bad}"),
            PostgresOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Other, "{bad}: {e}");
        assert!(e.to_string().contains("statement_timeout_ms"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_refusing_connections_is_unavailable() {
    let db = FreshDatabase::create(&database()).await;
    let store = PostgresStore::connect(&db.url, PostgresOptions::default())
        .await
        .unwrap();
    let q = name("q");
    store
        .create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    store.ping().await.unwrap();
    db.refuse_connections().await;
    // The pooled connections are gone and new ones are refused (SQLSTATE 55000): every
    // operation is transient, as a refused or lost connection is.
    for _ in 0..3 {
        let e = store.enqueue(&q, vec![msg("m")], T0).await.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
        let e = store.list_queues().await.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
        let e = store.ping().await.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    }
    let e = PostgresStore::connect(&db.url, PostgresOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_blocked_by_a_lock_fails_within_the_statement_timeout() {
    let g = SchemaGuard::fresh(&database());
    let sep = if g.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}statement_timeout_ms=300", g.url);
    let store = PostgresStore::connect(&url, g.options()).await.unwrap();
    let q = name("q");
    store
        .create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    store.enqueue(&q, vec![msg("a")], T0).await.unwrap();

    // Another session holds the messages table until it ends its transaction.
    let (holder, connection) = tokio_postgres::connect(&g.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let io = tokio::spawn(connection);
    holder
        .batch_execute(&format!(
            "SET search_path TO \"{}\"; BEGIN; LOCK TABLE messages IN ACCESS EXCLUSIVE MODE",
            g.schema
        ))
        .await
        .unwrap();
    // Bounded so that a hang fails the case rather than the run.
    let bound = std::time::Duration::from_secs(20);
    let e = tokio::time::timeout(bound, store.enqueue(&q, vec![msg("b")], T0))
        .await
        .expect("the blocked send ended within the statement timeout")
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    let e = tokio::time::timeout(bound, store.peek(&q, 1, 10, T0))
        .await
        .expect("the blocked peek ended within the statement timeout")
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");

    holder.batch_execute("ROLLBACK").await.unwrap();
    drop(holder);
    let _ = io.await;
    let ids: Vec<String> = store
        .peek(&q, 1, 10, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(ids, ["a"], "the timed-out send stored nothing");
    store.close();
}

/// The next queue name woken on `rx`, waiting at most a generous bound for real I/O.
async fn next_woken(rx: &mut tokio::sync::broadcast::Receiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await
        .expect("a wake-up arrives")
        .expect("the channel is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_on_one_node_wakes_long_polls_on_another() {
    let g = SchemaGuard::fresh(&database());
    let a = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let b = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let q = name("orders");
    a.create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    let mut rx = b.remote_wakeups().expect("PostgreSQL wakes other nodes");
    // Once listening, every queue is announced: nothing that happened before is missed.
    assert_eq!(next_woken(&mut rx).await, "orders");

    a.enqueue(&q, vec![msg("m1")], T0).await.unwrap();
    assert_eq!(next_woken(&mut rx).await, "orders", "a send wakes");

    let d = a
        .receive(ReceiveParams {
            queue: q.clone(),
            max: 1,
            lock_ms: 30_000,
            now: T0,
            session: None,
        })
        .await
        .unwrap()
        .deliveries;
    let abandon = redrive_store::Settlement {
        lock_token: d[0].lock_token.clone(),
        action: redrive_store::SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
    };
    a.settle(&q, vec![abandon], T0).await.unwrap();
    assert_eq!(next_woken(&mut rx).await, "orders", "an abandon wakes");

    // A refused send notifies nobody: the next wake-up is the following real one.
    let missing = name("missing");
    a.enqueue(&missing, vec![msg("x")], T0).await.unwrap_err();
    let other = name("other");
    a.create_queue(&other, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    a.enqueue(&other, vec![msg("y")], T0).await.unwrap();
    assert_eq!(next_woken(&mut rx).await, "other");

    b.close();
    assert!(
        b.remote_wakeups().is_none(),
        "a closed store listens no more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_holds_a_lease_at_a_time() {
    let g = SchemaGuard::fresh(&database());
    let a = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let b = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    assert!(a.try_lease("sweeper", "node-a", 5_000, T0).await.unwrap());
    assert!(!b.try_lease("sweeper", "node-b", 5_000, T0).await.unwrap());
    let later = T0.plus_millis(5_000);
    assert!(
        b.try_lease("sweeper", "node-b", 5_000, later)
            .await
            .unwrap()
    );
    assert!(
        !a.try_lease("sweeper", "node-a", 5_000, later)
            .await
            .unwrap()
    );
}

/// A TCP proxy in front of PostgreSQL that the test can take down (refusing new
/// connections and cutting the open ones) and bring back on the same port.
struct Proxy {
    addr: std::net::SocketAddr,
    target: String,
    tasks: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let p = Proxy {
            addr,
            target,
            tasks: Arc::default(),
        };
        p.serve(listener);
        p
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let (target, tasks) = (self.target.clone(), self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// The outage: no new connections, open ones cut.
    fn down(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// The database is back, on the same address.
    async fn up(&self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}

/// `url` with its host and port replaced by `addr`.
fn through(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, rest) = rest.split_once('@').map_or(("", rest), |(u, r)| (u, r));
    let path = rest.find(['/', '?']).map_or("", |i| &rest[i..]);
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("{scheme}://{at}{addr}{path}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_fast_and_the_store_recovers_without_losing_acknowledged_work() {
    let g = SchemaGuard::fresh(&database());
    let config: tokio_postgres::Config = g.url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let proxy = Proxy::start(format!("{host}:{port}")).await;
    let store = PostgresStore::connect(&through(&g.url, proxy.addr), g.options())
        .await
        .unwrap();
    let q = name("q");
    store
        .create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    let mut acked = Vec::new();
    let send = |i: usize| {
        let (store, q) = (&store, q.clone());
        async move { store.enqueue(&q, vec![msg(&format!("m{i}"))], T0).await }
    };
    for i in 0..50 {
        send(i).await.unwrap();
        acked.push(format!("m{i}"));
    }

    proxy.down();
    for i in 50..70 {
        let e = send(i).await.unwrap_err();
        assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    }

    proxy.up().await;
    let mut recovered = 0;
    for i in 70..100 {
        if send(i).await.is_ok() {
            acked.push(format!("m{i}"));
            recovered += 1;
        }
    }
    assert!(
        recovered >= 25,
        "the store reconnected by itself ({recovered} of 30)"
    );
    let present: BTreeSet<String> = store
        .peek(&q, 1, 1_000, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    for id in &acked {
        assert!(present.contains(id), "acknowledged {id} was lost");
    }
    assert!(!present.contains("m55"), "a refused send stored nothing");
    store.close();
}

fn system_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_skewed_clocks_share_the_database_timeline_and_do_not_double_deliver() {
    use redrive_core::Clock;
    use redrive_store_postgres::DatabaseClock;

    let g = SchemaGuard::fresh(&database());
    let refresh = std::time::Duration::from_secs(60);
    // Node b's own clock runs 10 s ahead of node a's.
    let skew = 10_000;
    let clock_a = DatabaseClock::start_with(&g.url, refresh, Arc::new(system_ms))
        .await
        .unwrap();
    let clock_b = DatabaseClock::start_with(&g.url, refresh, Arc::new(move || system_ms() + skew))
        .await
        .unwrap();
    let (a_now, b_now) = (clock_a.now().0, clock_b.now().0);
    assert!(
        (a_now - b_now).abs() < 100,
        "aligned clocks agree: {a_now} vs {b_now}"
    );
    assert!(
        (clock_b.offset_ms() + skew).abs() < 100,
        "b's offset undoes its skew"
    );

    let a = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let b = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let q = name("q");
    a.create_queue(&q, &QueuePolicy::default(), clock_a.now())
        .await
        .unwrap();
    a.enqueue(&q, vec![msg("m")], clock_a.now()).await.unwrap();
    let receive = |now| ReceiveParams {
        queue: q.clone(),
        max: 1,
        lock_ms: 5_000,
        now,
        session: None,
    };
    let got = a.receive(receive(clock_a.now())).await.unwrap();
    assert_eq!(got.deliveries.len(), 1);

    let on_b = b.receive(receive(clock_b.now())).await.unwrap();
    assert!(on_b.deliveries.is_empty(), "b sees a's lock as held");
    // The control: on its own clock, b would have taken the message inside a's lock.
    let unaligned = b
        .receive(receive(Timestamp(system_ms() + skew)))
        .await
        .unwrap();
    assert_eq!(unaligned.deliveries.len(), 1, "the skew is real");
    a.close();
    b.close();
}

/// Senders of one session on two nodes run side by side with a receiver of that session:
/// every message is delivered once, in increasing sequence order, because a session's
/// sequence numbers are drawn in commit order (a later number never commits before an
/// earlier one of the same session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_senders_of_one_session_keep_sequence_order() {
    const SENDERS: usize = 8;
    const SENDS: usize = 25;
    let g = SchemaGuard::fresh(&database());
    let small = PostgresOptions {
        pool_size: 6,
        ..g.options()
    };
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small.clone()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small).await.unwrap());
    let q = name("fifo");
    let policy = QueuePolicy {
        requires_session: true,
        ..QueuePolicy::default()
    };
    a.create_queue(&q, &policy, T0).await.unwrap();
    // Batches the senders have committed, counted: the receiver waits on it when it finds
    // nothing rather than on the clock.
    let sent = Arc::new(tokio::sync::watch::Sender::new(0usize));
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let store = Arc::clone(if s % 2 == 0 { &a } else { &b });
        let q = q.clone();
        let sent = Arc::clone(&sent);
        senders.push(tokio::spawn(async move {
            for i in 0..SENDS {
                // Batches of one or two messages, some with a message of another session.
                let mut batch = vec![NewMessage {
                    session_id: Some("s".into()),
                    ..msg(&format!("m{s}-{i}"))
                }];
                if i % 3 == 0 {
                    batch.push(NewMessage {
                        session_id: Some(format!("other-{s}")),
                        ..msg(&format!("o{s}-{i}"))
                    });
                }
                store.enqueue(&q, batch, T0).await.unwrap();
                sent.send_modify(|n| *n += 1);
            }
        }));
    }
    let mut committed = sent.subscribe();
    let lock = a
        .accept_session(&q, Some("s"), 300_000, T0)
        .await
        .unwrap()
        .unwrap();
    let session = redrive_store::SessionRef {
        session_id: "s".into(),
        lock_token: lock.lock_token,
    };
    let mut delivered: Vec<i64> = Vec::new();
    loop {
        let store = if delivered.len().is_multiple_of(2) {
            &a
        } else {
            &b
        };
        // The batches committed before this receive: seen, so one committed after it
        // wakes the wait below.
        let before = *committed.borrow_and_update();
        let out = store
            .receive(ReceiveParams {
                queue: q.clone(),
                max: 7,
                lock_ms: 300_000,
                now: T0,
                session: Some(session.clone()),
            })
            .await
            .unwrap();
        if out.deliveries.is_empty() {
            // Every batch was committed before a receive that found nothing: all delivered.
            if before == SENDERS * SENDS {
                break;
            }
            redrive_testkit::within("the next batch a sender commits", committed.changed())
                .await
                .unwrap();
            continue;
        }
        let settlements = out
            .deliveries
            .iter()
            .map(|d| redrive_store::Settlement {
                lock_token: d.lock_token.clone(),
                action: redrive_store::SettleAction::Complete,
            })
            .collect();
        delivered.extend(out.deliveries.iter().map(|d| d.message.sequence));
        let settled = store.settle(&q, settlements, T0).await.unwrap();
        assert!(settled.results.iter().all(Result::is_ok));
    }
    for t in senders {
        t.await.unwrap();
    }
    assert_eq!(delivered.len(), SENDERS * SENDS, "every message once");
    assert!(
        delivered.windows(2).all(|w| w[0] < w[1]),
        "delivered in sequence order: {delivered:?}"
    );
}

/// Senders of the same message ids on two nodes at once: duplicate detection sees every
/// concurrent sender, so each id is stored once and every sender is told its sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_detection_sees_concurrent_senders_on_all_nodes() {
    const IDS: usize = 60;
    const SENDERS: usize = 8;
    let g = SchemaGuard::fresh(&database());
    let small = PostgresOptions {
        pool_size: 6,
        ..g.options()
    };
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small.clone()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small).await.unwrap());
    let q = name("dedup");
    let policy = QueuePolicy {
        duplicate_detection_window_ms: 60_000,
        ..QueuePolicy::default()
    };
    a.create_queue(&q, &policy, T0).await.unwrap();
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let store = Arc::clone(if s % 2 == 0 { &a } else { &b });
        let q = q.clone();
        senders.push(tokio::spawn(async move {
            // Each sender walks the ids from its own starting point, in batches of 7.
            let ids: Vec<usize> = (0..IDS).map(|i| (i + s * 11) % IDS).collect();
            let mut out = Vec::new();
            for chunk in ids.chunks(7) {
                let batch = chunk.iter().map(|i| msg(&format!("id{i}"))).collect();
                out.extend(store.enqueue(&q, batch, T0).await.unwrap());
            }
            out
        }));
    }
    let mut by_id: std::collections::HashMap<String, Vec<(i64, bool)>> = Default::default();
    for t in senders {
        for e in t.await.unwrap() {
            by_id
                .entry(e.message_id)
                .or_default()
                .push((e.sequence, e.duplicate));
        }
    }
    assert_eq!(by_id.len(), IDS);
    for (id, seen) in &by_id {
        assert_eq!(seen.len(), SENDERS, "{id}");
        assert_eq!(
            seen.iter().filter(|(_, dup)| !dup).count(),
            1,
            "{id} stored once: {seen:?}"
        );
        assert!(seen.iter().all(|(s, _)| *s == seen[0].0), "{id}: {seen:?}");
    }
    assert_eq!(a.queue_counts(&q, T0).await.unwrap().active, IDS as u64);
}

/// A node's plain receives of a queue start where its previous receive found its first
/// candidate (the receive floor); a message that becomes available behind the floor is
/// still delivered: at once when nothing is due past the floor, and within 64 receives
/// (one in every 64 looks from the head) when there is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_behind_the_receive_floor_is_still_delivered() {
    let g = SchemaGuard::fresh(&database());
    let s = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let q = name("floor");
    s.create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    let at = |ms: i64| Timestamp(T0.0 + ms);
    let receive = |max: u32, now: Timestamp| {
        let q = q.clone();
        let s = &s;
        async move {
            let out = s
                .receive(ReceiveParams {
                    queue: q,
                    max,
                    lock_ms: 600_000,
                    now,
                    session: None,
                })
                .await
                .unwrap();
            out.deliveries
                .into_iter()
                .map(|d| d.message.message_id)
                .collect::<Vec<_>>()
        }
    };

    // The floor is where "a" was due; "late" is due earlier (a sender whose clock lags).
    s.enqueue(&q, vec![msg("a")], at(100)).await.unwrap();
    assert_eq!(receive(1, at(200)).await, ["a"]);
    s.enqueue(&q, vec![msg("late")], at(50)).await.unwrap();
    assert_eq!(
        receive(10, at(300)).await,
        ["late"],
        "nothing past the floor"
    );

    // Now 100 messages due past the floor, and another late one behind it.
    let batch: Vec<NewMessage> = (0..100).map(|i| msg(&format!("m{i:03}"))).collect();
    s.enqueue(&q, batch, at(1_000)).await.unwrap();
    assert_eq!(receive(1, at(2_000)).await, ["m000"]);
    s.enqueue(&q, vec![msg("late2")], at(500)).await.unwrap();
    let mut got = Vec::new();
    let mut late_after = None;
    for n in 1..=200 {
        let ids = receive(1, at(3_000)).await;
        if ids.is_empty() {
            break;
        }
        if ids == ["late2"] {
            late_after = Some(n);
        }
        got.extend(ids);
    }
    let n = late_after.expect("the late message was delivered");
    assert!(
        n <= 64,
        "delivered on receive {n}, later than one rescan period"
    );
    // Everything else came in order, each once.
    let rest: Vec<&String> = got.iter().filter(|id| *id != "late2").collect();
    let want: Vec<String> = (1..100).map(|i| format!("m{i:03}")).collect();
    assert_eq!(rest, want.iter().collect::<Vec<_>>());
}

fn audit_fields(node: &str, i: i64) -> redrive_store::AuditFields {
    redrive_store::AuditFields {
        at: T0.plus_millis(i),
        actor_id: format!("tok_{node}"),
        actor_name: node.to_owned(),
        action: "message.peek".to_owned(),
        entity: Some("orders".to_owned()),
        targets: vec![format!("m{i}")],
        outcome: "ok".to_owned(),
        client: Some("10.0.0.1".to_owned()),
    }
}

/// The whole audit log, oldest first, read page by page.
async fn whole_log(store: &PostgresStore) -> Vec<redrive_store::AuditEntry> {
    let mut out: Vec<redrive_store::AuditEntry> = Vec::new();
    loop {
        let page = store
            .list_audit(&redrive_store::AuditQuery {
                after_seq: out.last().map(|e| e.seq),
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

fn chained(entries: &[redrive_store::AuditEntry]) -> Vec<redrive_core::audit::ChainedEntry> {
    entries.iter().cloned().map(Into::into).collect()
}

/// Two nodes appending at once (50 appends each, all in flight together) write one
/// chain: every entry numbered once, each linked to the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_appends_from_two_nodes_form_one_chain() {
    let g = SchemaGuard::fresh(&database());
    let a = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let mut tasks = Vec::new();
    for i in 0..50 {
        for (node, store) in [("a", &a), ("b", &b)] {
            let store = Arc::clone(store);
            tasks.push(tokio::spawn(async move {
                store
                    .append_audit(&[audit_fields(node, i)])
                    .await
                    .unwrap()
                    .remove(0)
            }));
        }
    }
    let mut appended = Vec::new();
    for t in tasks {
        appended.push(t.await.unwrap());
    }
    let log = whole_log(&a).await;
    assert_eq!(
        log.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=100).collect::<Vec<_>>()
    );
    let summary =
        redrive_core::audit::verify(&chained(&log), a.audit_head().await.unwrap().as_ref())
            .expect("one chain");
    assert_eq!((summary.entries, summary.last_seq), (100, 100));
    // Every append got back what was stored.
    appended.sort_by_key(|e| e.seq);
    assert_eq!(appended, log);
    assert_eq!(
        log.iter().filter(|e| e.fields.actor_id == "tok_a").count(),
        50
    );
    a.close();
    b.close();
}

/// An audit row edited behind the store's back (here with plain SQL) no longer verifies;
/// nor does a log with a row deleted from its middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_row_edited_in_the_database_fails_verification() {
    use redrive_core::audit::{ChainError, verify};

    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let fields: Vec<_> = (1..=5).map(|i| audit_fields("a", i)).collect();
    store.append_audit(&fields).await.unwrap();
    assert!(
        verify(
            &chained(&whole_log(&store).await),
            store.audit_head().await.unwrap().as_ref()
        )
        .is_ok()
    );

    raw(&g, "UPDATE audit_log SET outcome = 'denied' WHERE seq = 3").await;
    let log = whole_log(&store).await;
    assert_eq!(log[2].fields.outcome, "denied");
    assert_eq!(
        verify(&chained(&log), store.audit_head().await.unwrap().as_ref()),
        Err(ChainError::Altered { seq: 3 })
    );

    raw(
        &g,
        "UPDATE audit_log SET outcome = 'ok' WHERE seq = 3; DELETE FROM audit_log WHERE seq = 2",
    )
    .await;
    assert_eq!(
        verify(
            &chained(&whole_log(&store).await),
            store.audit_head().await.unwrap().as_ref()
        ),
        Err(ChainError::Unlinked {
            seq: 3,
            prev_seq: 1
        })
    );
    store.close();
}

/// Two nodes creating a token of the same name at once: one succeeds, the other gets
/// `TokenExists`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_wins_a_token_name() {
    use redrive_core::access::{Grant, Role};
    use redrive_store::NewToken;

    let g = SchemaGuard::fresh(&database());
    let a = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let mut tasks = Vec::new();
    for (i, store) in [&a, &b, &a, &b].into_iter().enumerate() {
        let store = Arc::clone(store);
        let token = NewToken {
            id: format!("tok_{i:016x}"),
            name: "ci".to_owned(),
            secret_hash: format!("{i:064x}"),
            grants: vec![Grant::all(Role::Consumer)],
            created_by: "bootstrap".to_owned(),
            expires_at: None,
            sqs: None,
        };
        tasks.push(tokio::spawn(
            async move { store.create_token(&token, T0).await },
        ));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::TokenExists { .. }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(a.list_tokens().await.unwrap().len(), 1);
    a.close();
    b.close();
}

/// Takes a schema back to version 7, as a build of that version left it: the case tables
/// and the route columns of version 8, and the replay plans of version 10 (with the move
/// plans version 11 made of the move tasks of version 9) gone.
/// Undoes version 22 (the backfill's index and trigger) and version 19 (failure
/// signatures): the start of every way back below it.
const UNDO_VERSION_19: &str = "DROP TRIGGER dead_letters_signature_backfill ON dead_letters; \
     DROP FUNCTION redrive_dead_letters_signature_backfill(); \
     DROP INDEX dead_letters_unsigned; \
     DROP TRIGGER dead_letters_signature ON dead_letters; \
     DROP TRIGGER queues_signatures_drop ON queues; \
     DROP FUNCTION redrive_dead_letters_signature(), redrive_queue_signatures_drop(), \
       redrive_signature_enter(text, text, text, bigint); \
     DROP TABLE failure_signatures, failure_signature_counts, failure_signature_hours; \
     ALTER TABLE dead_letters DROP COLUMN signature, DROP COLUMN source;";

const BACK_TO_VERSION_7: &str = "DROP TRIGGER dead_letters_signature_backfill ON dead_letters; \
     DROP FUNCTION redrive_dead_letters_signature_backfill(); \
     DROP INDEX dead_letters_unsigned; \
     DROP TRIGGER dead_letters_signature ON dead_letters; \
     DROP TRIGGER queues_signatures_drop ON queues; \
     DROP FUNCTION redrive_dead_letters_signature(), redrive_queue_signatures_drop(), \
       redrive_signature_enter(text, text, text, bigint); \
     DROP TABLE failure_signatures, failure_signature_counts, failure_signature_hours; \
     ALTER TABLE dead_letters DROP COLUMN signature, DROP COLUMN source; \
     DROP TABLE case_groups; \
     ALTER TABLE dead_letters DROP COLUMN route_kind, \
       DROP COLUMN route_rule, DROP COLUMN consumer, DROP COLUMN rule_version; \
     ALTER TABLE cases DROP COLUMN route_rule, DROP COLUMN consumer, \
       DROP COLUMN rule_version; \
     ALTER TABLE messages DROP COLUMN last_attempt; \
     ALTER TABLE dead_letters DROP COLUMN undecodable; \
     ALTER TABLE audit_chain DROP COLUMN head_seq, DROP COLUMN head_hash; \
     DROP TABLE replay_plans, replay_plan_items; \
     DROP TABLE cases, case_timeline, case_payloads, intents, \
       effect_authorities; \
     ALTER TABLE dead_letters DROP COLUMN route_target, DROP COLUMN missing_target; \
     DELETE FROM redrive_schema_migrations WHERE version >= 8";

/// Takes a schema back to version 6, as a build of that version left it: version 8
/// to 11 undone, then the replay columns and indexes of version 7 gone.
const BACK_TO_VERSION_6: &str = "DROP TRIGGER dead_letters_signature_backfill ON dead_letters; \
     DROP FUNCTION redrive_dead_letters_signature_backfill(); \
     DROP INDEX dead_letters_unsigned; \
     DROP TABLE queue_policy_versions; \
     DROP TRIGGER dead_letters_signature ON dead_letters; \
     DROP TRIGGER queues_signatures_drop ON queues; \
     DROP FUNCTION redrive_dead_letters_signature(), redrive_queue_signatures_drop(), \
       redrive_signature_enter(text, text, text, bigint); \
     DROP TABLE failure_signatures, failure_signature_counts, failure_signature_hours; \
     ALTER TABLE dead_letters DROP COLUMN signature, DROP COLUMN source; \
     DROP TABLE IF EXISTS case_groups; \
     ALTER TABLE dead_letters DROP COLUMN route_kind, \
       DROP COLUMN route_rule, DROP COLUMN consumer, DROP COLUMN rule_version; \
     ALTER TABLE cases DROP COLUMN route_rule, DROP COLUMN consumer, \
       DROP COLUMN rule_version; \
     ALTER TABLE messages DROP COLUMN last_attempt; \
     ALTER TABLE dead_letters DROP COLUMN undecodable; \
     ALTER TABLE audit_chain DROP COLUMN head_seq, DROP COLUMN head_hash; \
     DROP TABLE replay_plans, replay_plan_items; \
     DROP TABLE cases, case_timeline, case_payloads, intents, \
       effect_authorities; \
     ALTER TABLE dead_letters DROP COLUMN route_target, DROP COLUMN missing_target; \
     DROP INDEX dead_letters_candidates, dead_letters_age; \
     ALTER TABLE dead_letters DROP COLUMN format, DROP COLUMN replay_due_at, \
       DROP COLUMN replay_failures, DROP COLUMN last_replay_error, DROP COLUMN judgement, \
       DROP COLUMN replay_cause; \
     DELETE FROM redrive_schema_migrations WHERE version >= 7";

/// A schema at version 4 (before tokens and the audit log) is brought to the current
/// version at connect, its queues kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_schema_gains_the_access_tables() {
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store
        .create_queue(&name("orders"), &QueuePolicy::default(), T0)
        .await
        .unwrap();
    store.close();
    // As a build of version 4 left it.
    raw(&g, BACK_TO_VERSION_6).await;
    raw(
        &g,
        "DROP TABLE tokens, audit_log, audit_chain, idempotency_register; \
         DELETE FROM redrive_schema_migrations WHERE version >= 5",
    )
    .await;
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        "4"
    );
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    assert_eq!(SCHEMA_VERSION, 22);
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        "22"
    );
    assert_eq!(store.list_queues().await.unwrap().len(), 1);
    // The queue's current policy is its one version (schema 21's backfill).
    let versions = store
        .list_policy_versions(&name("orders"), None, 10)
        .await
        .unwrap();
    assert_eq!(
        versions
            .iter()
            .map(|v| (v.version, v.changed_at))
            .collect::<Vec<_>>(),
        [(1, T0)]
    );
    let appended = store
        .append_audit(&[audit_fields("a", 1), audit_fields("a", 2)])
        .await
        .unwrap();
    assert_eq!(appended[1].seq, 2);
    assert!(
        redrive_core::audit::verify(
            &chained(&whole_log(&store).await),
            store.audit_head().await.unwrap().as_ref()
        )
        .is_ok()
    );
    store.close();
}

/// A schema at version 6 (before automatic replay) is brought to the current version at
/// connect: its dead letters stay readable (one message each, no replay bookkeeping, no
/// judgement, their destination taken), can be received and moved, and count; the one
/// that stands for a case has one, opened as of its dead-letter time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_schema_reaches_the_current_version_and_keeps_its_dead_letters() {
    let g = SchemaGuard::fresh(&database());
    let old = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&old) as Arc<dyn Store>,
        reopen: None,
    };
    let q = t.queue("orders", QueuePolicy::default()).await;
    let id = t.dead_letter_one(&q, "m1", "Bad", T0).await;
    let before = t.s().get_dead_letter(&q, &id).await.unwrap();
    old.close();
    raw(&g, BACK_TO_VERSION_6).await;
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        "6"
    );
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        SCHEMA_VERSION.to_string()
    );
    let after = store.get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(after, before, "the record reads as it was written");
    assert_eq!(after.format, redrive_core::RecordFormat::Message);
    assert_eq!(after.replay, redrive_store::ReplayMark::default());
    assert_eq!(after.judgement, None);
    assert_eq!(after.route_target, RouteTarget::Written);
    let case = store.get_case(&case_id(&id)).await.unwrap();
    assert_eq!(
        (case.record_id.as_str(), case.opened_at, case.version),
        (id.as_str(), after.dead_lettered_at, 1)
    );
    let counts = store.replay_counts(Some(&q), 10).await.unwrap();
    assert_eq!((counts[0].live, counts[0].candidates), (1, 0));
    store
        .move_dead_letter(&q, &id, Area::Archived, secs(1))
        .await
        .unwrap();
    assert_eq!(
        store.get_dead_letter(&q, &id).await.unwrap().area,
        Area::Archived
    );
    store.close();
}

/// A queue whose policy enables automatic replay at once.
fn replaying() -> QueuePolicy {
    QueuePolicy {
        auto_replay: redrive_core::AutoReplay {
            enabled: true,
            ..redrive_core::AutoReplay::default()
        },
        ..QueuePolicy::default()
    }
}

/// `n` records to import, copies of `template` under new ids.
fn copies(template: &DeadLetterRecord, prefix: &str, n: usize) -> Vec<DeadLetterRecord> {
    (0..n)
        .map(|i| DeadLetterRecord {
            id: format!("dl_{prefix}{i:06}"),
            message_id: format!("{prefix}-{i}"),
            ..template.clone()
        })
        .collect()
}

/// Replay workers on two nodes claim side by side: no candidate is claimed twice, and
/// together they claim every one. (The import is larger than one insert statement.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_never_claim_the_same_replay_candidate() {
    const RECORDS: usize = 1_200;
    let g = SchemaGuard::fresh(&database());
    let small = PostgresOptions {
        pool_size: 4,
        ..g.options()
    };
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small.clone()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, small).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&a),
        reopen: None,
    };
    let q = t.queue("orders", replaying()).await;
    let first = t.dead_letter_one(&q, "m0", "Bad", T0).await;
    let template = a.get_dead_letter(&q, &first).await.unwrap();
    a.import_dead_letters(&q, copies(&template, "x", RECORDS - 1), T0)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for store in [&a, &b, &a, &b] {
        let store = Arc::clone(store);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store
                    .claim_replay_candidates(secs(1), 25, 60_000)
                    .await
                    .unwrap();
                if got.is_empty() {
                    break mine;
                }
                for r in &got {
                    assert_eq!(r.replay.due_at, Some(secs(61)), "moved to the claim's end");
                }
                mine.extend(got.into_iter().map(|r| r.id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "no candidate was claimed twice");
    assert_eq!(all.len(), RECORDS, "every candidate was claimed");
    assert!(
        a.claim_replay_candidates(secs(60), 100, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "claimed candidates wait for the claim's end"
    );
    assert_eq!(
        b.claim_replay_candidates(secs(61), 10_000, 60_000)
            .await
            .unwrap()
            .len(),
        RECORDS,
        "a judge that died leaves them to the next claim"
    );
}

/// Judgements and operators on two nodes race for the same live records: for each record
/// exactly one of a whole quarantine (node a) and an archiving finish (node b) wins, and
/// the record ends where the winner put it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_judgements_of_one_record_exactly_one_wins() {
    use redrive_core::judgement::{Judgement, QuarantineCause};
    use redrive_store::{Quarantine, ReplayFinish};

    const RECORDS: usize = 40;
    let g = SchemaGuard::fresh(&database());
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&a),
        reopen: None,
    };
    let q = t.queue("orders", replaying()).await;
    let first = t.dead_letter_one(&q, "m0", "Bad", T0).await;
    let template = a.get_dead_letter(&q, &first).await.unwrap();
    let records = copies(&template, "r", RECORDS);
    a.import_dead_letters(&q, records.clone(), T0)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for r in &records {
        let (a, b, q, id) = (Arc::clone(&a), Arc::clone(&b), q.clone(), r.id.clone());
        tasks.push(tokio::spawn(async move {
            let quarantine = Quarantine {
                judgement: Judgement::new(1, Some(QuarantineCause::NotIdempotent)),
                body: None,
            };
            let archive = ReplayFinish::Archive(Judgement::new(1, None));
            let (x, y) = tokio::join!(
                a.quarantine_dead_letter(&q, &id, &quarantine, secs(1)),
                b.finish_replay(&q, &id, &archive, secs(1)),
            );
            (id, x.unwrap(), y.unwrap())
        }));
    }
    for task in tasks {
        let (id, quarantined, archived) = task.await.unwrap();
        assert!(quarantined != archived, "{id}: exactly one wins");
        let area = a.get_dead_letter(&q, &id).await.unwrap().area;
        let expected = if quarantined {
            Area::Quarantine
        } else {
            Area::Archived
        };
        assert_eq!(area, expected, "{id}");
        // The quarantine opened the record's case in its own write; the archive, which
        // settled it, opened none.
        let case = b.get_case(&case_id(&id)).await;
        assert_eq!(case.is_ok(), quarantined, "{id}: {case:?}");
    }
    let counts = a.replay_counts(Some(&q), 10).await.unwrap();
    let quarantined: u64 = counts[0].quarantined.values().sum();
    assert_eq!(
        (counts[0].live, counts[0].archived + quarantined),
        (1, RECORDS as u64)
    );
}

/// A subscription change on one node mirrors replay onto its queue's policy at a new
/// version; another node that has the queue cached sees the new policy on its next
/// dead letter (the record is a candidate) rather than the one it cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_change_reaches_a_queue_another_node_has_cached() {
    use redrive_store::{
        DeadLetterDestination, NewSubscription, SubscriptionKind, SubscriptionSpec,
        SubscriptionUpdate, TopicPolicy,
    };

    let g = SchemaGuard::fresh(&database());
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let topic = name("orders");
    let queue = name("orders.audit");
    a.create_topic(&topic, &TopicPolicy::default(), T0)
        .await
        .unwrap();
    a.create_subscription(
        &NewSubscription {
            topic: topic.clone(),
            name: name("audit"),
            queue: queue.clone(),
            queue_policy: QueuePolicy::default(),
            spec: SubscriptionSpec {
                kind: SubscriptionKind::Pull,
                filter: Default::default(),
                retry_policy: Default::default(),
                delivery: Default::default(),
                dead_letter: DeadLetterDestination::OwnStore,
                paused: false,
                auto_replay: Default::default(),
                dead_letter_retention_ms: 86_400_000,
            },
        },
        T0,
    )
    .await
    .unwrap();
    let created = a.get_queue(&queue).await.unwrap();
    assert_eq!(
        (
            created.policy.dead_letter_retention_ms,
            created.policy_version
        ),
        (86_400_000, 1),
        "the retention is mirrored at creation"
    );
    let ta = TestStore {
        store: Arc::clone(&a),
        reopen: None,
    };
    // Node a caches the queue (a send, a receive and a dead letter with replay off).
    let first = ta.dead_letter_one(&queue, "m0", "Bad", T0).await;
    assert_eq!(
        a.get_dead_letter(&queue, &first)
            .await
            .unwrap()
            .replay
            .due_at,
        None
    );
    ta.send1(&queue, "m1", T0).await;

    let updated = b
        .update_subscription(
            &topic,
            &name("audit"),
            &SubscriptionUpdate {
                auto_replay: Some(redrive_core::AutoReplayPatch {
                    enabled: Some(true),
                    judge_delay_ms: Some(5_000),
                    ..Default::default()
                }),
                ..SubscriptionUpdate::default()
            },
            secs(1),
        )
        .await
        .unwrap();
    let mirrored = b.get_queue(&queue).await.unwrap();
    assert_eq!(mirrored.policy.auto_replay, updated.spec.auto_replay);
    assert_eq!((mirrored.policy_version, mirrored.updated_at), (2, secs(1)));

    // Node a's next dead letter on that queue is decided by the new policy.
    let d = ta.take(&queue, 1, 30_000, secs(2)).await;
    let out = a
        .settle(
            &queue,
            vec![redrive_store::Settlement {
                lock_token: d[0].lock_token.clone(),
                action: redrive_store::SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: None,
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            }],
            secs(2),
        )
        .await
        .unwrap();
    assert!(out.effects.dead_lettered[0].candidate);
    let id = out.effects.dead_lettered[0].dead_letter_id.clone();
    let record = a.get_dead_letter(&queue, &id).await.unwrap();
    assert_eq!(record.replay.due_at, Some(secs(7)));
    assert_eq!(record.policy_version, Some(2));

    // A change that mirrors nothing new leaves the queue's policy version alone.
    b.update_subscription(
        &topic,
        &name("audit"),
        &SubscriptionUpdate {
            paused: Some(true),
            ..SubscriptionUpdate::default()
        },
        secs(3),
    )
    .await
    .unwrap();
    assert_eq!(b.get_queue(&queue).await.unwrap().policy_version, 2);
}

/// A schema at version 7 (before recovery cases) is brought to the current version at
/// connect, and the records kept before then that stand for a case get one, opened as of
/// their dead-letter time with its first timeline entry: a record no replay will judge
/// and a quarantined one do, a replay candidate does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_7_schema_opens_the_cases_of_its_records() {
    use redrive_core::judgement::{Judgement, QuarantineCause};

    let g = SchemaGuard::fresh(&database());
    let old = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&old) as Arc<dyn Store>,
        reopen: None,
    };
    let plain = t.queue("plain", QueuePolicy::default()).await;
    let replay = t.queue("replayed", replaying()).await;
    let kept = t.dead_letter_one(&plain, "m1", "Bad", T0).await;
    let candidate = t.dead_letter_one(&replay, "m2", "Bad", secs(1)).await;
    let held = t.dead_letter_one(&replay, "m3", "Bad", secs(2)).await;
    let quarantine = redrive_store::Quarantine {
        judgement: Judgement::new(secs(3).0, Some(QuarantineCause::NotIdempotent)),
        body: None,
    };
    assert!(
        old.quarantine_dead_letter(&replay, &held, &quarantine, secs(3))
            .await
            .unwrap()
    );
    old.close();
    raw(&g, BACK_TO_VERSION_7).await;
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        SCHEMA_VERSION.to_string()
    );
    for (id, queue, dead_lettered_at) in [(&kept, &plain, T0), (&held, &replay, secs(2))] {
        let case = store.get_case(&case_id(id)).await.unwrap();
        assert_eq!(&case.queue, queue);
        assert_eq!(
            (case.opened_at, case.dead_lettered_at, case.m.state),
            (dead_lettered_at, dead_lettered_at, CaseState::RouteObserved)
        );
        let timeline = store.case_timeline(&case.id).await.unwrap();
        assert_eq!(timeline.len(), 1, "{id}");
        assert_eq!(timeline[0].at, dead_lettered_at);
    }
    assert!(matches!(
        store.get_case(&case_id(&candidate)).await,
        Err(StoreError::CaseNotFound { .. })
    ));
    let all = store
        .list_cases(&redrive_store::CaseQuery::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    store.close();
}

/// A dead letter that no replay will judge opens its case in the write that made it; a
/// replay candidate opens none until a judgement quarantines it, and then at that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_opens_its_case_in_the_write_that_made_it() {
    use redrive_core::judgement::{Judgement, QuarantineCause};

    let g = SchemaGuard::fresh(&database());
    let store: Arc<dyn Store> =
        Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&store),
        reopen: None,
    };
    let q = t.queue("orders", QueuePolicy::default()).await;
    let id = t.dead_letter_one(&q, "m1", "Bad", T0).await;
    let case = store.get_case(&case_id(&id)).await.unwrap();
    assert_eq!(
        (
            case.record_id.as_str(),
            case.message_id.as_str(),
            case.intent_id.as_str(),
            case.reason.as_str(),
            case.version,
        ),
        (id.as_str(), "m1", "m1", "Bad", 1)
    );
    assert_eq!((case.opened_at, case.m.next_check_at), (T0, Some(T0)));
    assert_eq!(
        case.m.review_deadline.0,
        redrive_store::skeleton::cases::default_review_deadline(T0)
    );
    assert_eq!(
        (case.body_size, case.body_sha256.as_str()),
        (2, redrive_core::digest::sha256_hex(b"m1").as_str())
    );
    let timeline = store.case_timeline(&case.id).await.unwrap();
    assert_eq!(timeline.len(), 1);
    assert_eq!(
        (
            timeline[0].state,
            timeline[0].actor.as_str(),
            timeline[0].at
        ),
        (CaseState::RouteObserved, "broker", T0)
    );

    let r = t.queue("replayed", replaying()).await;
    let candidate = t.dead_letter_one(&r, "m2", "Bad", secs(1)).await;
    assert!(matches!(
        store.get_case(&case_id(&candidate)).await,
        Err(StoreError::CaseNotFound { .. })
    ));
    let quarantine = redrive_store::Quarantine {
        judgement: Judgement::new(secs(5).0, Some(QuarantineCause::NotIdempotent)),
        body: None,
    };
    assert!(
        store
            .quarantine_dead_letter(&r, &candidate, &quarantine, secs(5))
            .await
            .unwrap()
    );
    let case = store.get_case(&case_id(&candidate)).await.unwrap();
    assert_eq!((case.opened_at, case.dead_lettered_at), (secs(5), secs(1)));
    // Moving it back and forth keeps the one case.
    store
        .move_dead_letter(&r, &candidate, Area::Live, secs(6))
        .await
        .unwrap();
    store
        .move_dead_letter(&r, &candidate, Area::Quarantine, secs(7))
        .await
        .unwrap();
    let again = store.get_case(&case_id(&candidate)).await.unwrap();
    assert_eq!(again, case);
    assert_eq!(store.case_timeline(&case.id).await.unwrap().len(), 1);
}

/// An entry that moves a case to `state`, by `actor`.
fn entry(actor: &str, state: CaseState, at: Timestamp) -> TimelineEntry {
    TimelineEntry {
        at,
        actor: actor.to_owned(),
        state,
        evidence: format!("{actor} says {state}"),
        fields: Default::default(),
    }
}

/// `n` cases on a queue that does not replay, through `store`: their ids.
async fn open_cases(store: &Arc<dyn Store>, n: usize) -> Vec<String> {
    let t = TestStore {
        store: Arc::clone(store),
        reopen: None,
    };
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut ids = Vec::new();
    for i in 0..n {
        let id = t.dead_letter_one(&q, &format!("m{i}"), "Bad", T0).await;
        ids.push(case_id(&id));
    }
    ids
}

/// Two nodes update the same cases from the same version at once: for each, exactly one
/// update is written (version 2, its entry appended); the other is told the version it
/// lost to and wrote nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_updates_of_one_case_from_two_nodes_exactly_one_is_written() {
    const CASES: usize = 20;
    let g = SchemaGuard::fresh(&database());
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let ids = open_cases(&a, CASES).await;
    let mut tasks = Vec::new();
    for id in &ids {
        let (a, b, id) = (Arc::clone(&a), Arc::clone(&b), id.clone());
        tasks.push(tokio::spawn(async move {
            let read = a.get_case(&id).await.unwrap();
            let update = |who: &str, state| {
                let mut set = read.m.clone();
                set.state = state;
                set.subject = Some(who.to_owned());
                redrive_store::CaseUpdate {
                    id: id.clone(),
                    version: read.version,
                    set,
                    append: vec![entry(who, state, secs(1))],
                    payload: None,
                    archive_record: false,
                    audit: Vec::new(),
                }
            };
            let (by_a, by_b) = (
                update("alice", CaseState::Retained),
                update("bob", CaseState::Escalated),
            );
            let (x, y) = tokio::join!(a.update_case(&by_a), b.update_case(&by_b));
            (id, x, y)
        }));
    }
    for task in tasks {
        let (id, x, y) = task.await.unwrap();
        let (won, lost, winner) = match (x, y) {
            (Ok(w), Err(l)) => (w, l, "alice"),
            (Err(l), Ok(w)) => (w, l, "bob"),
            other => panic!("{id}: exactly one update is written, not {other:?}"),
        };
        assert!(
            matches!(&lost, StoreError::CaseChanged { version: 2, .. }),
            "{id}: {lost:?}"
        );
        assert_eq!(won.version, 2);
        assert_eq!(a.get_case(&id).await.unwrap(), won, "{id}");
        assert_eq!(won.m.subject.as_deref(), Some(winner));
        let timeline = b.case_timeline(&id).await.unwrap();
        assert_eq!(
            timeline
                .iter()
                .map(|e| e.actor.as_str())
                .collect::<Vec<_>>(),
            vec!["broker", winner],
            "{id}"
        );
    }
}

/// Payload retention run by two nodes at once takes every due case exactly once: the
/// record and the kept bytes go, the case and its timeline stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_retention_on_two_nodes_takes_each_case_once() {
    const CASES: usize = 30;
    let g = SchemaGuard::fresh(&database());
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let ids = open_cases(&a, CASES).await;
    for id in &ids {
        let read = a.get_case(id).await.unwrap();
        let mut set = read.m.clone();
        set.closed_at = Some(secs(1));
        set.payload_until = Some(secs(2));
        a.update_case(&redrive_store::CaseUpdate {
            id: id.clone(),
            version: read.version,
            set,
            append: vec![entry("alice", CaseState::Retained, secs(1))],
            payload: Some(redrive_store::CasePayload {
                digest: "d".repeat(64),
                body: b"kept".to_vec(),
            }),
            archive_record: false,
            audit: Vec::new(),
        })
        .await
        .unwrap();
    }
    assert!(a.drop_case_payloads(secs(1), 100).await.unwrap().is_empty());
    let (x, y) = tokio::join!(
        a.drop_case_payloads(secs(2), 100),
        b.drop_case_payloads(secs(2), 100)
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    let mut taken: Vec<String> = x.iter().chain(y.iter()).cloned().collect();
    taken.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(taken, expected, "every due case once");
    for id in &ids {
        let case = a.get_case(id).await.unwrap();
        assert_eq!(
            (case.m.payload_deleted_at, case.version),
            (Some(secs(2)), 3)
        );
        assert_eq!(a.case_timeline(id).await.unwrap().len(), 2);
        assert_eq!(a.case_payload(id, &"d".repeat(64)).await.unwrap(), None);
        assert!(matches!(
            a.get_dead_letter(&case.queue, &case.record_id).await,
            Err(StoreError::DeadLetterNotFound { .. })
        ));
    }
    assert!(a.drop_case_payloads(secs(3), 100).await.unwrap().is_empty());
}

/// Searches and counts of cases: every filter is a bound value (a hostile one matches
/// nothing and breaks nothing), pages follow the cursor, counts group the same matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_of_cases_filters_pages_and_counts() {
    use redrive_store::CaseQuery;

    let g = SchemaGuard::fresh(&database());
    let store: Arc<dyn Store> =
        Arc::new(PostgresStore::connect(&g.url, g.options()).await.unwrap());
    let t = TestStore {
        store: Arc::clone(&store),
        reopen: None,
    };
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let billing = t.queue("billing", QueuePolicy::default()).await;
    let mut ids = Vec::new();
    for (i, (q, reason)) in [
        (&orders, "Bad"),
        (&orders, "Bad"),
        (&orders, "Worse"),
        (&billing, "Bad"),
    ]
    .into_iter()
    .enumerate()
    {
        let at = secs(i64::try_from(i).unwrap());
        let id = t.dead_letter_one(q, &format!("m{i}"), reason, at).await;
        ids.push(case_id(&id));
    }
    // One closed, retained.
    let read = store.get_case(&ids[1]).await.unwrap();
    let mut set = read.m.clone();
    set.state = CaseState::Retained;
    set.closed_at = Some(secs(10));
    store
        .update_case(&redrive_store::CaseUpdate {
            id: ids[1].clone(),
            version: 1,
            set,
            append: vec![entry("alice", CaseState::Retained, secs(10))],
            payload: None,
            archive_record: false,
            audit: Vec::new(),
        })
        .await
        .unwrap();
    let found = |q: CaseQuery| {
        let store = Arc::clone(&store);
        async move {
            store
                .list_cases(&q)
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(found(CaseQuery::default()).await, ids);
    let of_orders = CaseQuery {
        queue: Some(orders.clone()),
        reason: Some("Bad".into()),
        ..CaseQuery::default()
    };
    assert_eq!(found(of_orders.clone()).await, ids[..2].to_vec());
    let open = CaseQuery {
        open: true,
        ..of_orders.clone()
    };
    assert_eq!(found(open).await, ids[..1].to_vec());
    let retained = CaseQuery {
        states: vec![CaseState::Retained],
        ..CaseQuery::default()
    };
    assert_eq!(found(retained).await, ids[1..2].to_vec());
    let window = CaseQuery {
        since: Some(secs(1)),
        until: Some(secs(3)),
        ..CaseQuery::default()
    };
    assert_eq!(found(window).await, ids[1..3].to_vec());
    let page = CaseQuery {
        after: Some(ids[0].clone()),
        limit: 2,
        ..CaseQuery::default()
    };
    assert_eq!(found(page).await, ids[1..3].to_vec());
    let hostile = CaseQuery {
        reason: Some("Bad' OR '1'='1".into()),
        text: Some("%".into()),
        ..CaseQuery::default()
    };
    assert!(found(hostile.clone()).await.is_empty());
    assert_eq!(store.case_counts(&hostile).await.unwrap().total, 0);

    let counts = store.case_counts(&CaseQuery::default()).await.unwrap();
    assert_eq!(counts.total, 4);
    assert_eq!(
        counts.by_reason.into_iter().collect::<Vec<_>>(),
        vec![("Bad".to_owned(), 3), ("Worse".to_owned(), 1)]
    );
    assert_eq!(
        counts.by_type.into_iter().collect::<Vec<_>>(),
        vec![(String::new(), 4)]
    );
    assert_eq!(
        counts.by_state.into_iter().collect::<Vec<_>>(),
        vec![("retained".to_owned(), 1), ("route_observed".to_owned(), 3)]
    );
    assert_eq!(counts.oldest_opened_at, Some(T0));
    let none = store
        .case_counts(&CaseQuery {
            queue: Some(name("nowhere")),
            ..CaseQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(none, redrive_store::CaseCounts::default());
}

/// Two plans admitting one case at once both pass the check of the item lease (neither
/// sees the other's uncommitted admission); the unique index lets the first commit and
/// fails the second, which is rolled back, run again, and refused with `ReplayItemTaken`
/// naming the plan that committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_a_concurrent_admission_is_replay_item_taken() {
    use redrive_store::{
        PlanItemQuery, PlanItemRecord, PlanItemState, PlanMut, PlanStatus, ReplayPlanRecord,
        ReplayPlanUpdate,
    };
    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let m = PlanMut {
        status: PlanStatus::Running,
        owner_until: secs(600),
        stop_reason: None,
        next_at: None,
        state: serde_json::json!({}),
        updated_at: secs(1),
    };
    let item = PlanItemRecord {
        seq: 0,
        case_id: "c1".to_owned(),
        bytes: 10,
        state: PlanItemState::Waiting,
        window: None,
        message_id: None,
        detail: None,
        updated_at: secs(1),
    };
    for id in ["plan_x", "plan_b"] {
        let p = ReplayPlanRecord {
            id: id.to_owned(),
            kind: redrive_store::PlanKind::Cases,
            queue: "orders".to_owned(),
            destination: "orders".to_owned(),
            owner_id: "tok_1".to_owned(),
            owner_name: "ops".to_owned(),
            spec: serde_json::json!({}),
            items: 1,
            created_at: secs(1),
            version: 1,
            m: m.clone(),
        };
        store
            .create_replay_plan(&p, std::slice::from_ref(&item))
            .await
            .unwrap();
    }
    // Another node admits c1 for plan_x and has not committed yet.
    let (holder, connection) = tokio_postgres::connect(&g.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let io = tokio::spawn(connection);
    holder
        .batch_execute(&format!(
            "SET search_path TO \"{}\"; BEGIN; UPDATE replay_plan_items SET state = 'admitted' \
             WHERE plan_id = 'plan_x' AND seq = 0",
            g.schema
        ))
        .await
        .unwrap();
    let admit = ReplayPlanUpdate {
        id: "plan_b".to_owned(),
        version: 1,
        set: m.clone(),
        items: vec![PlanItemRecord {
            state: PlanItemState::Admitted,
            window: Some(1),
            ..item.clone()
        }],
    };
    let store = Arc::new(store);
    let racing = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.update_replay_plan(&admit).await })
    };
    // Once plan_b's update waits on the index entry of the uncommitted admission...
    let bound = std::time::Duration::from_secs(20);
    tokio::time::timeout(bound, async {
        loop {
            let waiting = scalar(
                &g,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE 'UPDATE replay_plan_items i %'",
            )
            .await;
            if waiting != "0" {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the racing update waits on the lease's index");
    // ...the other node commits: the racing update loses.
    holder.batch_execute("COMMIT").await.unwrap();
    drop(holder);
    let _ = io.await;
    match tokio::time::timeout(bound, racing).await.unwrap().unwrap() {
        Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
            assert_eq!((case_id.as_str(), plan_id.as_str()), ("c1", "plan_x"));
        }
        other => panic!("expected ReplayItemTaken, got {other:?}"),
    }
    assert_eq!(store.get_replay_plan("plan_b").await.unwrap().version, 1);
    let items = store
        .replay_plan_items("plan_b", &PlanItemQuery::default())
        .await
        .unwrap();
    assert_eq!(items, vec![item]);
    store.close();
}

/// A schema at version 10 with move tasks in `move_tasks` is brought to version 11 at
/// connect: each task becomes a replay plan of kind `sqs_move`, listed with the plans,
/// read as the same task, its source still held by the running one; `move_tasks` is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_10_move_tasks_become_sqs_move_plans() {
    use redrive_store::{MoveTaskStatus, PlanKind, PlanQuery, PlanStatus, move_plans};

    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store.close();
    // As a build of version 10 left it, with two tasks of one source.
    raw(
        &g,
        &format!(
            "{UNDO_VERSION_19}ALTER TABLE dead_letters DROP COLUMN route_kind, DROP COLUMN route_rule, \
               DROP COLUMN consumer, DROP COLUMN rule_version; \
             ALTER TABLE cases DROP COLUMN route_rule, DROP COLUMN consumer, \
               DROP COLUMN rule_version; \
             ALTER TABLE messages DROP COLUMN last_attempt; \
             ALTER TABLE dead_letters DROP COLUMN undecodable; \
             ALTER TABLE audit_chain DROP COLUMN head_seq, DROP COLUMN head_hash; \
             DROP INDEX replay_plans_active_move, replay_plans_moves, replay_plans_seq; \
             ALTER TABLE replay_plans DROP COLUMN kind, DROP COLUMN runner, \
               DROP COLUMN runner_until, DROP COLUMN seq; \
             {} \
             DROP TABLE case_groups; \
             DELETE FROM redrive_schema_migrations WHERE version >= 11; \
             INSERT INTO move_tasks (handle, source, destination, max_per_second, status, \
               moved, to_move, failure_reason, owner_id, owner_name, started_at, updated_at, \
               runner, runner_until) VALUES \
             ('mv_old', 'dlq', NULL, NULL, 'FAILED', 1, 4, 'authorization_revoked', \
               'tok_0000000000000001', 'mover', {t0}, {t0}, NULL, NULL), \
             ('mv_run', 'dlq', 'dest', 5, 'RUNNING', 3, 7, NULL, \
               'tok_0000000000000001', 'mover', {t0}, {t0}, 'node-1', {until})",
            include_str!("../src/migrations/0009_move_tasks.sql"),
            t0 = T0.0,
            until = T0.0 + 30_000,
        ),
    )
    .await;
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    assert_eq!(
        scalar(&g, "SELECT max(version) FROM redrive_schema_migrations").await,
        SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        scalar(
            &g,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'move_tasks' \
             AND schemaname = current_schema()"
        )
        .await,
        "0"
    );
    let plans = store
        .list_replay_plans(&PlanQuery::default())
        .await
        .unwrap();
    let listed: Vec<(&str, PlanKind, PlanStatus, Option<&str>)> = plans
        .iter()
        .map(|p| {
            (
                p.id.as_str(),
                p.kind,
                p.m.status,
                p.m.stop_reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "mv_old",
                PlanKind::SqsMove,
                PlanStatus::Stopped,
                Some("authorization_revoked")
            ),
            ("mv_run", PlanKind::SqsMove, PlanStatus::Running, None),
        ]
    );
    let run = move_plans::get(&store, "mv_run")
        .await
        .unwrap()
        .unwrap()
        .move_part()
        .unwrap();
    assert_eq!(
        (run.status, run.moved, run.to_move, run.max_per_second),
        (MoveTaskStatus::Running, 3, 7, Some(5))
    );
    assert_eq!(
        (run.runner.as_deref(), run.runner_until),
        (Some("node-1"), Some(Timestamp(T0.0 + 30_000)))
    );
    let old = move_plans::get(&store, "mv_old")
        .await
        .unwrap()
        .unwrap()
        .move_part()
        .unwrap();
    assert_eq!(
        (old.destination, old.failure_reason.as_deref()),
        (None, Some("authorization_revoked"))
    );
    let handles: Vec<String> = move_plans::list(&store, "dlq", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        handles,
        ["mv_run", "mv_old"],
        "creation order breaks the tie"
    );
    let second = redrive_store::NewMove {
        handle: "mv_new".to_owned(),
        source: "dlq".to_owned(),
        destination: None,
        max_per_second: None,
        to_move: 0,
        owner_id: "anonymous".to_owned(),
        owner_name: "anonymous".to_owned(),
        runner: "node-2".to_owned(),
        runner_until: Timestamp(T0.0 + 30_000),
        now: T0,
    };
    assert!(matches!(
        move_plans::create(&store, &second).await,
        Err(StoreError::MoveTaskRunning { .. })
    ));
    store.close();
}

/// A word on an intent stored at version 12 (one per intent, for every entity) keeps
/// holding for every entity at version 13 (entity `*`), and words for other entities can
/// then stand beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_12_intents_hold_for_every_entity_after_the_migration() {
    use redrive_store::{IntentRecord, IntentStatus};

    let g = SchemaGuard::fresh(&database());
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    store.close();
    // As a build of version 12 left it, with a word in it.
    raw(
        &g,
        &format!(
            "{UNDO_VERSION_19}ALTER TABLE dead_letters DROP COLUMN route_kind, DROP COLUMN route_rule, \
               DROP COLUMN consumer, DROP COLUMN rule_version; \
             ALTER TABLE cases DROP COLUMN route_rule, DROP COLUMN consumer, \
               DROP COLUMN rule_version; \
             ALTER TABLE messages DROP COLUMN last_attempt; \
             ALTER TABLE dead_letters DROP COLUMN undecodable; \
             ALTER TABLE audit_chain DROP COLUMN head_seq, DROP COLUMN head_hash; \
             DROP TABLE intents; DROP TABLE case_groups; \
             CREATE TABLE intents (intent_id text NOT NULL PRIMARY KEY, status text NOT NULL, \
               superseded_by text, reason text, actor text NOT NULL, at bigint NOT NULL); \
             INSERT INTO intents VALUES ('i-1', 'cancelled', NULL, 'gone', 'orders-service', {}); \
             DELETE FROM redrive_schema_migrations WHERE version >= 13",
            T0.0
        ),
    )
    .await;
    let store = PostgresStore::connect(&g.url, g.options()).await.unwrap();
    let old = IntentRecord {
        intent_id: "i-1".into(),
        entity: "*".into(),
        status: IntentStatus::Cancelled,
        superseded_by: None,
        reason: Some("gone".into()),
        actor: "orders-service".into(),
        at: T0,
    };
    assert_eq!(store.intent_words("i-1").await.unwrap(), vec![old.clone()]);
    let billing = IntentRecord {
        entity: "billing".into(),
        status: IntentStatus::Superseded,
        superseded_by: Some("i-2".into()),
        at: Timestamp(T0.0 + 1),
        ..old.clone()
    };
    assert_eq!(store.put_intent(&billing).await.unwrap(), billing);
    assert_eq!(store.intent_words("i-1").await.unwrap(), vec![old, billing]);
    store.close();
}
