//! A small connection pool with a prepared-statement cache per connection, and [`Db`],
//! the handle every operation queries through.
//!
//! The pool holds at most `pool_size` connections. A caller waits (bounded by
//! [`ACQUIRE_TIMEOUT`]) for a permit, then takes an idle connection or opens a new one.
//! A connection goes back to the pool when its guard drops, unless it is closed, was
//! marked broken, or the pool was closed. A transaction that is dropped unfinished is
//! rolled back by `tokio-postgres` (it queues a `ROLLBACK` ahead of any later query), so a
//! returned connection is always outside a transaction.
//!
//! Each connection keeps the statements it prepared, keyed by their SQL text (always a
//! `&'static str` of this crate), so a hot statement is parsed and planned once per
//! connection.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use redrive_store::{StoreError, StoreResult};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

use crate::error::{DbExt, PostgresError, unavailable};
use crate::rows::QueueInfo;

/// Longest wait for a free connection before a call fails with `Unavailable`.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a new connection to be established, unless the URL sets its own
/// `connect_timeout`.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest time data sent on a connection may stay unacknowledged before the connection
/// is closed (`TCP_USER_TIMEOUT`), unless the URL sets `tcp_user_timeout`: a peer that
/// vanished (dropped packets) is noticed within this, not after minutes of retransmits.
pub(crate) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);
/// TCP keepalive probes on idle connections: the first after this long idle…
pub(crate) const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);
/// …then one every this long…
pub(crate) const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);
/// …and the connection is closed after this many unanswered.
pub(crate) const KEEPALIVES_RETRIES: u32 = 3;
/// `tokio-postgres`'s own keepalive idle time, replaced by [`KEEPALIVES_IDLE`] when the
/// URL leaves it.
const DRIVER_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// Statements prepared on one connection, by SQL text.
type Statements = Mutex<HashMap<&'static str, Statement>>;

/// The pool. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    config: tokio_postgres::Config,
    /// Run once on every new connection (search path, durability setting).
    on_connect: String,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
    closed: AtomicBool,
}

/// One open connection and its statement cache.
pub(crate) struct Conn {
    client: Client,
    statements: Statements,
    /// Set while a transaction this crate began is open on the connection: a connection
    /// whose operation was dropped half way is then closed rather than reused.
    in_tx: AtomicBool,
}

/// A connection taken from the pool; it goes back when dropped.
pub(crate) struct PooledConn {
    conn: Option<Conn>,
    pool: Arc<Inner>,
    broken: bool,
    _permit: OwnedSemaphorePermit,
}

/// Quotes an SQL identifier.
pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The statements run on every new connection: the schema goes first on the search
/// path, and an explicit `synchronous_commit = off` (which would make a committed write
/// losable) is raised to `on`; any stronger setting is kept.
pub(crate) fn on_connect_sql(schema: Option<&str>) -> String {
    let mut sql = String::from(
        "SELECT set_config('synchronous_commit', 'on', false) \
         WHERE current_setting('synchronous_commit') = 'off';",
    );
    if let Some(schema) = schema {
        sql.push_str(&format!(" SET search_path TO {};", quote_ident(schema)));
    }
    sql
}

/// Bounds a connection's network waits: a connect timeout, TCP keepalives and a TCP user
/// timeout, each unless the URL set its own.
pub(crate) fn bound_network(config: &mut tokio_postgres::Config) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if config.get_keepalives_idle() == DRIVER_KEEPALIVES_IDLE {
        config.keepalives(true);
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
}

