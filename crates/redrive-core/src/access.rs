//! The access model: roles, the scopes they are granted on, the operations they permit,
//! and the one pure function that decides.
//!
//! A token carries grants (`role` on a scope). An operation names the role it needs and
//! the entity it acts on; [`permits`] answers. Interfaces (the native API, the SQS
//! endpoint, the CLI through the API) map each request onto one [`Operation`] and ask
//! here, so the table below is the only place a permission is written down.
//!
//! | role | may |
//! | --- | --- |
//! | `producer` | send, publish, cancel its scheduled messages, cancel or supersede its intents (on the entities it may produce to) |
//! | `consumer` | receive, settle, renew locks, sessions |
//! | `operator` | metadata, counts, policies, dead-letter metadata, moves between areas, purges, topics and subscriptions, the idempotency register and effect authorities (read and change), recovery cases (read and work, without payloads) |
//! | `replayer` | resubmit dead letters, start and cancel move tasks (admit and run replays, a case's replay too), read the idempotency register |
//! | `payload-reader` | read payload bytes: peek, dead letters with their bodies, a case's payload |
//! | `admin` | everything, on every entity: tokens and the audit log too |
//!
//! Receiving from a dead-letter store hands out payloads, so it needs `consumer` *and*
//! `payload-reader` on the entity. An import of dead letters writes bytes that a replay
//! delivers to the queue, so it needs `operator` *and* `producer` there. Acts that lead
//! to deliveries ask for the role of the delivery beside their own (the broker checks
//! them once it knows what the act does): turning on or changing automatic replay and
//! declaring a type idempotent need `replayer` (on the entity, or unscoped for a type,
//! see [`EVERY_ENTITY`]); a case's isolated test that sends needs `producer` on its
//! destination.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A role a token can be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Send and publish.
    Producer,
    /// Receive, settle, renew.
    Consumer,
    /// Metadata, counts, policies, dead-letter metadata, cases, replay plans.
    Operator,
    /// Admit and run replays.
    Replayer,
    /// Read payload bytes of messages and dead letters.
    PayloadReader,
    /// Everything, everywhere: tokens and the audit log.
    Admin,
}

impl Role {
    /// Every role, in the order of the table above.
    pub const ALL: [Role; 6] = [
        Role::Producer,
        Role::Consumer,
        Role::Operator,
        Role::Replayer,
        Role::PayloadReader,
        Role::Admin,
    ];

    /// The role's name on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
            Role::Operator => "operator",
            Role::Replayer => "replayer",
            Role::PayloadReader => "payload-reader",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Self, AccessError> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| AccessError::UnknownRole(s.to_owned()))
    }
}

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Every entity.
    All,
    /// One queue or topic, by exact name.
    Entity(String),
    /// Every entity whose name starts with the prefix.
    Prefix(String),
}

impl Scope {
    /// Whether the scope covers `entity`.
    pub fn covers(&self, entity: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Entity(e) => e == entity,
            Scope::Prefix(p) => entity.starts_with(p.as_str()),
        }
    }
}

impl Scope {
    /// Whether every entity `other` covers is covered by this scope too.
    pub fn includes(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::All, _) => true,
            (_, Scope::All) => false,
            (Scope::Entity(a), Scope::Entity(b)) => a == b,
            (Scope::Entity(_), Scope::Prefix(_)) => false,
            (Scope::Prefix(p), Scope::Entity(e) | Scope::Prefix(e)) => e.starts_with(p.as_str()),
        }
    }
}

impl fmt::Display for Scope {
    /// `*` (every entity), `name`, or `prefix*`: the scope part of a grant's text form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("*"),
            Scope::Entity(e) => f.write_str(e),
            Scope::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

impl FromStr for Scope {
    type Err = AccessError;
    /// The scope part of a grant's text form (what [`Scope`]'s `Display` writes).
    fn from_str(s: &str) -> Result<Self, AccessError> {
        Ok(format!("producer:{s}").parse::<Grant>()?.scope)
    }
}

/// The entity an operation over every entity at once names (counts of every queue's
/// cases, a register entry for a type, which applies everywhere): no entity has this name
/// and no scoped grant covers it, so only an unscoped grant permits it.
pub const EVERY_ENTITY: &str = "*";

/// Longest entity name or prefix a grant may name (entity names are at most 260).
const MAX_SCOPE_LEN: usize = 260;

/// A role on a scope. Text form: `role` (every entity), `role:name` (one entity),
/// `role:prefix*` (every entity whose name starts with `prefix`); `role:*` is `role`.
/// `admin` is granted on every entity only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    /// The role.
    pub role: Role,
    /// Where it applies.
    pub scope: Scope,
}

