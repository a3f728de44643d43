//! The in-process test server: a broker over a fresh store, served by
//! `redrive_server::run_with` on 127.0.0.1 (and, when asked, the SQS endpoint on a second
//! listener), built from the crates' public constructors only.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use redrive_broker::{AccessSettings, Broker, NetworkPolicy};
use redrive_core::{Clock, ManualClock};
use redrive_server::Settings;
use redrive_sqs::SqsConfig;
use redrive_store::Store;
use redrive_store_postgres::PostgresStore;
use redrive_store_sqlite::{SqliteOptions, SqliteStore};

use crate::postgres::SchemaGuard;
use crate::{ADMIN, T0, loopback};

/// Where a test server keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory of its own.
    Sqlite,
    /// A fresh schema on the PostgreSQL database at this URL.
    Postgres(String),
}

impl Backend {
    /// PostgreSQL on the test database, or `None` (after saying that `what` is skipped;
    /// under CI a failure) when there is none: see [`crate::postgres`].
    pub fn postgres(what: &str) -> Option<Backend> {
        crate::postgres::url(what).map(Backend::Postgres)
    }

    /// Every backend a test can run on here: SQLite, and PostgreSQL when a test database
    /// is configured (the rule of [`crate::postgres::url`] for `what`).
    pub fn all(what: &str) -> Vec<Backend> {
        let mut all = vec![Backend::Sqlite];
        all.extend(Backend::postgres(&format!("{what} on PostgreSQL")));
        all
    }

    /// `sqlite` or `postgres`, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// The settings test servers run with unless told otherwise: the defaults with a
/// five-second shutdown bound.
pub fn default_settings() -> Settings {
    Settings {
        sweep_interval_ms: 1_000,
        shutdown_timeout_ms: 5_000,
        ..Settings::default()
    }
}

/// How to start a [`TestServer`]; see [`TestServer::builder`].
#[derive(Clone)]
pub struct Builder {
    backend: Backend,
    /// `None`: the system clock.
    clock: Option<ManualClock>,
    access: AccessSettings,
    network: NetworkPolicy,
    trust: redrive_tls::Trust,
    settings: Settings,
    sqs: Option<SqsConfig>,
    extra: Vec<Router>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            backend: Backend::Sqlite,
            clock: Some(ManualClock::new(T0)),
            access: AccessSettings::default(),
            network: loopback(),
            trust: redrive_tls::Trust::platform(),
            settings: default_settings(),
            sqs: None,
            extra: Vec::new(),
        }
    }
}

impl Builder {
    /// Where the state lives (default: a SQLite file).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Time from `clock` (default: a new manual clock at [`T0`]).
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Time from the system clock instead of a manual one.
    pub fn system_clock(mut self) -> Self {
        self.clock = None;
        self
    }

    /// Callers admitted as `access` says (default: no authentication). With
    /// authentication on, the admin token is [`ADMIN`].
    pub fn auth(mut self, access: AccessSettings) -> Self {
        self.access = access;
        self
    }

    /// Push endpoints may be the addresses `network` allows (default: [`loopback`], where
    /// test receivers listen).
    pub fn network(mut self, network: NetworkPolicy) -> Self {
        self.network = network;
        self
    }

    /// What the server's outgoing `https://` requests trust, and the test's own client
    /// too (default: the platform's roots); a [`TestCa`](crate::tls::TestCa)'s, say.
    pub fn trust(mut self, trust: redrive_tls::Trust) -> Self {
        self.trust = trust;
        self
    }

    /// The server's settings, as they are (default: [`default_settings`]).
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Also serve the SQS endpoint with `config`, on a listener of its own.
    pub fn sqs(mut self, config: SqsConfig) -> Self {
        self.sqs = Some(config);
        self
    }

    /// Also serve `router` on a listener of its own (as `run_with`'s extra routers).
    pub fn extra(mut self, router: Router) -> Self {
        self.extra.push(router);
        self
    }

