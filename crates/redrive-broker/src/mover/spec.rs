//! What a move task is: what to move where and how fast ([`MoveSpec`]) and its checks,
//! its budget, its status and view as reported, the refusals of its operations, and the
//! shape of its handle. Pure: no store, no clock.

use redrive_core::Timestamp;
use redrive_core::plan::{Budget, Dependency};
use redrive_store::{MovePart, MoveTaskStatus, ReplayPlanRecord};

use crate::{Actor, BrokerError, BrokerResult};

/// Highest move rate a task may ask for (messages per second).
pub const MAX_MOVE_RATE: u32 = 500;
/// Most messages received from the source at a time.
pub const MOVE_BATCH: u32 = 10;

/// The items/s budget a task is paced by: its `max_per_second`, or [`MAX_MOVE_RATE`].
pub fn move_rate(max_per_second: Option<u32>) -> u32 {
    max_per_second
        .unwrap_or(MAX_MOVE_RATE)
        .clamp(1, MAX_MOVE_RATE)
}

/// The plan budget a task's pacer holds it to: items/s only ([`move_rate`]); bytes
/// unbounded, a batch in flight at a time, and no dependency reservation (a move reads
/// and writes this broker's own queues).
pub fn move_budget(max_per_second: Option<u32>) -> Budget {
    Budget {
        items_per_s: f64::from(move_rate(max_per_second)),
        bytes_per_s: u64::MAX,
        max_concurrent: MOVE_BATCH,
        window: MOVE_BATCH,
        dependency: Dependency {
            name: "none".to_owned(),
            probe_url: String::new(),
            max_error_rate: 1.0,
            max_latency_ms: u64::MAX,
        },
    }
}

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
    /// `authorization_revoked` when its token is revoked. A listed task's owner carries
    /// its id and name only (grants are read again from its token when the task resumes).
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
    /// Cancel asked; the task stops at its next batch.
    Cancelling,
    /// Stopped by a cancel.
    Cancelled,
    /// Stopped by an error (see the failure reason).
    Failed,
}

impl MoveStatus {
    /// The SQS name (`RUNNING`, …).
    pub fn as_str(self) -> &'static str {
        MoveTaskStatus::from(self).as_str()
    }
}

impl From<MoveTaskStatus> for MoveStatus {
    fn from(s: MoveTaskStatus) -> Self {
        match s {
            MoveTaskStatus::Running => MoveStatus::Running,
            MoveTaskStatus::Completed => MoveStatus::Completed,
            MoveTaskStatus::Cancelling => MoveStatus::Cancelling,
            MoveTaskStatus::Cancelled => MoveStatus::Cancelled,
            MoveTaskStatus::Failed => MoveStatus::Failed,
        }
    }
}

impl From<MoveStatus> for MoveTaskStatus {
    fn from(s: MoveStatus) -> Self {
        match s {
            MoveStatus::Running => MoveTaskStatus::Running,
            MoveStatus::Completed => MoveTaskStatus::Completed,
            MoveStatus::Cancelling => MoveTaskStatus::Cancelling,
            MoveStatus::Cancelled => MoveTaskStatus::Cancelled,
            MoveStatus::Failed => MoveTaskStatus::Failed,
        }
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

/// A task as the mover holds it: its plan, and the plan's move-specific part.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) plan: ReplayPlanRecord,
    pub(super) part: MovePart,
}

impl Held {
    /// The task a plan of kind `sqs_move` stores.
    pub(super) fn of(plan: ReplayPlanRecord) -> BrokerResult<Held> {
        let part = plan.move_part()?;
        Ok(Held { plan, part })
    }
}

impl From<&Held> for MoveTask {
    fn from(h: &Held) -> Self {
        let (p, r) = (&h.plan, &h.part);
        MoveTask {
            handle: p.id.clone(),
            spec: MoveSpec {
                source: p.queue.clone(),
                destination: r.destination.clone(),
                max_per_second: r.max_per_second,
                owner: Actor {
                    id: p.owner_id.clone(),
                    name: p.owner_name.clone(),
                    grants: Vec::new(),
                    client: None,
                },
            },
            status: r.status.into(),
            moved: r.moved,
            to_move: r.to_move,
            failure: r.failure_reason.clone(),
            started_at: p.created_at,
        }
    }
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

/// A spec's rate: within 1 to [`MAX_MOVE_RATE`] when it names one (checked first).
pub(super) fn check_rate(spec: &MoveSpec) -> Result<(), BrokerError> {
    match spec.max_per_second {
        Some(r) if !(1..=MAX_MOVE_RATE).contains(&r) => Err(BrokerError::invalid(
            "max_number_of_messages_per_second",
            format!("must be between 1 and {MAX_MOVE_RATE}"),
        )),
        _ => Ok(()),
    }
}

/// A spec's destination, once its source is known to exist: another queue than the
/// source.
pub(super) fn check_destination(spec: &MoveSpec) -> Result<(), BrokerError> {
    if spec.destination.as_deref() == Some(spec.source.as_str()) {
        return Err(BrokerError::invalid(
            "destination",
            "must be another queue than the source",
        ));
    }
    Ok(())
}

/// A new task's handle: [`MOVE_HANDLE_PREFIX`] and 32 random lowercase hex digits.
pub(super) fn new_handle() -> String {
    format!(
        "{MOVE_HANDLE_PREFIX}{:016x}{:016x}",
        fastrand::u64(..),
        fastrand::u64(..)
    )
}
