//! Message move tasks (SQS `StartMessageMoveTask`, `ListMessageMoveTasks`,
//! `CancelMessageMoveTask`): a background task moves the messages of a queue (a
//! dead-letter queue) to a destination queue, or, without one, each message back to the
//! queue it was dead-lettered from (its `DeadLetterSource` property).
//!
//! A move is a peek-lock receive from the source, a send to the destination (the
//! dead-letter properties removed), then a complete of the source message: at least once
//! (a crash between the send and the complete leaves the message on both queues). At
//! most `max_per_second` messages are moved in each second of the broker's clock (the
//! task sleeps on the injected clock, never on wall time). A message without a source to
//! return to, or a send that fails, stops the task as failed (the message is released).
//!
//! Tasks are kept in the broker, per process: they are not stored, are not visible to
//! other nodes sharing the store, and end (as failed, "the broker shut down") at shutdown.

use std::sync::Mutex;

use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
};
use redrive_core::{PropertyValue, Timestamp};
use redrive_store::{Delivery, SettleAction, Settlement, StoredMessage};
use tokio_util::sync::CancellationToken;

use crate::{Actor, Broker, BrokerError, LockBounds, Outgoing, ReceiveOptions, Settle};

/// Highest move rate a task may ask for (messages per second).
pub const MAX_MOVE_RATE: u32 = 500;
/// Lock the mover takes on a source message while it moves it.
const MOVE_LOCK_MS: u64 = 60_000;
/// Messages received from the source at a time.
const MOVE_BATCH: u32 = 10;
/// Finished tasks kept per source queue (the most recent).
const KEPT_PER_SOURCE: usize = 10;

/// What to move, where, and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveSpec {
    /// The queue the messages leave.
    pub source: String,
    /// Where they go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// At most this many per second (1 to [`MAX_MOVE_RATE`]); `None`: as fast as it goes.
    pub max_per_second: Option<u32>,
    /// Who started it: the task runs on this actor's authority and fails with
    /// `authorization_revoked` when its token is revoked.
    pub owner: Actor,
}

/// The failure reason of a task whose owner's token was revoked while it ran.
pub const AUTHORIZATION_REVOKED: &str = "authorization_revoked";

/// The status of a move task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStatus {
    /// Moving.
    Running,
    /// The source had nothing more to move.
    Completed,
    /// Cancel asked; the task stops after the message it is moving.
    Cancelling,
    /// Stopped by a cancel.
    Cancelled,
    /// Stopped by an error (see the failure reason).
    Failed,
}

impl MoveStatus {
    /// The SQS name (`RUNNING`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MoveStatus::Running => "RUNNING",
            MoveStatus::Completed => "COMPLETED",
            MoveStatus::Cancelling => "CANCELLING",
            MoveStatus::Cancelled => "CANCELLED",
            MoveStatus::Failed => "FAILED",
        }
    }

    fn active(self) -> bool {
        matches!(self, MoveStatus::Running | MoveStatus::Cancelling)
    }
}

/// A move task as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTask {
    /// Identifies the task (for cancelling).
    pub handle: String,
    /// What it moves.
    pub spec: MoveSpec,
    /// Where it is.
    pub status: MoveStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed.
    pub failure: Option<String>,
    /// When it started.
    pub started_at: Timestamp,
}

/// Why a move-task operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// No task has this handle.
    #[error("no message move task has the handle {0:?}")]
    NotFound(String),
    /// A task of this source queue is running (or being cancelled).
    #[error("a message move task is already running for queue {0:?}")]
    AlreadyRunning(String),
    /// The task is not running (a finished task cannot be cancelled).
    #[error("message move task {0:?} is not running")]
    NotRunning(String),
    /// A broker refusal (unknown queue, invalid rate, shutdown).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// How every move task handle starts; 32 lowercase hex digits follow.
const MOVE_HANDLE_PREFIX: &str = "mv_";

