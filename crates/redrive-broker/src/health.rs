//! The health of what the broker depends on, for `/healthz`.

use crate::{Broker, BrokerError};

/// Whether the store answers now.
#[derive(Debug)]
pub struct StoreHealth {
    /// The store's backend (`sqlite`, `postgres`).
    pub backend: &'static str,
    /// `Ok` when it answered a round trip; otherwise the error an operation would get
    /// (`Unavailable` while the database cannot be reached, `Poisoned` after a failed
    /// commit).
    pub answer: Result<(), BrokerError>,
}

impl Broker {
    /// One cheap round trip to the store.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn store_health(&self) -> StoreHealth {
        StoreHealth {
            backend: self.inner.store.backend_name(),
            answer: self.inner.store.ping().await.map_err(BrokerError::from),
        }
    }
}
