//! redrive's HTTP server: the native API, metrics, background workers and graceful
//! shutdown. A library, so that tests and the binary start it the same way.
//!
//! Handlers are thin: extract (with extractors whose rejections are problem documents),
//! convert wire types into broker input, call one broker operation, convert back.
//!
//! # Layout
//! - [`error`]: the RFC 9457 error type and the extractors.
//! - `wire`: conversions between wire types and broker/store types.
//! - `api/`: one file per resource, each with its `router()`.

mod api;
pub mod error;
mod wire;
pub use wire::{body_in, body_out, outgoing};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use redrive_api::ErrorCode;
use redrive_broker::{Broker, Dispatcher, Sweeper, WakeupRelay};
use redrive_core::Clock;
use redrive_store::Store;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use redrive_broker::SystemClock;

use crate::error::ApiError;

/// Largest request body accepted: a batch of messages up to the largest message size,
/// base64-encoded, fits.
const MAX_REQUEST_BYTES: usize = 400 * 1024 * 1024;

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sweep_interval_ms: 1_000,
            shutdown_timeout_ms: 30_000,
            lease_ttl_ms: 5_000,
        }
    }
}

/// Shared state of the handlers: cheap handles only; the store is the state.
#[derive(Clone)]
pub struct AppState {
    /// The service layer.
    pub broker: Broker,
}

/// The whole API as a router, for the server and for socket-less tests.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(api::queues::router())
        .merge(api::messages::router())
        .merge(api::sessions::router())
        .merge(api::dead_letters::router())
        .merge(api::ops::router())
        .merge(api::topics::router())
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

/// Serves the API on `listener` until `shutdown` completes, then stops gracefully: stops
/// accepting, ends long polls, lets in-flight requests finish (bounded by
/// `shutdown_timeout_ms`), stops background work. The caller closes the store afterwards.
pub async fn run(
    settings: Settings,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(
        settings,
        Broker::new(store, clock),
        listener,
        Vec::new(),
        shutdown,
    )
    .await
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
    // Wake-ups from other nodes sharing the store (returns at once for a store that only
    // this process writes).
    tracker.spawn(WakeupRelay::new(broker.clone()).run(cancel.clone()));
    // Push delivery of push subscriptions (retries come due on the sweep interval).
    let dispatcher = Dispatcher::new(
        broker.clone(),
        Duration::from_millis(settings.sweep_interval_ms.max(1)),
    )
    .map_err(|e| anyhow::anyhow!("cannot build the push HTTP client: {e}"))?;
    tracker.spawn(dispatcher.run(cancel.clone()));
    let app = router(AppState {
        broker: broker.clone(),
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "listening");
    }
    let signal = {
        let cancel = cancel.clone();
        let broker = broker.clone();
        async move {
            shutdown.await;
            tracing::info!("shutdown requested: no new connections, ending long polls");
            broker.begin_shutdown();
            cancel.cancel();
        }
    };
    let mut others = tokio::task::JoinSet::new();
    for (l, r) in extra {
        if let Ok(addr) = l.local_addr() {
            tracing::info!(%addr, "listening (extra endpoint)");
        }
        let stop = cancel.clone();
        others.spawn(async move {
            axum::serve(l, r)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
    }
    let grace = Duration::from_millis(settings.shutdown_timeout_ms);
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    let all = async move {
        let main = server.await;
        while let Some(r) = others.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "an extra endpoint stopped with an error")
                }
                Err(e) => tracing::error!(error = %e, "an extra endpoint task failed"),
            }
        }
        main
    };
    tokio::select! {
        r = all => r?,
        () = async { cancel.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!("in-flight requests did not finish within the shutdown timeout");
        }
    }
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("background workers did not stop within the shutdown timeout");
    }
    tracing::info!("server stopped");
    Ok(())
}
