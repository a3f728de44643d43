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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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

impl Pool {
    /// A pool of at most `size` connections made from `config`.
    pub(crate) fn new(
        mut config: tokio_postgres::Config,
        schema: Option<&str>,
        size: usize,
    ) -> Self {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("redrive");
        }
        Pool {
            inner: Arc::new(Inner {
                config,
                on_connect: on_connect_sql(schema),
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
        let (client, connection) = config.connect(NoTls).await.db()?;
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
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    open(&config, &on_connect_sql(schema)).await
}

impl PooledConn {
    fn conn(&self) -> &Conn {
        // Only `Drop` takes the connection out.
        self.conn
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only on drop"))
    }

    /// The client (for transactions) and the statement cache, borrowed together.
    pub(crate) fn parts(&mut self) -> (&mut Client, &Statements) {
        let conn = self
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("taken only on drop"));
        (&mut conn.client, &conn.statements)
    }

    /// A handle that runs each statement in its own implicit transaction.
    pub(crate) fn autocommit(&self) -> Db<'_> {
        let conn = self.conn();
        Db::new(&conn.client, &conn.statements)
    }

    /// Do not return this connection to the pool (its state is not known).
    pub(crate) fn discard(&mut self) {
        self.broken = true;
    }
}

impl Drop for PooledConn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if self.broken || conn.client.is_closed() || self.pool.closed.load(Ordering::Acquire) {
            return;
        }
        self.pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
}

/// The handle an operation queries through: a connection (inside a transaction or not),
/// its statement cache, and the queues this operation has loaded.
pub(crate) struct Db<'a> {
    client: &'a Client,
    statements: &'a Statements,
    /// Queues loaded (and row-locked) by this operation, by name; `None` caches absence.
    pub(crate) queues: Mutex<HashMap<String, Option<Arc<QueueInfo>>>>,
}

/// Parameters of one statement.
pub(crate) type Params<'p> = [&'p (dyn ToSql + Sync)];

impl<'a> Db<'a> {
    pub(crate) fn new(client: &'a Client, statements: &'a Statements) -> Self {
        Db {
            client,
            statements,
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// The prepared statement for `sql`, prepared on first use on this connection.
    async fn statement(&self, sql: &'static str) -> StoreResult<Statement> {
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

    /// All rows of a query.
    pub(crate) async fn query(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Vec<Row>> {
        let s = self.statement(sql).await?;
        self.client.query(&s, params).await.db()
    }

    /// At most one row.
    pub(crate) async fn query_opt(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Option<Row>> {
        let s = self.statement(sql).await?;
        self.client.query_opt(&s, params).await.db()
    }

    /// Exactly one row.
    pub(crate) async fn query_one(
        &self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> StoreResult<Row> {
        let s = self.statement(sql).await?;
        self.client.query_one(&s, params).await.db()
    }

    /// Rows changed.
    pub(crate) async fn execute(&self, sql: &'static str, params: &Params<'_>) -> StoreResult<u64> {
        let s = self.statement(sql).await?;
        self.client.execute(&s, params).await.db()
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