impl Pool {
    /// A pool of at most `size` connections made from `config`, each statement on them
    /// bounded by `statement_timeout` (set on every new connection).
    pub(crate) fn new(
        mut config: tokio_postgres::Config,
        schema: Option<&str>,
        size: usize,
        statement_timeout: Duration,
    ) -> Self {
        bound_network(&mut config);
        if config.get_application_name().is_none() {
            config.application_name("redrive");
        }
        let mut on_connect = on_connect_sql(schema);
        on_connect.push_str(&format!(
            " SET statement_timeout = {};",
            statement_timeout.as_millis().max(1)
        ));
        Pool {
            inner: Arc::new(Inner {
                config,
                on_connect,
                idle: Mutex::new(Vec::with_capacity(size)),
                permits: Arc::new(Semaphore::new(size)),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// A connection: an idle one, or a new one while fewer than the pool size are open.
    pub(crate) async fn get(&self) -> StoreResult<PooledConn> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(unavailable(PostgresError::Closed));
        }
        let permit = tokio::time::timeout(
            ACQUIRE_TIMEOUT,
            Arc::clone(&self.inner.permits).acquire_owned(),
        )
        .await
        .map_err(|_| unavailable(PostgresError::PoolTimeout(ACQUIRE_TIMEOUT)))?
        .map_err(|_| unavailable(PostgresError::Closed))?;
        let reused = loop {
            let next = self
                .inner
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match next {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match reused {
            Some(c) => c,
            None => self.inner.connect().await?,
        };
        Ok(PooledConn {
            conn: Some(conn),
            pool: Arc::clone(&self.inner),
            broken: false,
            _permit: permit,
        })
    }

    /// Refuses new work and closes idle connections; connections in use close when
    /// their operation ends. Idempotent.
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.permits.close();
        let idle: Vec<Conn> = std::mem::take(
            &mut *self
                .inner
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        drop(idle);
    }

    /// Whether [`Pool::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

impl Inner {
    async fn connect(&self) -> StoreResult<Conn> {
        let client = open(&self.config, &self.on_connect).await?;
        Ok(Conn {
            client,
            statements: Mutex::new(HashMap::new()),
            in_tx: AtomicBool::new(false),
        })
    }
}

/// Opens one connection and runs `on_connect` on it, all within the connect timeout (the
/// socket-level `connect_timeout` of `tokio-postgres` does not cover the startup
/// exchange). The connection's I/O runs on a spawned task until the client is dropped.
async fn open(config: &tokio_postgres::Config, on_connect: &str) -> StoreResult<Client> {
    let limit = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let opening = async {
        // Whatever stops a connection from being made (refused, unreachable, the database
        // not accepting connections, authentication, too many connections) is transient
        // from the caller's side: the request may be retried once the database is back.
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| unavailable(PostgresError::Connect(e)))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "PostgreSQL connection ended with an error");
            }
        });
        client.batch_execute(on_connect).await.db()?;
        Ok::<_, StoreError>(client)
    };
    tokio::time::timeout(limit, opening)
        .await
        .map_err(|_| unavailable(PostgresError::ConnectTimeout(limit)))?
}

/// Opens one connection outside any pool (migrations, tools).
pub(crate) async fn connect_one(
    config: &tokio_postgres::Config,
    schema: Option<&str>,
) -> StoreResult<Client> {
    let mut config = config.clone();
    bound_network(&mut config);
    open(&config, &on_connect_sql(schema)).await
}

impl PooledConn {
    fn conn(&self) -> &Conn {
        // Only `Drop` takes the connection out.
        self.conn
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only on drop"))
    }

    /// A handle that runs the statements of one transaction (see [`Db::commit`]).
    pub(crate) fn transaction<'a>(&'a self, queues: &'a QueueCache) -> Db<'a> {
        let conn = self.conn();
        let mut db = Db::new(&conn.client, &conn.statements);
        db.tx = Some(&conn.in_tx);
        db.shared = Some(queues);
        db.state = AtomicU8::new(TX_PENDING);
        db
    }

    /// Marks the connection as busy until [`PooledConn::done`]: dropped in between (its
    /// operation abandoned at the client-side bound, a statement perhaps still in
    /// flight), it is closed rather than reused.
    pub(crate) fn busy(&self) {
        self.conn().in_tx.store(true, Ordering::Release);
    }

    /// Ends [`PooledConn::busy`].
    pub(crate) fn done(&self) {
        self.conn().in_tx.store(false, Ordering::Release);
    }

    /// A handle that runs each statement in its own implicit transaction.
    pub(crate) fn autocommit(&self) -> Db<'_> {
        let conn = self.conn();
        Db::new(&conn.client, &conn.statements)
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.broken
            || conn.in_tx.load(Ordering::Acquire)
            || conn.client.is_closed()
            || self.pool.closed.load(Ordering::Acquire)
        {
            return;
        }
        self.pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
}

/// Queues by name as this node last saw them: lets a hot operation send its first
/// statements together with the check of its queue (see `rows::queue_with`).
pub(crate) type QueueCache = Mutex<HashMap<String, Arc<QueueInfo>>>;

/// Owned parameters of a statement sent later or in a pipeline.
pub(crate) type Owned = Vec<Box<dyn ToSql + Sync + Send>>;

type Flight<'f> =
    Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'f>>;

/// Outside a transaction (each statement on its own).
const AUTOCOMMIT: u8 = 0;
/// A transaction whose `BEGIN` is sent with its first statement.
const TX_PENDING: u8 = 1;
/// A transaction whose `BEGIN` was sent.
const TX_OPEN: u8 = 2;

