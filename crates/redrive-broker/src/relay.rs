//! Wake-ups from other processes sharing the store: a send on another node must wake the
//! long polls waiting here within milliseconds. The store publishes them (PostgreSQL:
//! LISTEN/NOTIFY); this worker hands each one to the local waiters.

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::Broker;

/// Forwards the store's remote wake-ups to this broker's long polls.
pub struct WakeupRelay {
    broker: Broker,
}

impl WakeupRelay {
    /// A relay for `broker`.
    pub fn new(broker: Broker) -> Self {
        WakeupRelay { broker }
    }

    /// Runs until `cancel` fires, or at once returns when the store has no remote
    /// wake-ups (one process only).
    pub async fn run(self, cancel: CancellationToken) {
        let Some(mut rx) = self.broker.inner.store.remote_wakeups() else {
            return;
        };
        loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(queue) => self.broker.inner.waiters.wake(&queue),
                    Err(RecvError::Lagged(missed)) => {
                        // Some names were lost: wake every waiter rather than miss one.
                        tracing::debug!(missed, "remote wake-ups lagged; waking all long polls");
                        self.broker.inner.waiters.wake_all();
                    }
                    Err(RecvError::Closed) => return,
                },
                () = cancel.cancelled() => return,
            }
        }
    }
}