/// Whether `handle` has the shape of a move task handle this broker hands out (whether or
/// not such a task exists), so that an interface can tell a malformed handle from an
/// unknown one.
pub fn is_move_task_handle(handle: &str) -> bool {
    handle.strip_prefix(MOVE_HANDLE_PREFIX).is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

struct Entry {
    task: MoveTask,
    cancel: CancellationToken,
}

/// The tasks of this process, oldest first.
#[derive(Default)]
pub(crate) struct MoveTasks {
    entries: Mutex<Vec<Entry>>,
}

impl MoveTasks {
    fn with<T>(&self, f: impl FnOnce(&mut Vec<Entry>) -> T) -> T {
        // A panic while holding the lock leaves a consistent list (single field updates).
        let mut g = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    fn update(&self, handle: &str, f: impl FnOnce(&mut MoveTask)) {
        self.with(|entries| {
            if let Some(e) = entries.iter_mut().find(|e| e.task.handle == handle) {
                f(&mut e.task);
            }
        });
    }
}

impl Broker {
    /// Starts a move task; refused while another task of the same source is active.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %spec.source))]
    pub async fn start_move_task(&self, spec: MoveSpec) -> Result<MoveTask, MoveError> {
        let owner = spec.owner.clone();
        let source = spec.source.clone();
        let result = self.start_move_task_inner(spec).await;
        let targets = match &result {
            Ok(t) => vec![t.handle.clone()],
            Err(_) => Vec::new(),
        };
        let outcome = match &result {
            Ok(_) => "ok".to_owned(),
            Err(MoveError::Broker(e)) => format!("error:{}", e.code_hint()),
            Err(_) => "error:refused".to_owned(),
        };
        self.audit(&owner, "move_task.start", Some(&source), targets, &outcome)
            .await?;
        result
    }

    async fn start_move_task_inner(&self, spec: MoveSpec) -> Result<MoveTask, MoveError> {
        if let Some(r) = spec.max_per_second
            && !(1..=MAX_MOVE_RATE).contains(&r)
        {
            return Err(BrokerError::invalid(
                "max_number_of_messages_per_second",
                format!("must be between 1 and {MAX_MOVE_RATE}"),
            )
            .into());
        }
        let view = self.get_queue(&spec.source).await?;
        if let Some(d) = &spec.destination {
            if d == &spec.source {
                return Err(BrokerError::invalid(
                    "destination",
                    "must be another queue than the source",
                )
                .into());
            }
            self.queue_record(d).await?;
        }
        if self.inner.shutdown.is_cancelled() {
            return Err(BrokerError::ShuttingDown.into());
        }
        let cancel = self.inner.shutdown.child_token();
        let task = MoveTask {
            handle: format!(
                "{MOVE_HANDLE_PREFIX}{:016x}{:016x}",
                fastrand::u64(..),
                fastrand::u64(..)
            ),
            spec: spec.clone(),
            status: MoveStatus::Running,
            moved: 0,
            to_move: view.counts.messages(),
            failure: None,
            started_at: self.now(),
        };
        self.inner.moves.with(|entries| {
            if entries
                .iter()
                .any(|e| e.task.spec.source == spec.source && e.task.status.active())
            {
                return Err(MoveError::AlreadyRunning(spec.source.clone()));
            }
            // Keep the most recent finished tasks of this source only.
            let finished: Vec<usize> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.task.spec.source == spec.source)
                .map(|(i, _)| i)
                .collect();
            let excess = (finished.len() + 1).saturating_sub(KEPT_PER_SOURCE);
            for i in finished.into_iter().take(excess).rev() {
                entries.remove(i);
            }
            entries.push(Entry {
                task: task.clone(),
                cancel: cancel.clone(),
            });
            Ok(())
        })?;
        tracing::info!(handle = %task.handle, source = %spec.source,
            destination = ?spec.destination, rate = ?spec.max_per_second,
            to_move = task.to_move, "message move task started");
        // Revoking the owner's token stops the task at once.
        let guard = self.revocation_guard(&spec.owner);
        let broker = self.clone();
        let handle = task.handle.clone();
        tokio::spawn(async move { broker.run_move(handle, spec, cancel, guard).await });
        Ok(task)
    }

    /// The most recent tasks of a source queue, newest first, at most `max`.
    pub fn list_move_tasks(&self, source: &str, max: usize) -> Vec<MoveTask> {
        self.inner.moves.with(|entries| {
            entries
                .iter()
                .rev()
                .filter(|e| e.task.spec.source == source)
                .take(max)
                .map(|e| e.task.clone())
                .collect()
        })
    }

    /// Asks a running task to stop; answers the task as it is now (status `CANCELLING`).
    #[tracing::instrument(level = "debug", skip_all, fields(task = %handle))]
    pub async fn cancel_move_task(
        &self,
        handle: &str,
        actor: &Actor,
    ) -> Result<MoveTask, MoveError> {
        let result = self.cancel_move_task_inner(handle);
        let (entity, outcome) = match &result {
            Ok(t) => (Some(t.spec.source.clone()), "ok"),
            Err(_) => (None, "error:refused"),
        };
        self.audit(
            actor,
            "move_task.cancel",
            entity.as_deref(),
            vec![handle.chars().take(64).collect()],
            outcome,
        )
        .await?;
        result
    }

    fn cancel_move_task_inner(&self, handle: &str) -> Result<MoveTask, MoveError> {
        self.inner.moves.with(|entries| {
            let Some(e) = entries.iter_mut().find(|e| e.task.handle == handle) else {
                return Err(MoveError::NotFound(handle.to_owned()));
            };
            if e.task.status != MoveStatus::Running {
                return Err(MoveError::NotRunning(handle.to_owned()));
            }
            e.task.status = MoveStatus::Cancelling;
            e.cancel.cancel();
            tracing::info!(handle, moved = e.task.moved, "message move task cancelling");
            Ok(e.task.clone())
        })
    }

    async fn run_move(
        &self,
        handle: String,
        spec: MoveSpec,
        cancel: CancellationToken,
        revoked: CancellationToken,
    ) {
        let stop = cancel.child_token();
        let result = tokio::select! {
            r = self.move_loop(&handle, &spec, &stop) => r,
            () = revoked.cancelled() => Err(AUTHORIZATION_REVOKED.to_owned()),
        };
        // A revocation that lands between batches ends the loop through the select; one
        // noticed only after the loop ended still counts as the reason it stopped.
        let result = if revoked.is_cancelled() {
            Err(AUTHORIZATION_REVOKED.to_owned())
        } else {
            result
        };
        let shut_down = self.inner.shutdown.is_cancelled();
        let mut end = None;
        self.inner.moves.update(&handle, |t| {
            match result {
                Err(reason) => {
                    t.status = MoveStatus::Failed;
                    t.failure = Some(reason);
                }
                Ok(()) if t.status == MoveStatus::Cancelling => t.status = MoveStatus::Cancelled,
                Ok(()) if shut_down => {
                    t.status = MoveStatus::Failed;
                    t.failure = Some("the broker shut down".to_owned());
                }
                Ok(()) => t.status = MoveStatus::Completed,
            }
            end = Some((t.status, t.moved, t.failure.clone()));
        });
        if let Some((status, moved, failure)) = end {
            let mut targets = vec![handle.clone(), format!("moved={moved}")];
            if let Some(f) = failure {
                targets.push(format!("failure={f}"));
            }
            let outcome = status.as_str().to_ascii_lowercase();
            if let Err(e) = self
                .audit(
                    &spec.owner,
                    "move_task.end",
                    Some(&spec.source),
                    targets,
                    &outcome,
                )
                .await
            {
                tracing::error!(error = %e, handle, "audit entry of a move task's end not written");
            }
        }
        tracing::info!(handle, "message move task ended");
    }

    /// Moves until the source is empty (`Ok`), the task is cancelled (`Ok`), or a message
    /// cannot be moved (`Err` with the reason).
    async fn move_loop(
        &self,
        handle: &str,
        spec: &MoveSpec,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let mut window_start = self.now();
        let mut in_window = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let mut want = MOVE_BATCH;
            if let Some(rate) = spec.max_per_second {
                if in_window >= rate {
                    let next = window_start.plus_millis(1_000);
                    tokio::select! {
                        () = self.inner.clock.sleep_until(next) => {}
                        () = cancel.cancelled() => return Ok(()),
                    }
                    window_start = self.now();
                    in_window = 0;
                    continue;
                }
                want = want.min(rate - in_window);
            }
            let got = self
                .receive(
                    &spec.source,
                    ReceiveOptions {
                        max: want,
                        lock_ms: Some(MOVE_LOCK_MS),
                        wait_ms: 0,
                        session: None,
                        until_revoked: None,
                    },
                )
                .await
                .map_err(|e| format!("receiving from {}: {e}", spec.source))?;
            if got.is_empty() {
                return Ok(());
            }
            let mut rest = got.into_iter();
            while let Some(d) = rest.next() {
                if let Err(reason) = self.move_one(spec, &d).await {
                    let release: Vec<Settlement> = std::iter::once(d)
                        .chain(rest)
                        .map(|d| Settlement {
                            lock_token: d.lock_token,
                            action: SettleAction::Abandon { delay_ms: Some(0) },
                        })
                        .collect();
                    if let Err(e) = self
                        .settle_items(&spec.source, release, LockBounds::Native)
                        .await
                    {
                        tracing::warn!(handle, error = %e, "releasing unmoved messages failed");
                    }
                    return Err(reason);
                }
                in_window += 1;
                self.inner.moves.update(handle, |t| t.moved += 1);
            }
            tokio::task::yield_now().await;
        }
    }

    /// Sends one delivery to its destination, then completes it on the source.
    async fn move_one(&self, spec: &MoveSpec, d: &Delivery) -> Result<(), String> {
        let m = &d.message;
        let dest = match (
            &spec.destination,
            m.properties.get(DEAD_LETTER_SOURCE_PROPERTY),
        ) {
            (Some(dest), _) => dest.clone(),
            (None, Some(PropertyValue::String(q))) => q.clone(),
            (None, _) => {
                return Err(format!(
                    "message {} has no original source queue to return to",
                    m.message_id
                ));
            }
        };
        let out = outgoing(m);
        let sent = self
            .send(&dest, vec![out.clone()])
            .await
            .map_err(|e| format!("sending message {} to {dest}: {e}", m.message_id))?;
        if sent.first().is_some_and(|e| e.duplicate) {
            // The destination's duplicate detection knows the id: moved messages are not
            // duplicates, so send it under a new id rather than lose it.
            let fresh = Outgoing {
                message_id: None,
                ..out
            };
            self.send(&dest, vec![fresh])
                .await
                .map_err(|e| format!("sending message {} to {dest}: {e}", m.message_id))?;
        }
        let done = self
            .settle(&spec.source, vec![(d.lock_token.clone(), Settle::Complete)])
            .await
            .map_err(|e| format!("completing message {}: {e}", m.message_id))?;
        if let Some(Err(e)) = done.first() {
            // The lock ran out: the message stays on the source and may be moved again.
            tracing::warn!(message_id = %m.message_id, error = %e,
                "moved message could not be completed on the source");
        }
        Ok(())
    }
}