/// The handle an operation queries through: a connection (inside a transaction or not),
/// its statement cache, and the queues this operation has loaded.
///
/// Inside a transaction, round trips are saved by pipelining: `BEGIN` goes out with the
/// first statement, writes whose results are not needed ([`Db::defer`]) go out with the
/// next statement or with the `COMMIT`, and [`Db::pipeline`] sends several statements
/// at once. PostgreSQL runs them one after the other, in the order sent, each seeing
/// the effects of the ones before; a failed one aborts the transaction, so the ones after
/// it fail too and the operation reports the first error.
pub(crate) struct Db<'a> {
    client: &'a Client,
    statements: &'a Statements,
    /// Queues loaded (and row-locked) by this operation, by name; `None` caches absence.
    pub(crate) queues: Mutex<HashMap<String, Option<Arc<QueueInfo>>>>,
    /// The node's queue cache (transactions only).
    pub(crate) shared: Option<&'a QueueCache>,
    tx: Option<&'a AtomicBool>,
    state: AtomicU8,
    deferred: Mutex<Vec<(Statement, Owned)>>,
}

/// Parameters of one statement.
pub(crate) type Params<'p> = [&'p (dyn ToSql + Sync)];

/// Polls every future in order until all are done (each sends its request on its first
/// poll, so they go out in this order) and returns their outputs in the same order.
async fn join_in_order<T>(futs: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut futs: Vec<Option<Pin<Box<dyn Future<Output = T> + Send + '_>>>> =
        futs.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, result) in futs.iter_mut().zip(out.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

fn owned_refs(p: &Owned) -> Vec<&(dyn ToSql + Sync)> {
    p.iter().map(|b| &**b as &(dyn ToSql + Sync)).collect()
}

impl<'a> Db<'a> {
    pub(crate) fn new(client: &'a Client, statements: &'a Statements) -> Self {
        Db {
            client,
            statements,
            queues: Mutex::new(HashMap::new()),
            shared: None,
            tx: None,
            state: AtomicU8::new(AUTOCOMMIT),
            deferred: Mutex::new(Vec::new()),
        }
    }

    /// The prepared statement for `sql`, prepared on first use on this connection.
    pub(crate) async fn statement(&self, sql: &'static str) -> StoreResult<Statement> {
        let cached = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sql)
            .cloned();
        if let Some(s) = cached {
            return Ok(s);
        }
        let s = self.client.prepare(sql).await.db()?;
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sql, s.clone());
        Ok(s)
    }

    /// What must go out before the next statement: `BEGIN` if not yet sent, then the
    /// deferred writes.
    fn preamble(&self) -> Vec<Flight<'a>> {
        let mut out: Vec<Flight<'a>> = Vec::new();
        let client = self.client;
        if self
            .state
            .compare_exchange(TX_PENDING, TX_OPEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            if let Some(flag) = self.tx {
                flag.store(true, Ordering::Release);
            }
            out.push(Box::pin(async move {
                client.batch_execute("BEGIN").await.map(|()| Vec::new())
            }));
        }
        let deferred =
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(PoisonError::into_inner));
        for (s, p) in deferred {
            out.push(Box::pin(async move {
                client
                    .execute(&s, &owned_refs(&p))
                    .await
                    .map(|_| Vec::new())
            }));
        }
        out
    }

    /// Runs `main` after the preamble, in the same flight.
    async fn run(&self, main: Flight<'_>) -> StoreResult<Vec<Row>> {
        let mut flights = self.preamble();
        if flights.is_empty() {
            return main.await.db();
        }
        flights.push(main);
        let mut results = join_in_order(flights).await;
        let last = results.pop();
        for r in results {
            r.db()?;
        }
        last.unwrap_or_else(|| Ok(Vec::new())).db()
    }

    /// All rows of a query.
    pub(crate) async fn query(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Vec<Row>> {
        let s = self.statement(sql).await?;
        let client = self.client;
        self.run(Box::pin(async move { client.query(&s, params).await }))
            .await
    }

    /// All rows of a query whose text is built per call (a search over optional
    /// filters): prepared unnamed each time rather than cached, its values bound as
    /// parameters all the same.
    pub(crate) async fn query_built(&self, sql: &str, params: &Owned) -> StoreResult<Vec<Row>> {
        let client = self.client;
        let params = owned_refs(params);
        self.run(Box::pin(async move { client.query(sql, &params).await }))
            .await
    }

    /// At most one row.
    pub(crate) async fn query_opt(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Option<Row>> {
        let mut rows = self.query(sql, params).await?;
        if rows.len() > 1 {
            return Err(crate::error::backend(PostgresError::Invariant(
                "a query for at most one row returned more",
            )));
        }
        Ok(rows.pop())
    }

    /// Exactly one row.
    pub(crate) async fn query_one(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Row> {
        self.query_opt(sql, params).await?.ok_or_else(|| {
            crate::error::backend(PostgresError::Invariant(
                "a query for exactly one row returned none",
            ))
        })
    }

    /// Rows changed.
    pub(crate) async fn execute(&self, sql: &'static str, params: &Params<'_>) -> StoreResult<u64> {
        let s = self.statement(sql).await?;
        let client = self.client;
        let flights = self.preamble();
        if flights.is_empty() {
            return client.execute(&s, params).await.db();
        }
        for r in join_in_order(flights).await {
            r.db()?;
        }
        client.execute(&s, params).await.db()
    }

    /// A write whose result is not needed: inside a transaction it goes out with the next
    /// statement (or the `COMMIT`), and its failure fails that one; outside, it runs now.
    pub(crate) async fn defer(&self, sql: &'static str, params: Owned) -> StoreResult<()> {
        let s = self.statement(sql).await?;
        if self.state.load(Ordering::Acquire) == AUTOCOMMIT {
            self.client.execute(&s, &owned_refs(&params)).await.db()?;
            return Ok(());
        }
        self.deferred
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((s, params));
        Ok(())
    }

    /// Sends the statements at once (after the preamble) and returns each one's rows or
    /// error, in order.
    pub(crate) async fn pipeline(
        &self,
        stmts: Vec<(&'static str, Owned)>,
    ) -> StoreResult<Vec<StoreResult<Vec<Row>>>> {
        let mut prepared = Vec::with_capacity(stmts.len());
        for (sql, p) in stmts {
            prepared.push((self.statement(sql).await?, p));
        }
        let mut flights = self.preamble();
        let pre = flights.len();
        let client = self.client;
        for (s, p) in prepared {
            flights.push(Box::pin(
                async move { client.query(&s, &owned_refs(&p)).await },
            ));
        }
        let mut results = join_in_order(flights).await.into_iter();
        for r in results.by_ref().take(pre) {
            r.db()?;
        }
        Ok(results.map(|r| r.db()).collect())
    }

    /// Ends the transaction: the deferred writes, `COMMIT` and, when `wake` names
    /// queues, the notification of other nodes (`wakeups::NOTIFY`, on its own after the
    /// commit) go out in one flight. A failed notification is only logged: a wake-up is
    /// a hint.
    pub(crate) async fn commit(&self, channel: &str, wake: &[&str]) -> StoreResult<()> {
        let mut flights = self.preamble();
        let pre = flights.len();
        let began = self.state.load(Ordering::Acquire) == TX_OPEN;
        let client = self.client;
        if began {
            flights.push(Box::pin(async move {
                client.batch_execute("COMMIT").await.map(|()| Vec::new())
            }));
        }
        let notifying = !wake.is_empty();
        if notifying {
            let s = self.statement(crate::wakeups::NOTIFY).await?;
            let channel = channel.to_owned();
            let queues: Vec<String> = wake.iter().map(|q| (*q).to_owned()).collect();
            flights.push(Box::pin(async move {
                client
                    .execute(&s, &[&channel, &queues])
                    .await
                    .map(|_| Vec::new())
            }));
        }
        let mut results = join_in_order(flights).await.into_iter();
        let mut first: Option<StoreError> = None;
        for r in results.by_ref().take(pre + usize::from(began)) {
            if let Err(e) = r.db()
                && first.is_none()
            {
                first = Some(e);
            }
        }
        if notifying && let Some(Err(e)) = results.next() {
            tracing::warn!(error = %e, queues = ?wake, "could not notify other nodes of a wake-up");
        }
        // After a failed commit the connection's state is unknown: it stays marked, so
        // it is closed rather than reused.
        if let Some(flag) = self.tx {
            flag.store(first.is_some(), Ordering::Release);
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Ends the transaction without its writes. An error means the connection's state is
    /// unknown.
    pub(crate) async fn rollback(&self) -> StoreResult<()> {
        self.deferred
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if self.state.load(Ordering::Acquire) != TX_OPEN {
            return Ok(());
        }
        self.client.batch_execute("ROLLBACK").await.db()?;
        if let Some(flag) = self.tx {
            flag.store(false, Ordering::Release);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("rd_test"), "\"rd_test\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert!(on_connect_sql(Some("x")).ends_with("SET search_path TO \"x\";"));
        assert!(!on_connect_sql(None).contains("search_path"));
    }
}
