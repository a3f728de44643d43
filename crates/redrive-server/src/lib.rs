//! redrive's HTTP server: the native API, metrics, background workers and graceful
//! shutdown. A library, so that tests and the binary start it the same way.
//!
//! Handlers are thin: extract (with extractors whose rejections are problem documents),
//! convert wire types into broker input, call one broker operation, convert back.
//!
//! # Layout
//! - [`error`]: the RFC 9457 error type and the extractors.
//! - `wire`: conversions between wire types and the broker's types.
//! - [`access`]: the permission table of every route and the middleware that
//!   authenticates requests and checks them against it.
//! - `api/`: one file per resource, each with its `router()`.
//! - `guard`: the HTTP-level rules of the native API (host, media type, sizes).
//! - `serve`: the accept loop of every listener (timeouts, connection limit, TLS).
//! - `tls`: the TLS acceptor from PEM files.
//! - `trace`: the span of every request (method, route, request id, status, latency).
//! - `console`: the web console's embedded files, served at `/` (`server.console`).
//! - `etag`: entity tags and `304 Not Modified` on the `GET /v1/…` JSON answers.

pub mod access;
mod api;
pub mod console;
pub mod error;
mod etag;
mod guard;
mod serve;
mod tls;
mod trace;
mod wire;
pub use wire::{body_in, body_out, outgoing};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use redrive_api::ErrorCode;
use redrive_broker::{
    Broker, CaseWorker, Dispatcher, PlanWorker, Replayer, RevocationWatch, Sweeper, WakeupRelay,
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use redrive_broker::SystemClock;
pub use serve::{
    BodyReadTimeout, FD_RESERVE, FramingConflict, effective_max_connections, raise_nofile_limit,
};

use crate::error::ApiError;

/// Largest request body accepted: a batch of messages up to the largest message size,
/// base64-encoded, fits.
const MAX_REQUEST_BYTES: usize = 400 * 1024 * 1024;

/// Largest request body of the routes that carry no message or event bodies (tokens,
/// queues and their policies, sessions, dead-letter operations).
pub const MAX_CONTROL_REQUEST_BYTES: usize = 1024 * 1024;

/// Server settings (the `[server]` section of the config file).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// How often the background sweep applies lock expiries and TTLs (milliseconds).
    pub sweep_interval_ms: u64,
    /// How long shutdown waits for in-flight requests and workers (milliseconds).
    pub shutdown_timeout_ms: u64,
    /// Time-to-live of the sweep lease (milliseconds): when the sweeping node dies,
    /// another takes over at most this long after its last renewal.
    pub lease_ttl_ms: u64,
    /// How long a client may take to send a request's header section, from its first
    /// byte (milliseconds); the connection is closed after that.
    pub header_read_timeout_ms: u64,
    /// How long one read of a request body may wait for data (milliseconds); the request
    /// is then answered 408 and the connection closed.
    pub body_read_timeout_ms: u64,
    /// How long a connection may stay open with no request in progress (milliseconds).
    pub idle_timeout_ms: u64,
    /// Most connections open at once over every listener; more are closed at once.
    /// Never above the soft limit of open files minus a reserve of 256.
    pub max_connections: usize,
    /// `Host` values accepted by the native API besides its listen address: `name` (any
    /// port), `name:port`, or `*` for any.
    pub allowed_hosts: Vec<String>,
    /// PEM file of the TLS certificate chain; with `tls_key_file`, every listener speaks
    /// HTTPS only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the TLS private key (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// How long a TLS handshake may take (milliseconds).
    pub tls_handshake_timeout_ms: u64,
    /// Whether this node runs the automatic replay worker (default true). Nodes sharing a
    /// store elect one replaying node among those that run it; a node without it still
    /// writes candidates, which the replaying node judges.
    pub replay_worker: bool,
    /// Whether this node runs the recovery case worker (default true): one node among
    /// those that run it holds its lease.
    pub case_worker: bool,
    /// Whether this node runs the replay plan runner (default true): one node among those
    /// that run it holds its lease and advances every running plan, so the node-wide replay
    /// budget bounds them all together.
    pub plan_worker: bool,
    /// Whether the web console is served at `/` (default true; `redrive serve --console
    /// off`). Off, `/` and `/console/…` answer 404.
    pub console: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sweep_interval_ms: 1_000,
            shutdown_timeout_ms: 30_000,
            lease_ttl_ms: 5_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            allowed_hosts: Vec::new(),
            tls_cert_file: None,
            tls_key_file: None,
            tls_handshake_timeout_ms: 10_000,
            replay_worker: true,
            case_worker: true,
            plan_worker: true,
            console: true,
        }
    }
}

