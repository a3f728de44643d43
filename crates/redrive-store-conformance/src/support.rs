//! Helpers shared by the cases: names, times, messages, and short calls.

use redrive_core::{EntityName, Properties, QueuePolicy, Timestamp};
use redrive_store::{
    Delivery, Enqueued, NewMessage, QueueCounts, ReceiveOutcome, ReceiveParams, SessionRef,
    SettleAction, Settled, Settlement, Store, StoreResult,
};

use crate::TestStore;

/// The time every case starts at (2023-11-14T22:13:20Z).
pub const T0: Timestamp = Timestamp(1_700_000_000_000);

/// `T0 + ms`.
pub fn at(ms: i64) -> Timestamp {
    T0.plus_millis(ms)
}

/// `T0 + s` seconds.
pub fn secs(s: i64) -> Timestamp {
    T0.plus_millis(s * 1_000)
}

/// A valid entity name.
pub fn name(s: &str) -> EntityName {
    s.parse().expect("test names are valid")
}

/// A default policy with a few changes applied by `f`.
pub fn policy(f: impl FnOnce(&mut QueuePolicy)) -> QueuePolicy {
    let mut p = QueuePolicy::default();
    f(&mut p);
    p
}

/// A plain message.
pub fn msg(id: &str, body: &[u8]) -> NewMessage {
    NewMessage {
        message_id: id.to_owned(),
        body: body.to_vec(),
        content_type: None,
        properties: Properties::new(),
        correlation_id: None,
        session_id: None,
        message_type: None,
        intent: None,
        valid_until: None,
        scheduled_at: None,
        expires_at: None,
    }
}

/// A message in a session.
pub fn session_msg(id: &str, session: &str) -> NewMessage {
    NewMessage {
        session_id: Some(session.to_owned()),
        ..msg(id, id.as_bytes())
    }
}

impl TestStore {
    /// The store.
    pub fn s(&self) -> &dyn Store {
        &*self.store
    }

    /// Creates a queue at `T0`.
    pub async fn queue(&self, q: &str, p: QueuePolicy) -> EntityName {
        let n = name(q);
        self.store
            .create_queue(&n, &p, T0)
            .await
            .expect("create queue");
        n
    }

    /// Enqueues, expecting success.
    pub async fn send(&self, q: &EntityName, m: Vec<NewMessage>, now: Timestamp) -> Vec<Enqueued> {
        self.store.enqueue(q, m, now).await.expect("enqueue")
    }

    /// Enqueues one message by id (body = id), returning its sequence.
    pub async fn send1(&self, q: &EntityName, id: &str, now: Timestamp) -> i64 {
        self.send(q, vec![msg(id, id.as_bytes())], now).await[0].sequence
    }

    /// Receives without a session, expecting success.
    pub async fn recv(
        &self,
        q: &EntityName,
        max: u32,
        lock_ms: u64,
        now: Timestamp,
    ) -> ReceiveOutcome {
        self.store
            .receive(params(q, max, lock_ms, now, None))
            .await
            .expect("receive")
    }

    /// Receives without a session and returns only the deliveries.
    pub async fn take(
        &self,
        q: &EntityName,
        max: u32,
        lock_ms: u64,
        now: Timestamp,
    ) -> Vec<Delivery> {
        self.recv(q, max, lock_ms, now).await.deliveries
    }

    /// Settles one delivery.
    pub async fn settle1(
        &self,
        q: &EntityName,
        token: &str,
        action: SettleAction,
        now: Timestamp,
    ) -> StoreResult<Settled> {
        let mut out = self
            .store
            .settle(
                q,
                vec![Settlement {
                    lock_token: token.to_owned(),
                    action,
                }],
                now,
            )
            .await?;
        assert_eq!(out.results.len(), 1, "one result per item");
        out.results.remove(0)
    }

    /// Counts at `now`.
    pub async fn counts(&self, q: &EntityName, now: Timestamp) -> QueueCounts {
        self.store.queue_counts(q, now).await.expect("counts")
    }

    /// Sequences currently on the queue (peek from 1).
    pub async fn sequences(&self, q: &EntityName) -> Vec<i64> {
        self.store
            .peek(q, 1, 10_000, T0)
            .await
            .expect("peek")
            .iter()
            .map(|m| m.sequence)
            .collect()
    }

    /// Receives one message and dead-letters it by the application's decision; returns the
    /// record id.
    pub async fn dead_letter_one(
        &self,
        q: &EntityName,
        id: &str,
        reason: &str,
        now: Timestamp,
    ) -> String {
        self.send1(q, id, now).await;
        let d = self.take(q, 1, 30_000, now).await;
        assert_eq!(d.len(), 1, "the message just sent is received");
        assert_eq!(d[0].message.message_id, id);
        self.settle1(
            q,
            &d[0].lock_token,
            SettleAction::DeadLetter {
                reason: reason.to_owned(),
                description: None,
                by_broker: false,
                classifier: redrive_core::Classifier::default(),
            },
            now,
        )
        .await
        .expect("dead-letter")
        .dead_letter_id
        .expect("a record id")
    }
}

/// Receive parameters.
pub fn params(
    q: &EntityName,
    max: u32,
    lock_ms: u64,
    now: Timestamp,
    session: Option<SessionRef>,
) -> ReceiveParams {
    ReceiveParams {
        queue: q.clone(),
        max,
        lock_ms,
        now,
        session,
    }
}

/// Sequence numbers of deliveries, in order.
pub fn seqs(d: &[Delivery]) -> Vec<i64> {
    d.iter().map(|d| d.message.sequence).collect()
}

/// Asserts that `r` failed with the variant matched by `pat`.
#[macro_export]
#[doc(hidden)]
macro_rules! assert_err {
    ($r:expr, $pat:pat) => {
        match $r {
            Err(e) => assert!(
                matches!(e, $pat),
                "expected {}, got {:?}",
                stringify!($pat),
                e
            ),
            Ok(v) => panic!("expected {}, got Ok({:?})", stringify!($pat), v),
        }
    };
}
