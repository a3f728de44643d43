//! The background sweep: applies lock expiries and message expiries across all queues on
//! the injected clock, so counts and metrics stay true even for queues nobody receives
//! from. (Each queue's receive path applies its own due expiries first as well, so
//! correctness of delivery does not wait for the sweep.)

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Broker;

/// Rows handled per sweep pass.
const SWEEP_BATCH: u32 = 1_000;

/// The sweep worker.
pub struct Sweeper {
    broker: Broker,
    interval: Duration,
}

impl Sweeper {
    /// A sweeper running every `interval` of the broker's clock.
    pub fn new(broker: Broker, interval: Duration) -> Self {
        Sweeper { broker, interval }
    }

    /// Sweeps until `cancel` fires. A storage error is logged and retried at the next tick;
    /// it never ends the loop.
    pub async fn run(self, cancel: CancellationToken) {
        loop {
            if let Err(e) = self.broker.sweep_once().await {
                tracing::warn!(error = %e, "sweep failed; retrying at the next tick");
            }
            let next = self.broker.now().plus(self.interval);
            tokio::select! {
                () = self.broker.inner.clock.sleep_until(next) => {}
                () = cancel.cancelled() => return,
            }
        }
    }
}

impl Broker {
    /// One sweep: every due lock expiry and message expiry, in passes of a bounded size.
    pub async fn sweep_once(&self) -> crate::BrokerResult<()> {
        loop {
            let out = self.inner.store.sweep(self.now(), SWEEP_BATCH).await?;
            self.apply_effects(&out.effects);
            if !out.more {
                return Ok(());
            }
        }
    }
}