impl Grant {
    /// `role` on every entity.
    pub fn all(role: Role) -> Self {
        Grant {
            role,
            scope: Scope::All,
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            Scope::All => write!(f, "{}", self.role),
            Scope::Entity(e) => write!(f, "{}:{e}", self.role),
            Scope::Prefix(p) => write!(f, "{}:{p}*", self.role),
        }
    }
}

impl FromStr for Grant {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Self, AccessError> {
        let (role, scope) = match s.split_once(':') {
            None => (s, None),
            Some((r, sc)) => (r, Some(sc)),
        };
        let role: Role = role.parse()?;
        let scope = match scope {
            None | Some("*") => Scope::All,
            Some(sc) => {
                if sc.is_empty() || sc.len() > MAX_SCOPE_LEN {
                    return Err(AccessError::BadScope(s.to_owned()));
                }
                let (name, prefix) = match sc.strip_suffix('*') {
                    Some(p) => (p, true),
                    None => (sc, false),
                };
                let ok = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                if !ok {
                    return Err(AccessError::BadScope(s.to_owned()));
                }
                if prefix {
                    Scope::Prefix(name.to_owned())
                } else {
                    Scope::Entity(name.to_owned())
                }
            }
        };
        if role == Role::Admin && scope != Scope::All {
            return Err(AccessError::ScopedAdmin);
        }
        Ok(Grant { role, scope })
    }
}

impl Serialize for Grant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Grant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A grant, role or scope that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// Not one of the roles.
    #[error(
        "unknown role {0:?} (expected producer, consumer, operator, replayer, payload-reader or admin)"
    )]
    UnknownRole(String),
    /// A scope that is empty, too long, or not an entity name (with an optional `*`).
    #[error("invalid grant {0:?}: the scope must be an entity name or a name prefix ending in *")]
    BadScope(String),
    /// `admin` is granted on every entity only.
    #[error("admin is granted on every entity only (write `admin`)")]
    ScopedAdmin,
}

/// Every operation the interfaces perform, each needing one role (or, for a dead-letter
/// receive, two). The entity an operation acts on is passed to [`permits`] beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Send messages to a queue.
    Send,
    /// Publish events to a topic.
    Publish,
    /// Cancel a scheduled message.
    CancelScheduled,
    /// Receive with a lock (messages, deferred messages).
    Receive,
    /// Complete, abandon, defer, dead-letter, renew.
    Settle,
    /// Accept, renew, release a session.
    Session,
    /// Peek (browse) messages: their payloads.
    Peek,
    /// Read an entity's metadata, policy and counts; list entities.
    ReadMetadata,
    /// Create a queue or topic.
    CreateEntity,
    /// Change a policy (queue attributes, subscription filter or state, tags).
    UpdatePolicy,
    /// Delete a queue, topic or subscription.
    DeleteEntity,
    /// Remove every message of a queue.
    Purge,
    /// Create a subscription.
    CreateSubscription,
    /// Dead-letter records without their payloads.
    ReadDeadLetterMetadata,
    /// Dead-letter records with their payloads (show with body, export).
    ReadDeadLetterPayload,
    /// Peek-lock receive and settle from a dead-letter store (payloads handed out).
    ConsumeDeadLetters,
    /// Move a record between the areas of a dead-letter store.
    MoveDeadLetter,
    /// Resubmit a dead letter to its source, start or cancel a move task.
    Replay,
    /// List move tasks; read the automatic replay status of entities.
    ReadReplays,
    /// Server metrics of every entity.
    ReadMetrics,
    /// Create, list, revoke tokens.
    ManageTokens,
    /// Read and verify the audit log.
    ReadAudit,
    /// Read the idempotency register (operator or replayer: who plans replays reads it).
    ReadRegister,
    /// Set or delete an idempotency register entry.
    ManageRegister,
    /// Recovery cases of an entity's dead letters: list, search, count, show (metadata
    /// only, never the payload).
    ReadCases,
    /// Work a case: claim, renew, release, note, diagnose, correct, transform, test,
    /// reconcile, review, close.
    WorkCases,
    /// Read a case's payload bytes (the exact dead-lettered bytes or a transformation).
    ReadCasePayload,
    /// Admit one replay of a case.
    ReplayCase,
    /// Cancel or supersede an intent (its producer).
    UpdateIntent,
    /// Import dead letters from elsewhere: an operator's act that writes bytes nobody sent
    /// to the queue, which a replay (automatic, a resubmit, a case's) then delivers to it,
    /// so it also needs what a send needs.
    ImportDeadLetters,
}