impl Settings {
    /// Checks the HTTP settings: positive timeouts and limits, TLS files both or neither.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("tls_handshake_timeout_ms", self.tls_handshake_timeout_ms),
        ] {
            if v == 0 {
                return Err(format!("server.{name} must be positive"));
            }
        }
        if self.max_connections == 0 {
            return Err("server.max_connections must be positive".into());
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err("server.tls_cert_file and server.tls_key_file go together".into());
        }
        Ok(())
    }

    fn limits(&self) -> anyhow::Result<serve::Limits> {
        let tls = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            _ => None,
        };
        Ok(serve::Limits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            tls_handshake_timeout: Duration::from_millis(self.tls_handshake_timeout_ms),
            tls,
        })
    }
}

/// Shared state of the handlers: cheap handles only; the store is the state.
#[derive(Clone)]
pub struct AppState {
    /// The service layer.
    pub broker: Broker,
}

/// The whole API as a router (with the web console when `console`), for the server and
/// for socket-less tests.
pub fn router(state: AppState, console: bool) -> Router {
    // Routes that carry no message bodies take small requests; sends, settlements and
    // publishes take up to the largest batch.
    let small = DefaultBodyLimit::max(MAX_CONTROL_REQUEST_BYTES);
    let console = if console {
        console::router()
    } else {
        Router::new()
    };
    Router::new()
        .merge(console)
        .merge(api::access::router().layer(small))
        .merge(api::register::router().layer(small))
        .merge(api::queues::router().layer(small))
        .merge(api::messages::router())
        .merge(api::sessions::router().layer(small))
        .merge(api::dead_letters::router().layer(small))
        .merge(api::failures::router().layer(small))
        // An import carries a whole dead-letter file.
        .merge(
            api::dead_letters::import_router().layer(DefaultBodyLimit::max(
                api::dead_letters::MAX_IMPORT_REQUEST_BYTES,
            )),
        )
        .merge(api::replay::router().layer(small))
        .merge(api::cases::router().layer(small))
        .merge(api::case_groups::router().layer(small))
        // A transformation carries a payload.
        .merge(api::cases::payload_router())
        .merge(api::ops::router().layer(small))
        .merge(api::overview::router().layer(small))
        .merge(api::topics::router())
        // A transaction carries messages, within a bound of its own.
        .merge(api::transactions::router())
        // Every routed request is authenticated and checked against `access::ROUTES`.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::guard,
        ))
        // The matched route, on the request span `run_with` opens.
        .route_layer(axum::middleware::from_fn(trace::record_route))
        // Pollers revalidate `GET /v1/…` answers by their entity tag.
        .route_layer(axum::middleware::from_fn(etag::layer))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "this method is not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

/// Serves the API of `broker` on `listener` until `shutdown` completes, then stops
/// gracefully: stops accepting, ends long polls, lets in-flight requests finish (bounded
/// by `shutdown_timeout_ms`), stops background work. The caller closes the store
/// afterwards.
pub async fn run(
    settings: Settings,
    broker: Broker,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(settings, broker, listener, Vec::new(), shutdown).await
}