    /// Starts the server on a fresh store.
    pub async fn start(self) -> TestServer {
        let storage = Arc::new(match &self.backend {
            Backend::Sqlite => Storage::Sqlite(tempfile::tempdir().expect("a temporary dir")),
            Backend::Postgres(url) => Storage::Postgres(SchemaGuard::fresh(url)),
        });
        TestServer::start_on(self, storage).await
    }
}

/// The store's home, shared by the server and its restarts; removed when the last of them
/// goes (the directory, or the schema).
enum Storage {
    Sqlite(tempfile::TempDir),
    Postgres(SchemaGuard),
}

/// An open store, kept to be closed after the server stops.
#[derive(Clone)]
enum Opened {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
}

impl Storage {
    async fn open(&self) -> Opened {
        match self {
            Storage::Sqlite(dir) => Opened::Sqlite(Arc::new(
                SqliteStore::open(&dir.path().join("redrive.db"), SqliteOptions::default())
                    .expect("open the test SQLite store"),
            )),
            Storage::Postgres(schema) => Opened::Postgres(Arc::new(
                PostgresStore::connect(&schema.url, schema.options())
                    .await
                    .expect("connect to the test schema"),
            )),
        }
    }
}

impl Opened {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            Opened::Sqlite(s) => s.clone(),
            Opened::Postgres(s) => s.clone(),
        }
    }

    fn close(&self) {
        match self {
            Opened::Sqlite(s) => s.close(),
            Opened::Postgres(s) => s.close(),
        }
    }
}

/// A running server. [`TestServer::stop`] stops it gracefully and waits; dropping it
/// asks it to stop and lets it finish in the background.
pub struct TestServer {
    /// The native API: `http://127.0.0.1:<port>` (`https` with TLS settings).
    pub url: String,
    /// The native API's listen address, for raw TCP clients.
    pub addr: SocketAddr,
    /// The SQS endpoint, when started with one.
    pub sqs_url: Option<String>,
    /// The listen addresses of the [`Builder::extra`] routers, in order.
    pub extra_addrs: Vec<SocketAddr>,
    /// A client for the tests' requests.
    pub http: reqwest::Client,
    /// The server's broker.
    pub broker: Broker,
    /// Which backend holds the state.
    pub backend: Backend,
    config: Builder,
    storage: Arc<Storage>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// How to start one: SQLite, a manual clock at [`T0`], no authentication, push
    /// endpoints allowed on loopback, no SQS endpoint, [`default_settings`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A server as [`TestServer::builder`] describes it.
    pub async fn start() -> TestServer {
        Builder::default().start().await
    }

