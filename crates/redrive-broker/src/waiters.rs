//! Wake-ups for long polls: one `Notify` per queue, signalled when something may have
//! become receivable there (a send, an abandon, a sweep). Receivers wait on it instead of
//! re-querying in a loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Per-queue notifiers. Bounded by the number of queues: an entry is removed with its
/// queue.
#[derive(Default)]
pub(crate) struct Waiters {
    map: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Waiters {
    pub(crate) fn get(&self, queue: &str) -> Arc<Notify> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(queue.to_owned()).or_default().clone()
    }

    pub(crate) fn wake(&self, queue: &str) {
        let notify = {
            let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.get(queue).cloned()
        };
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }

    pub(crate) fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = {
            let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.values().cloned().collect()
        };
        for n in all {
            n.notify_waiters();
        }
    }

    pub(crate) fn forget(&self, queue: &str) {
        let removed = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.remove(queue)
        };
        if let Some(n) = removed {
            n.notify_waiters();
        }
    }
}