/// [`run`] over a broker the caller made, also serving each extra router on its own
/// listener (the SQS endpoint), all sharing that one broker. Shutdown is the same for
/// every listener: stop accepting, end long polls, let in-flight requests finish within
/// `shutdown_timeout_ms`.
pub async fn run_with(
    settings: Settings,
    broker: Broker,
    listener: tokio::net::TcpListener,
    extra: Vec<(tokio::net::TcpListener, Router)>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    settings.validate().map_err(|e| anyhow::anyhow!(e))?;
    let limits = settings.limits()?;
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    tracker.spawn(
        Sweeper::new(
            broker.clone(),
            Duration::from_millis(settings.sweep_interval_ms.max(1)),
        )
        .with_lease_ttl(Duration::from_millis(settings.lease_ttl_ms))
        .run(cancel.clone()),
    );
    // Automatic replay of dead letters, on one node at a time (its own lease); the drain
    // of stranded records runs when it first holds the lease.
    if settings.replay_worker {
        tracker.spawn(Replayer::new(broker.clone()).run(cancel.clone()));
    }
    // Recovery cases: route verification, effect lookups, escalation and payload
    // retention, on one node at a time (its own lease).
    if settings.case_worker {
        tracker.spawn(CaseWorker::new(broker.clone()).run(cancel.clone()));
    }
    // Bounded replay plans: admissions under each plan's budget and the node's, on one
    // node at a time (its own lease).
    if settings.plan_worker {
        tracker.spawn(PlanWorker::new(broker.clone()).run(cancel.clone()));
    }
    // Wake-ups from other nodes sharing the store (returns at once for a store that only
    // this process writes).
    tracker.spawn(WakeupRelay::new(broker.clone()).run(cancel.clone()));
    // Long polls and move tasks of tokens revoked on another node end within an interval.
    tracker.spawn(
        RevocationWatch::new(
            broker.clone(),
            Duration::from_millis(settings.sweep_interval_ms.max(1)),
        )
        .run(cancel.clone()),
    );
    // Push delivery of push subscriptions (retries come due on the sweep interval).
    let dispatcher = Dispatcher::new(
        broker.clone(),
        Duration::from_millis(settings.sweep_interval_ms.max(1)),
    )
    .map_err(|e| anyhow::anyhow!("cannot build the push HTTP client: {e}"))?;
    tracker.spawn(dispatcher.run(cancel.clone()));
    let listen = listener
        .local_addr()
        .map_err(|e| anyhow::anyhow!("cannot read the listening address: {e}"))?;
    let metrics = Arc::new(serve::ConnMetrics::default());
    // The guard is the outermost layer but for the request span: transport rules answer
    // before anything else, inside the span of the request they answer.
    let app = guard::wrap(
        router(
            AppState {
                broker: broker.clone(),
            },
            settings.console,
        ),
        Arc::new(guard::GuardConfig {
            hosts: guard::HostPolicy::new(listen, limits.tls.is_some(), &settings.allowed_hosts),
            max_body: MAX_REQUEST_BYTES,
            metrics: metrics.clone(),
        }),
    )
    .layer(axum::middleware::from_fn(trace::request_span));
    let max_connections = effective_max_connections(settings.max_connections);
    if max_connections < settings.max_connections {
        tracing::warn!(
            configured = settings.max_connections,
            max_connections,
            "max_connections lowered to fit the open-file limit"
        );
    }
    tracing::info!(%listen, tls = limits.tls.is_some(), max_connections, "listening");
    let mut listeners = vec![(listener, app)];
    for (l, r) in extra {
        if let Ok(addr) = l.local_addr() {
            tracing::info!(%addr, "listening (extra endpoint)");
        }
        listeners.push((l, r));
    }
    let stop = CancellationToken::new();
    {
        let cancel = cancel.clone();
        let broker = broker.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown => {}
                // The server ended on its own (it does not, short of a panic).
                () = stop.cancelled() => return,
            }
            tracing::info!("shutdown requested: no new connections, ending long polls");
            broker.begin_shutdown();
            cancel.cancel();
            stop.cancel();
        });
    }
    let grace = Duration::from_millis(settings.shutdown_timeout_ms);
    let all = serve::serve_all(listeners, limits, max_connections, metrics, stop.clone());
    tokio::select! {
        () = all => {}
        () = async { cancel.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!("in-flight requests did not finish within the shutdown timeout");
        }
    }
    stop.cancel();
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("background workers did not stop within the shutdown timeout");
    }
    // Message move tasks are let go in the store (left running for another node, or this
    // one after a restart, to resume) before the caller closes it.
    if tokio::time::timeout(grace, broker.move_tasks_stopped())
        .await
        .is_err()
    {
        tracing::warn!("message move tasks did not stop within the shutdown timeout");
    }
    tracing::info!("server stopped");
    Ok(())
}