impl Operation {
    /// Every operation, in the order of the enum. A new variant makes the tests fail to
    /// compile (an exhaustive match gives each operation its place here) until it is listed.
    pub const ALL: &'static [Operation] = &[
        Operation::Send,
        Operation::Publish,
        Operation::CancelScheduled,
        Operation::Receive,
        Operation::Settle,
        Operation::Session,
        Operation::Peek,
        Operation::ReadMetadata,
        Operation::CreateEntity,
        Operation::UpdatePolicy,
        Operation::DeleteEntity,
        Operation::Purge,
        Operation::CreateSubscription,
        Operation::ReadDeadLetterMetadata,
        Operation::ReadDeadLetterPayload,
        Operation::ConsumeDeadLetters,
        Operation::MoveDeadLetter,
        Operation::Replay,
        Operation::ReadReplays,
        Operation::ReadMetrics,
        Operation::ManageTokens,
        Operation::ReadAudit,
        Operation::ReadRegister,
        Operation::ManageRegister,
        Operation::ReadCases,
        Operation::WorkCases,
        Operation::ReadCasePayload,
        Operation::ReplayCase,
        Operation::UpdateIntent,
        Operation::ImportDeadLetters,
    ];

    /// The roles the operation needs on its entity: all of them, or one of them when
    /// [`Operation::needs_any`]. `admin` permits everything whatever this says.
    pub fn requires(self) -> &'static [Role] {
        use Operation::*;
        match self {
            Send | Publish | CancelScheduled | UpdateIntent => &[Role::Producer],
            Receive | Settle | Session => &[Role::Consumer],
            Peek | ReadDeadLetterPayload | ReadCasePayload => &[Role::PayloadReader],
            ConsumeDeadLetters => &[Role::Consumer, Role::PayloadReader],
            ReadMetadata
            | CreateEntity
            | UpdatePolicy
            | DeleteEntity
            | Purge
            | CreateSubscription
            | ReadDeadLetterMetadata
            | MoveDeadLetter
            | ReadReplays
            | ReadMetrics
            | ManageRegister
            | ReadCases
            | WorkCases => &[Role::Operator],
            ReadRegister => &[Role::Operator, Role::Replayer],
            Replay | ReplayCase => &[Role::Replayer],
            ManageTokens | ReadAudit => &[Role::Admin],
            ImportDeadLetters => &[Role::Operator, Role::Producer],
        }
    }

    /// Whether any one of [`Operation::requires`] suffices (reading the register:
    /// operator or replayer) rather than all of them.
    pub fn needs_any(self) -> bool {
        matches!(self, Operation::ReadRegister)
    }

    /// Whether the operation acts on every entity at once (metrics, tokens, the audit
    /// log, the idempotency register, whose types apply to every entity): only an
    /// unscoped grant permits it.
    pub fn is_global(self) -> bool {
        matches!(
            self,
            Operation::ReadMetrics
                | Operation::ManageTokens
                | Operation::ReadAudit
                | Operation::ReadRegister
                | Operation::ManageRegister
        )
    }
}

