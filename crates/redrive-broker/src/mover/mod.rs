//! Message move tasks (SQS `StartMessageMoveTask`, `ListMessageMoveTasks`,
//! `CancelMessageMoveTask`): a background task moves the messages of a queue (a
//! dead-letter queue) to a destination queue, or, without one, each message back to the
//! queue it was dead-lettered from (its `DeadLetterSource` property).
//!
//! A move is a peek-lock receive from the source, a send to the destination (the
//! dead-letter properties removed), then a complete of the source message: at least once
//! (a crash between the send and the complete leaves the message on both queues). A
//! message without a source to return to, or a send that fails, stops the task as failed
//! (the message is released).
//!
//! # A move task is a replay plan
//!
//! A task is stored as a replay plan of kind `sqs_move` (`redrive_store::MovePart`
//! is its move-specific part; `GET /v1/replay/plans` lists it), bounded by items per second only:
//! its `max_per_second`, or [`MAX_MOVE_RATE`] when it names none — a move task is never
//! unbounded. Its pace is the plan engine's ([`redrive_core::plan::Pacer`], on the
//! broker's clock: the task sleeps on the injected clock, never on wall time). Messages
//! are received in batches of at most [`MOVE_BATCH`] and never more than a second of the
//! rate; a batch takes its slots together (`k` messages at `t` hold the pacer until
//! `t + k/rate`), so at most `rate` messages move in any second that starts with a batch,
//! and over any interval of length `T` at most `⌊T·rate⌋ + k`. The pacer's state is
//! written with every heartbeat (and when the task is let go), so a task resumed on
//! another node, or after a restart, keeps its spacing: it waits for its next slot.
//! Before it waits, a task whose last receive came back short looks at the source again:
//! a source it emptied ends the task at once rather than at its next slot.
//!
//! Tasks are kept in the store, so every node sharing it lists and cancels them. One node runs a task at a time, its runner: before each
//! batch the runner writes the task's progress and renews its heartbeat
//! ([`MOVE_HEARTBEAT`] of the broker's clock), and reads back whether a cancel was asked
//! on any node (`CANCELLING`: it stops there and ends the task `CANCELLED`; a cancel asked
//! on the runner's own node stops it at once). The one-running-task-per-source rule is
//! the store's, in the transaction that creates the task.
//!
//! A task whose runner stops is resumed: at shutdown a runner lets its tasks go (they stay
//! `RUNNING`, without a heartbeat), and a runner that dies stops renewing its heartbeat.
//! Every node, on each sweeper tick ([`Broker::resume_move_tasks`]), claims the orphans
//! whose heartbeat ran out and runs them on, on their owner's authority: the owner's
//! token is read again from the store, and a task whose owner's token is revoked or gone
//! fails with `authorization_revoked`. A runner that finds another node has claimed its
//! task (its heartbeat ran out while it was alive) stops without writing anything more.
//!
//! # The service
//!
//! [`Mover`] is the mover as its own service: it holds the broker's
//! [`Context`](crate::context::Context) (store, clock, metrics, node id, audit) and the
//! tasks this node runs, and does every store-side step of a task over it: create,
//! list, cancel, claim, the owner read again, heartbeats and the end (`start`, `status`,
//! `resume`, `run`). The run of a task moves messages through the broker's own queue
//! operations — receive with a lock, send, complete, release — and asks the recovery
//! case of each message through the gates of a delivery by hand (`cases::by_hand`, on
//! [`Broker::cases`]): those are reached from the [`Broker`], so the runner of a task
//! holds a `Broker` handle while it runs (a clone passed to the spawned runner, never
//! kept in the `Mover`, which the broker holds). The files: `spec` (what a task is, its checks), `start` (starting and
//! cancelling), `run` (the run of one task), `status` (listing), `resume` (claiming
//! orphans and shutdown).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redrive_core::Timestamp;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::context::Context;

mod resume;
mod run;
mod spec;
mod start;
mod status;
#[cfg(test)]
mod tests;

pub use spec::{
    AUTHORIZATION_REVOKED, MAX_MOVE_RATE, MOVE_BATCH, MoveError, MoveSpec, MoveStatus, MoveTask,
    is_move_task_handle, move_budget, move_rate,
};

/// Lock the mover takes on a source message while it moves it.
const MOVE_LOCK_MS: u64 = 60_000;
/// How long a runner's heartbeat holds its task (of the broker's clock): renewed before
/// every batch (at least once a second), so a task whose heartbeat ran out has lost its
/// runner and another node resumes it.
pub const MOVE_HEARTBEAT: Duration = Duration::from_secs(30);
/// Orphaned tasks one look claims.
const CLAIM_BATCH: u32 = 10;

/// The mover: SQS message move tasks over the broker's [`Context`], and the tasks this
/// node runs (see the module docs for what it holds and why).
pub(crate) struct Mover {
    /// The store, clock, metrics, node id and audit log.
    ctx: Context,
    /// The tasks this node runs: a cancel asked here stops its task at once (a cancel
    /// asked elsewhere is seen at the task's next batch).
    running: Mutex<HashMap<String, CancellationToken>>,
    /// The runners of this node, so that shutdown waits until they let their tasks go.
    runners: TaskTracker,
    /// Counts what the runners of this node wrote: one more after every heartbeat (with
    /// the progress) and after every run's end (written, let go, or lost). What waits for a
    /// task's progress waits on it ([`Broker::move_changes`](crate::Broker::move_changes)).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Mover {
    /// A mover over `ctx`, running nothing yet.
    pub(crate) fn new(ctx: Context) -> Mover {
        Mover {
            ctx,
            running: Mutex::default(),
            runners: TaskTracker::new(),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// A runner of this node wrote (or stopped): the signal of [`Mover::changes`].
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, CancellationToken>) -> T) -> T {
        // A panic while holding the lock leaves a consistent map (single inserts/removes).
        let mut g = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    /// This node's id: the runner name of the tasks it runs.
    fn node(&self) -> &str {
        &self.ctx.node_id
    }
}

/// How a task's loop stopped.
enum Stop {
    /// The source had nothing more to move.
    Done,
    /// A cancel was asked (here, or seen in the store).
    Cancelled,
    /// The broker shuts down: the task is let go for another node to resume.
    ShutDown,
    /// Another node runs the task now (or it ended): nothing more is written.
    Lost,
}

fn heartbeat_ms() -> u64 {
    u64::try_from(MOVE_HEARTBEAT.as_millis()).unwrap_or(u64::MAX)
}

/// `ms` after `now`, saturating.
fn after(now: Timestamp, ms: u64) -> Timestamp {
    now.plus_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}