    async fn start_on(config: Builder, storage: Arc<Storage>) -> TestServer {
        let opened = storage.open().await;
        let clock: Arc<dyn Clock> = match &config.clock {
            Some(manual) => Arc::new(manual.clone()),
            None => Arc::new(redrive_broker::SystemClock),
        };
        let broker = Broker::with_outgoing(
            opened.store(),
            clock,
            config.access.clone(),
            config.network.clone(),
            config.trust.clone(),
        );
        if broker.auth_enabled() {
            assert_eq!(
                broker
                    .bootstrap_admin(Some(ADMIN))
                    .await
                    .expect("bootstrap the admin token"),
                None,
                "the configured admin token is used, none is generated"
            );
        }
        let bind = || async {
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0")
        };
        let native = bind().await;
        let addr = native.local_addr().expect("a bound address");
        let scheme = if config.settings.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        let mut extra = Vec::new();
        let mut sqs_url = None;
        if let Some(sqs) = &config.sqs {
            let listener = bind().await;
            sqs_url = Some(format!(
                "{scheme}://{}",
                listener.local_addr().expect("a bound address")
            ));
            let mut sqs = sqs.clone();
            // The default names the default listen address, which a test server does not
            // bind: its queue URLs name the address it did bind, unless the test set one.
            if sqs.public_url == redrive_sqs::DEFAULT_PUBLIC_URL {
                sqs.public_url
                    .clone_from(sqs_url.as_ref().expect("just set"));
            }
            extra.push((listener, redrive_sqs::router(broker.clone(), sqs)));
        }
        let mut extra_addrs = Vec::new();
        for router in &config.extra {
            let listener = bind().await;
            extra_addrs.push(listener.local_addr().expect("a bound address"));
            extra.push((listener, router.clone()));
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let (settings, broker, storage) =
                (config.settings.clone(), broker.clone(), storage.clone());
            tokio::spawn(async move {
                redrive_server::run_with(settings, broker, native, extra, async {
                    let _ = stopped.await;
                })
                .await
                .expect("the test server ran");
                opened.close();
                // The store's home goes with the last of the server and its handle.
                drop(storage);
            })
        };
        TestServer {
            url: format!("{scheme}://{addr}"),
            addr,
            sqs_url,
            extra_addrs,
            http: config
                .trust
                .client_builder()
                .build()
                .expect("the test's HTTP client"),
            broker,
            backend: config.backend.clone(),
            config,
            storage,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The manual clock the server reads.
    ///
    /// # Panics
    /// When the server runs on the system clock.
    pub fn clock(&self) -> &ManualClock {
        self.config
            .clock
            .as_ref()
            .expect("this server runs on the system clock, not a manual one")
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("the test server stopped cleanly");
        }
    }

    /// Stops the server gracefully and waits for it (and for its store to close).
    pub async fn stop(mut self) {
        self.shutdown().await;
    }

    /// Stops the server gracefully, then starts a new one over the same store and the same
    /// clock (on new ports: use the returned server's URLs).
    pub async fn restart(mut self) -> TestServer {
        self.shutdown().await;
        let config = self.config.clone();
        let storage = self.storage.clone();
        drop(self);
        TestServer::start_on(config, storage).await
    }

    /// Runs `sql` (one or more statements) on the store of the running server through a
    /// plain connection of its own — as someone with the database file or a database
    /// login would, behind the server's back, while it runs. On SQLite the statements
    /// wait for the server's writer (a busy timeout); on PostgreSQL they run in the
    /// server's schema.
    pub async fn sql(&self, sql: &str) {
        match &*self.storage {
            Storage::Sqlite(dir) => {
                let path = dir.path().join("redrive.db");
                let sql = sql.to_owned();
                tokio::task::spawn_blocking(move || {
                    let conn = rusqlite::Connection::open(path).expect("open the test SQLite file");
                    conn.busy_timeout(std::time::Duration::from_secs(10))
                        .expect("set a busy timeout");
                    conn.execute_batch(&sql)
                        .unwrap_or_else(|e| panic!("{sql}: {e}"));
                })
                .await
                .expect("the SQL ran");
            }
            Storage::Postgres(schema) => {
                crate::postgres::admin_sql(
                    &schema.url,
                    &format!("SET search_path TO \"{}\"; {sql}", schema.schema),
                )
                .await;
            }
        }
    }

    /// Stops the server gracefully, runs `sql` (one or more statements) on its store
    /// through a plain connection of its own — as someone with the database file or a
    /// database login would, behind the server's back —, then starts a new server over
    /// the same store as [`TestServer::restart`] does. On PostgreSQL the statements run
    /// in the server's schema.
    pub async fn restart_after_sql(mut self, sql: &str) -> TestServer {
        self.shutdown().await;
        match &*self.storage {
            Storage::Sqlite(dir) => {
                let conn = rusqlite::Connection::open(dir.path().join("redrive.db"))
                    .expect("open the test SQLite file");
                conn.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Storage::Postgres(schema) => {
                crate::postgres::admin_sql(
                    &schema.url,
                    &format!("SET search_path TO \"{}\"; {sql}", schema.schema),
                )
                .await;
            }
        }
        let config = self.config.clone();
        let storage = self.storage.clone();
        drop(self);
        TestServer::start_on(config, storage).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