/// Whether `grants` permit `op` on `entity` (`None` for operations that act on no single
/// entity, such as listing: then any grant of the needed roles permits it, and the
/// caller filters what it returns with [`visible`]).
pub fn permits(grants: &[Grant], op: Operation, entity: Option<&str>) -> bool {
    if grants.iter().any(|g| g.role == Role::Admin) {
        return true;
    }
    let held = |role: &Role| {
        grants.iter().any(|g| {
            g.role == *role
                && if op.is_global() {
                    g.scope == Scope::All
                } else {
                    entity.is_none_or(|e| g.scope.covers(e))
                }
        })
    };
    if op.needs_any() {
        op.requires().iter().any(held)
    } else {
        op.requires().iter().all(held)
    }
}

/// Whether `grants` let the holder see that `entity` exists (any grant covering it): what
/// a listing returns.
pub fn visible(grants: &[Grant], entity: &str) -> bool {
    grants
        .iter()
        .any(|g| g.role == Role::Admin || g.scope.covers(entity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Grant {
        s.parse().expect("valid grant")
    }

    #[test]
    fn grants_parse_and_print_round_trip() {
        for s in [
            "producer",
            "consumer:orders",
            "operator:orders.*",
            "payload-reader:a-b_c.d",
            "admin",
        ] {
            assert_eq!(g(s).to_string(), s);
        }
        assert_eq!(g("replayer:*"), Grant::all(Role::Replayer));
        assert_eq!(g("operator:orders*").scope, Scope::Prefix("orders".into()));
    }

    #[test]
    fn bad_grants_are_refused() {
        assert!(matches!(
            "owner".parse::<Grant>(),
            Err(AccessError::UnknownRole(_))
        ));
        for s in ["producer:", "producer:a b", "producer:*x", "consumer:a/b"] {
            assert!(
                matches!(s.parse::<Grant>(), Err(AccessError::BadScope(_))),
                "{s}"
            );
        }
        let long = format!("producer:{}", "a".repeat(MAX_SCOPE_LEN + 1));
        assert!(long.parse::<Grant>().is_err());
        assert_eq!(
            "admin:orders".parse::<Grant>(),
            Err(AccessError::ScopedAdmin)
        );
    }

    #[test]
    fn scopes_print_and_parse_round_trip_and_every_entity_needs_an_unscoped_grant() {
        for s in ["*", "orders", "orders.*"] {
            assert_eq!(s.parse::<Scope>().unwrap().to_string(), s);
        }
        assert!("a b".parse::<Scope>().is_err());
        assert!(!Scope::Prefix("o".into()).covers(EVERY_ENTITY));
        assert!(!Scope::Entity("o".into()).covers(EVERY_ENTITY));
        assert!(Scope::All.covers(EVERY_ENTITY));
        assert!(!permits(
            &[g("replayer:o*")],
            Operation::Replay,
            Some(EVERY_ENTITY)
        ));
        assert!(permits(
            &[g("replayer")],
            Operation::Replay,
            Some(EVERY_ENTITY)
        ));
        let sc = |s: &str| s.parse::<Scope>().unwrap();
        assert!(sc("*").includes(&sc("orders*")));
        assert!(sc("ord*").includes(&sc("orders")));
        assert!(sc("ord*").includes(&sc("orders*")));
        assert!(!sc("orders*").includes(&sc("ord*")));
        assert!(!sc("orders").includes(&sc("orders*")));
        assert!(!sc("orders").includes(&sc("*")));
        assert!(sc("orders").includes(&sc("orders")));
        assert!(!sc("orders").includes(&sc("ordersX")));
    }

    #[test]
    fn an_import_needs_operator_and_producer_on_the_queue() {
        use Operation::ImportDeadLetters as I;
        assert!(!permits(&[g("operator")], I, Some("q")));
        assert!(!permits(&[g("producer:q")], I, Some("q")));
        assert!(permits(&[g("operator"), g("producer:q")], I, Some("q")));
        assert!(!permits(&[g("operator"), g("producer:q")], I, Some("r")));
    }

    #[test]
    fn scopes_cover_exact_names_and_prefixes() {
        let orders = [g("producer:orders")];
        assert!(permits(&orders, Operation::Send, Some("orders")));
        assert!(!permits(&orders, Operation::Send, Some("orders2")));
        let pre = [g("producer:orders*")];
        assert!(permits(&pre, Operation::Send, Some("orders2")));
        assert!(!permits(&pre, Operation::Send, Some("order")));
    }

    #[test]
    fn each_role_permits_its_operations_only() {
        use Operation::*;
        for role in Role::ALL {
            let grants = [Grant::all(role)];
            for &op in Operation::ALL {
                let expected = role == Role::Admin
                    || (op != ConsumeDeadLetters && op.requires() == [role])
                    || (op.needs_any() && op.requires().contains(&role));
                assert_eq!(
                    permits(&grants, op, Some("q")),
                    expected,
                    "{role} on {op:?}"
                );
            }
        }
        let both = [g("consumer:q"), g("payload-reader:q")];
        assert!(permits(&both, ConsumeDeadLetters, Some("q")));
        assert!(!permits(&both, ConsumeDeadLetters, Some("r")));
        // The register: operator or replayer reads it, only operator changes it, and
        // only on every entity.
        assert!(permits(&[g("replayer")], ReadRegister, None));
        assert!(!permits(&[g("replayer")], ManageRegister, None));
        assert!(permits(&[g("operator")], ManageRegister, None));
        assert!(!permits(&[g("operator:q")], ReadRegister, None));
        assert!(!permits(
            &[g("producer"), g("consumer")],
            ReadRegister,
            None
        ));
    }

    /// The place of each operation in [`Operation::ALL`], by an exhaustive match: a new
    /// variant does not compile until it has an arm here, which is the reminder to list it
    /// in `ALL` at that place.
    fn place(op: Operation) -> usize {
        use Operation::*;
        match op {
            Send => 0,
            Publish => 1,
            CancelScheduled => 2,
            Receive => 3,
            Settle => 4,
            Session => 5,
            Peek => 6,
            ReadMetadata => 7,
            CreateEntity => 8,
            UpdatePolicy => 9,
            DeleteEntity => 10,
            Purge => 11,
            CreateSubscription => 12,
            ReadDeadLetterMetadata => 13,
            ReadDeadLetterPayload => 14,
            ConsumeDeadLetters => 15,
            MoveDeadLetter => 16,
            Replay => 17,
            ReadReplays => 18,
            ReadMetrics => 19,
            ManageTokens => 20,
            ReadAudit => 21,
            ReadRegister => 22,
            ManageRegister => 23,
            ReadCases => 24,
            WorkCases => 25,
            ReadCasePayload => 26,
            ReplayCase => 27,
            UpdateIntent => 28,
            ImportDeadLetters => 29,
        }
    }

    #[test]
    fn case_work_is_the_operators_its_payload_the_payload_readers_its_replay_the_replayers() {
        use Operation::*;
        let op = [g("operator:orders")];
        assert!(permits(&op, ReadCases, Some("orders")));
        assert!(permits(&op, WorkCases, Some("orders")));
        assert!(!permits(&op, WorkCases, Some("billing")));
        assert!(!permits(&op, ReadCasePayload, Some("orders")));
        assert!(!permits(&op, ReplayCase, Some("orders")));
        assert!(permits(
            &[g("payload-reader:orders")],
            ReadCasePayload,
            Some("orders")
        ));
        assert!(permits(&[g("replayer:orders")], ReplayCase, Some("orders")));
        assert!(!permits(&[g("replayer:orders")], WorkCases, Some("orders")));
        assert!(permits(
            &[g("producer:orders")],
            UpdateIntent,
            Some("orders")
        ));
        assert!(!permits(
            &[g("consumer:orders")],
            UpdateIntent,
            Some("orders")
        ));
    }

    #[test]
    fn all_lists_every_operation_once_in_order() {
        for (i, &op) in Operation::ALL.iter().enumerate() {
            assert_eq!(place(op), i, "{op:?} is at {i} in Operation::ALL");
        }
    }

    #[test]
    fn global_operations_need_an_unscoped_grant() {
        assert!(!permits(
            &[g("operator:q")],
            Operation::ReadMetrics,
            Some("q")
        ));
        assert!(permits(&[g("operator")], Operation::ReadMetrics, None));
    }

    #[test]
    fn listing_shows_only_covered_entities() {
        let grants = [g("consumer:a*")];
        assert!(visible(&grants, "ab"));
        assert!(!visible(&grants, "b"));
        assert!(visible(&[g("admin")], "b"));
        assert!(!visible(&[], "b"));
    }
}
