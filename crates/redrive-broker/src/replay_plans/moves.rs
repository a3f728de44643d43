//! SQS message move tasks as replay plans: a task (`crate::mover`) is stored as a plan of
//! kind `sqs_move`, so the plans' surfaces show it beside the `cases` plans — its source,
//! its destination (or each message back to its source), its items/s budget, how many it
//! moved of how many, its status and its failure. The mover runs it, not the plan runner:
//! the owner's `start`, `pause` and `resume` do not apply to it (`plan_state`), and its
//! `cancel` is `CancelMessageMoveTask`'s (audited `move_task.cancel`).

use redrive_store::{PlanStatus, ReplayPlanRecord, StoreError};

use super::run::{PlanSpec, PlanView, RunState};
use crate::mover::{MoveError, move_budget, move_rate};
use crate::{Actor, Broker, BrokerError, BrokerResult};

/// An owner's change of a plan, as the plans' interfaces ask it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanAction {
    /// `start`.
    Start,
    /// `pause`.
    Pause,
    /// `resume`.
    Resume,
    /// `cancel`.
    Cancel,
}

impl PlanAction {
    /// Its name (`start`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanAction::Start => "start",
            PlanAction::Pause => "pause",
            PlanAction::Resume => "resume",
            PlanAction::Cancel => "cancel",
        }
    }
}

/// What an `sqs_move` plan's view adds: the task in its SQS terms.
#[derive(Debug, Clone, PartialEq)]
pub struct MovePlanView {
    /// The rate the task asked for (`None`: none named, paced at
    /// [`MAX_MOVE_RATE`](crate::MAX_MOVE_RATE)).
    pub max_per_second: Option<u32>,
    /// The items/s budget it is paced by.
    pub items_per_s: f64,
    /// Where the messages go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed (with status `stopped`).
    pub failure_reason: Option<String>,
}

/// The view of an `sqs_move` plan: its budget is the mover's (items/s only), its progress
/// the task's (items: the messages to move; admitted and completed: those moved).
pub(crate) fn move_plan_view(plan: ReplayPlanRecord) -> BrokerResult<PlanView> {
    let task = plan.move_part()?;
    let budget = move_budget(task.max_per_second);
    let spec = PlanSpec {
        reasons: Vec::new(),
        types: Vec::new(),
        from_ms: None,
        to_ms: None,
        case_ids: Vec::new(),
        group: None,
        signature: None,
        budget: budget.clone(),
        correction: None,
        lease_ms: 0,
        observe_ms: 0,
        sessions: Default::default(),
    };
    let run = RunState {
        admitted: task.moved,
        completed: task.moved,
        started_ms: Some(plan.created_at.as_millis()),
        stop_detail: task.failure_reason.clone(),
        ..RunState::default()
    };
    let active = plan.m.status.is_active();
    let waiting = if active {
        task.to_move.saturating_sub(task.moved)
    } else {
        0
    };
    let eta_ms = budget.lower_bound_ms(waiting, 0);
    Ok(PlanView {
        sqs_move: Some(MovePlanView {
            max_per_second: task.max_per_second,
            items_per_s: f64::from(move_rate(task.max_per_second)),
            destination: task.destination.clone(),
            moved: task.moved,
            to_move: task.to_move,
            failure_reason: task.failure_reason.clone(),
        }),
        plan,
        spec,
        run,
        waiting,
        eta_ms,
    })
}

impl Broker {
    /// An owner's change of an `sqs_move` plan: `cancel` asks its task to stop, as
    /// `CancelMessageMoveTask` does (audited `move_task.cancel`; a task that has ended is
    /// `plan_state`); `start`, `pause` and `resume` are refused with `plan_state` (the
    /// mover runs it; audited as the plan's change, refused). Answers the plan as it is
    /// now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %plan.id, queue = %plan.queue))]
    pub async fn change_move_plan(
        &self,
        plan: &ReplayPlanRecord,
        action: PlanAction,
        actor: &Actor,
    ) -> BrokerResult<PlanView> {
        if action != PlanAction::Cancel {
            let refused: BrokerResult<()> = Err(BrokerError::PlanConflict {
                code: "plan_state".to_owned(),
                why: format!(
                    "plan {} is an SQS message move task ({}): it runs until it ends or is \
                     cancelled; {} does not apply to it",
                    plan.id,
                    plan.m.status,
                    action.as_str()
                ),
            });
            self.audited(
                actor,
                &format!("replay.plan_{}", action.as_str()),
                Some(&plan.queue),
                vec![plan.id.clone()],
                refused,
            )
            .await?;
        }
        match self.cancel_move_task(&plan.id, actor).await {
            Ok(_) => {}
            Err(MoveError::NotRunning(_)) => {
                let why = match plan.m.status {
                    PlanStatus::Cancelling => format!("plan {} is being cancelled", plan.id),
                    s => format!("plan {} has ended ({s})", plan.id),
                };
                return Err(BrokerError::PlanConflict {
                    code: "plan_state".to_owned(),
                    why,
                });
            }
            Err(MoveError::NotFound(_)) => {
                return Err(StoreError::ReplayPlanNotFound {
                    id: plan.id.clone(),
                }
                .into());
            }
            Err(MoveError::AlreadyRunning(q)) => {
                return Err(BrokerError::PlanConflict {
                    code: "plan_state".to_owned(),
                    why: format!("a message move task is already running for queue {q:?}"),
                });
            }
            Err(MoveError::Broker(e)) => return Err(e),
        }
        self.get_plan(&plan.id).await
    }
}