/// The message to send for a moved one: the same id, body and properties, without the
/// dead-letter properties.
fn outgoing(m: &StoredMessage) -> Outgoing {
    let mut properties = m.properties.clone();
    for p in [
        DEAD_LETTER_REASON_PROPERTY,
        DEAD_LETTER_DESCRIPTION_PROPERTY,
        DEAD_LETTER_SOURCE_PROPERTY,
    ] {
        properties.remove(p);
    }
    Outgoing {
        message_id: Some(m.message_id.clone()),
        body: m.body.clone(),
        content_type: m.content_type.clone(),
        properties,
        correlation_id: m.correlation_id.clone(),
        session_id: m.session_id.clone(),
        message_type: m.message_type.clone(),
        intent: m.intent.clone(),
        valid_until: m.valid_until,
        scheduled_at: None,
        ttl_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use redrive_core::{ManualClock, QueuePolicy, Timestamp};
    use redrive_store_sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    struct Fixture {
        broker: Broker,
        clock: ManualClock,
        _dir: tempfile::TempDir,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let broker = Broker::new(store, Arc::new(clock.clone()));
        Fixture {
            broker,
            clock,
            _dir: dir,
        }
    }

    async fn fill(b: &Broker, queue: &str, n: usize) {
        let msgs = (0..n)
            .map(|i| Outgoing {
                body: format!("m{i}").into_bytes(),
                ..Outgoing::default()
            })
            .collect();
        b.send(queue, msgs).await.unwrap();
    }

    async fn count(b: &Broker, queue: &str) -> u64 {
        b.get_queue(queue).await.unwrap().counts.messages()
    }

    fn task(b: &Broker, source: &str) -> MoveTask {
        b.list_move_tasks(source, 1).pop().unwrap()
    }

    /// Waits (yielding, bounded) until `ok` holds: a signal, not a timing rule.
    async fn until(mut ok: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("condition never held");
    }

    /// Waits until the task has moved `n` and sleeps on the clock for its next second.
    async fn parked_at(f: &Fixture, source: &str, n: u64) {
        until(|| task(&f.broker, source).moved == n && f.clock.sleepers() == 1).await;
    }

    #[tokio::test]
    async fn the_rate_is_honoured_second_by_second_and_the_task_completes() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 5).await;
        let started = b
            .start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: Some(2),
                owner: Actor::anonymous(),
            })
            .await
            .unwrap();
        assert_eq!(started.status, MoveStatus::Running);
        assert_eq!(started.to_move, 5);
        parked_at(&f, "dlq", 2).await;
        assert_eq!(count(b, "dest").await, 2);
        assert_eq!(count(b, "dlq").await, 3);
        f.clock.advance(Duration::from_secs(1));
        parked_at(&f, "dlq", 4).await;
        assert_eq!(count(b, "dest").await, 4);
        f.clock.advance(Duration::from_secs(1));
        until(|| task(b, "dlq").status == MoveStatus::Completed).await;
        let t = task(b, "dlq");
        assert_eq!((t.moved, t.to_move), (5, 5));
        assert_eq!(count(b, "dest").await, 5);
        assert_eq!(count(b, "dlq").await, 0);
        assert!(matches!(
            b.cancel_move_task(&t.handle, &Actor::anonymous()).await,
            Err(MoveError::NotRunning(_))
        ));
    }

    #[test]
    fn handles_have_one_shape() {
        assert!(is_move_task_handle(&format!("mv_{}", "0a".repeat(16))));
        for bad in [
            "",
            "mv_",
            "mv_unknown",
            &format!("mv_{}", "0A".repeat(16)),
            &format!("mv_{}", "0".repeat(31)),
            &format!("xx_{}", "0".repeat(32)),
        ] {
            assert!(!is_move_task_handle(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn cancel_stops_the_task_and_one_task_runs_per_source() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 3).await;
        let spec = MoveSpec {
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: Some(1),
            owner: Actor::anonymous(),
        };
        let t = b.start_move_task(spec.clone()).await.unwrap();
        assert!(is_move_task_handle(&t.handle));
        parked_at(&f, "dlq", 1).await;
        assert!(matches!(
            b.start_move_task(spec.clone()).await,
            Err(MoveError::AlreadyRunning(_))
        ));
        let c = b
            .cancel_move_task(&t.handle, &Actor::anonymous())
            .await
            .unwrap();
        assert_eq!(c.status, MoveStatus::Cancelling);
        until(|| task(b, "dlq").status == MoveStatus::Cancelled).await;
        f.clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert_eq!(task(b, "dlq").moved, 1);
        assert_eq!(count(b, "dlq").await, 2);
        assert_eq!(count(b, "dest").await, 1);
        assert!(matches!(
            b.cancel_move_task("mv_unknown", &Actor::anonymous()).await,
            Err(MoveError::NotFound(_))
        ));
        // A new task may start once the old one ended; listed newest first.
        b.start_move_task(spec).await.unwrap();
        let both = b.list_move_tasks("dlq", 10);
        assert_eq!(both.len(), 2);
        assert_eq!(both[1].handle, t.handle);
        assert!(matches!(
            b.start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: None,
                max_per_second: Some(501),
                owner: Actor::anonymous(),
            })
            .await,
            Err(MoveError::Broker(BrokerError::InvalidRequest { .. }))
        ));
    }

    #[tokio::test]
    async fn without_destination_each_message_returns_to_its_source() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        let to_dlq = QueuePolicy {
            max_delivery_count: 1,
            dead_letter_queue: Some("dlq".parse().unwrap()),
            ..QueuePolicy::default()
        };
        for q in ["a", "b"] {
            b.create_queue(q, to_dlq.clone()).await.unwrap();
            fill(b, q, 1).await;
            let d = b
                .receive(
                    q,
                    ReceiveOptions {
                        max: 1,
                        ..ReceiveOptions::default()
                    },
                )
                .await
                .unwrap();
            b.settle(
                q,
                vec![(d[0].lock_token.clone(), Settle::Abandon { delay_ms: None })],
            )
            .await
            .unwrap();
        }
        assert_eq!(count(b, "dlq").await, 2);
        b.start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: None,
            max_per_second: None,
            owner: Actor::anonymous(),
        })
        .await
        .unwrap();
        until(|| task(b, "dlq").status == MoveStatus::Completed).await;
        assert_eq!(task(b, "dlq").moved, 2);
        for q in ["a", "b"] {
            let back = b.peek(q, 1, 10, &Actor::anonymous()).await.unwrap();
            assert_eq!(back.len(), 1, "{q} got its message back");
            assert!(!back[0].properties.contains_key(DEAD_LETTER_SOURCE_PROPERTY));
        }
        assert_eq!(count(b, "dlq").await, 0);
    }

    #[tokio::test]
    async fn a_message_without_a_source_fails_the_task_and_stays() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        fill(b, "dlq", 1).await;
        b.start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: None,
            max_per_second: None,
            owner: Actor::anonymous(),
        })
        .await
        .unwrap();
        until(|| task(b, "dlq").status == MoveStatus::Failed).await;
        assert!(task(b, "dlq").failure.unwrap().contains("source"));
        assert_eq!(b.get_queue("dlq").await.unwrap().counts.active, 1);
    }

    #[tokio::test]
    async fn revoking_the_owners_token_stops_the_task_with_authorization_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let f = Fixture {
            broker: Broker::with_access(
                store,
                Arc::new(clock.clone()),
                crate::AccessSettings {
                    enabled: true,
                    ..crate::AccessSettings::default()
                },
            ),
            clock,
            _dir: dir,
        };
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 3).await;
        let created = b
            .create_token(
                &Actor::system("test"),
                crate::TokenSpec {
                    name: "mover".into(),
                    grants: vec!["replayer".parse().unwrap()],
                    ..crate::TokenSpec::default()
                },
            )
            .await
            .unwrap();
        let owner = b.authenticate(Some(&created.secret), None).await.unwrap();
        let t = b
            .start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: Some(1),
                owner: owner.clone(),
            })
            .await
            .unwrap();
        parked_at(&f, "dlq", 1).await;
        b.revoke_token(&Actor::system("test"), &owner.id)
            .await
            .unwrap();
        until(|| task(b, "dlq").status == MoveStatus::Failed).await;
        let ended = task(b, "dlq");
        assert_eq!(ended.failure.as_deref(), Some(AUTHORIZATION_REVOKED));
        assert_eq!(ended.moved, 1);
        // Nothing more moves, whatever the clock does.
        f.clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert_eq!(count(b, "dest").await, 1);
        assert_eq!(count(b, "dlq").await, 2);
        // The task's end is audited just after its status changes: wait for the entry.
        let mut log = Vec::new();
        for _ in 0..10_000 {
            log = b
                .list_audit(&redrive_store::AuditQuery {
                    actor_id: Some(owner.id.clone()),
                    limit: 100,
                    ..redrive_store::AuditQuery::default()
                })
                .await
                .unwrap();
            if log.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let acts: Vec<(&str, &str)> = log
            .iter()
            .map(|e| (e.fields.action.as_str(), e.fields.outcome.as_str()))
            .collect();
        assert_eq!(
            acts,
            [("move_task.start", "ok"), ("move_task.end", "failed")]
        );
        assert!(log[1].fields.targets.contains(&t.handle));
        assert!(
            log[1]
                .fields
                .targets
                .contains(&format!("failure={AUTHORIZATION_REVOKED}"))
        );
    }
}
