//! The storage seam of redrive: the [`Store`] trait, its parameter and row types, and
//! [`StoreError`].
//!
//! Each method is one broker operation that the backend makes atomic (one transaction),
//! not a row primitive: race handling lives in one place per backend. Backends decide
//! every state change with the pure functions of `redrive_core::machine`, so no backend
//! re-implements a rule. Time is always a parameter (`now`), read by the caller from the
//! injected clock; no backend reads a clock of its own.
//!
//! This trait is an internal seam, not a public extension point: it changes whenever the
//! broker needs it to, and every change is exercised by `redrive-store-conformance`.
//!
//! Writes that the backend acknowledges are durable (committed and synced). Backends are
//! free to share one commit among concurrent calls (group commit);
//! [`Store::apply_transaction`] applies a group of operations across queues in one
//! transaction on top of the same mechanism.
//!
//! What the backends do alike between reading a row and writing one lives once, in
//! [`skeleton`]; each backend keeps only its SQL and its transactions.

mod access;
mod case;
pub mod dead_letter;
mod error;
pub mod failure;
mod move_task;
mod overview;
mod register;
mod replay_plan;
pub mod skeleton;
pub mod transaction;
mod types;

pub use access::*;
pub use case::*;
pub use error::{StoreError, StoreErrorKind, StoreResult};
pub use move_task::*;
pub use overview::*;
pub use register::*;
pub use replay_plan::*;
pub use transaction::{TransactionOutcome, TransactionRefusal, TxApplied, TxOperation};
pub use types::*;

use async_trait::async_trait;
use redrive_core::register::{RegisterEntry, RegisterKey};
use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};
use skeleton::Head;

/// One version of a queue's policy, as it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyVersionRecord {
    /// The policy version (1 at creation, +1 on every update).
    pub version: u64,
    /// The policy in force from this version on.
    pub policy: QueuePolicy,
    /// When this version was written.
    pub changed_at: Timestamp,
}

impl PolicyVersionRecord {
    /// A row of `queue_policy_versions` selected as `version, policy, changed_at`.
    pub fn decode(c: &impl skeleton::columns::Columns) -> StoreResult<PolicyVersionRecord> {
        Ok(PolicyVersionRecord {
            version: c.unsigned(0, "queue_policy_versions.version")?,
            policy: c.json(1, "queue_policy_versions.policy")?,
            changed_at: c.time(2)?,
        })
    }
}

/// The largest page of [`Store::list_policy_versions`].
pub const MAX_POLICY_VERSION_PAGE: u32 = 100;

/// The storage backend. Object-safe: the broker holds an `Arc<dyn Store>`.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What this backend can and cannot do, for the conformance suite and the server.
    fn capabilities(&self) -> Capabilities;

    /// The backend's name (`sqlite`, `postgres`), for health reports.
    fn backend_name(&self) -> &'static str;

    /// A cheap round trip proving the store answers now: what `/healthz` asks. `Ok` when
    /// it does; otherwise the error an operation would get (`Unavailable` while the
    /// database cannot be reached, `Poisoned` after a failed commit).
    async fn ping(&self) -> StoreResult<()>;

    // ---- queues -------------------------------------------------------------------

    /// Creates a queue at policy version 1. `QueueExists` if the name is taken.
    async fn create_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        now: Timestamp,
    ) -> StoreResult<QueueRecord>;

    /// Replaces a queue's policy and bumps its version. With `expected_version`, refuses
    /// with `VersionConflict` if the stored version differs.
    async fn update_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> StoreResult<QueueRecord>;

    /// One queue.
    async fn get_queue(&self, name: &EntityName) -> StoreResult<QueueRecord>;

    /// Every queue, by name.
    async fn list_queues(&self) -> StoreResult<Vec<QueueRecord>>;

    /// Deletes a queue with its messages, sessions and dead letters. Without `force`,
    /// refuses with `QueueNotEmpty` when it holds messages or live dead letters.
    async fn delete_queue(&self, name: &EntityName, force: bool) -> StoreResult<()>;

    /// Live counts of one queue at `now`. A message whose lock ran out by `now` counts
    /// where a browse at `now` shows it (never as `locked`), whether or not the sweep has
    /// written its release yet.
    async fn queue_counts(&self, name: &EntityName, now: Timestamp) -> StoreResult<QueueCounts>;

    /// A page of a queue's policy history, newest version first: the versions below
    /// `before` (every version when `None`), at most `limit` of them. Each
    /// [`Store::create_queue`] and [`Store::update_queue`] writes its version in the same
    /// transaction; [`Store::delete_queue`] removes them. `QueueNotFound` for an unknown
    /// queue.
    async fn list_policy_versions(
        &self,
        queue: &EntityName,
        before: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<PolicyVersionRecord>>;

    // ---- messages -----------------------------------------------------------------

    /// Stores a batch atomically (all or none), assigning sequence numbers in order. A
    /// message id already seen inside the queue's duplicate-detection window is accepted
    /// but not stored again; its result carries the original sequence number. Refuses with
    /// `SessionRequired` / `SessionNotAllowed` per the queue's policy.
    async fn enqueue(
        &self,
        queue: &EntityName,
        messages: Vec<NewMessage>,
        now: Timestamp,
    ) -> StoreResult<Vec<Enqueued>>;

    /// Removes a message that is still scheduled (Available, never delivered, visible
    /// later than `now`). `MessageNotFound` otherwise.
    async fn cancel_scheduled(
        &self,
        queue: &EntityName,
        sequence: i64,
        now: Timestamp,
    ) -> StoreResult<()>;

    /// Removes every message of the queue whatever its state — available, scheduled,
    /// locked, deferred — in one transaction (SQS `PurgeQueue`: in-flight messages too).
    /// A lock token of a removed message settles no more (`LockLost`). Dead-letter records
    /// are not messages and stay; the queue's session locks are released; its
    /// duplicate-detection entries stay. Answers how many messages were removed.
    /// `QueueNotFound`.
    async fn purge_messages(&self, queue: &EntityName, now: Timestamp) -> StoreResult<u64>;

    /// Peek-lock receive of up to `max` visible messages, oldest first. Expired locks and
    /// expired messages of the queue met on the way are settled first (see `Effects`).
    /// With a session, takes only that session's messages, in sequence order, and none
    /// while an earlier one of the session is locked.
    async fn receive(&self, params: ReceiveParams) -> StoreResult<ReceiveOutcome>;

    /// Receives deferred messages by sequence number (locking them). Unknown or
    /// non-deferred sequence numbers give `MessageNotFound`.
    async fn receive_deferred(
        &self,
        queue: &EntityName,
        sequences: &[i64],
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<ReceiveOutcome>;

    /// Messages from `from_sequence` on, in sequence order, without locking or counting,
    /// each as it stands at `now` ([`skeleton::MessageRow::into_view`]): a lock that ran
    /// out by `now` is shown as its release leaves it, whether or not the sweep has
    /// written that yet.
    async fn peek(
        &self,
        queue: &EntityName,
        from_sequence: i64,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<StoredMessage>>;

    /// Settles each lock token independently; a lost lock fails its own item only (and
    /// changes nothing for it). The whole call is one commit.
    async fn settle(
        &self,
        queue: &EntityName,
        items: Vec<Settlement>,
        now: Timestamp,
    ) -> StoreResult<SettleOutcome>;

    /// Applies a group of operations — sends, settlements, cancels of scheduled messages,
    /// on any queues — in one transaction, in order, each decided as its single
    /// counterpart decides it and seeing what the ones before it wrote (see
    /// [`transaction`]). `Ok(Ok(..))`: every operation was applied, one result each, in
    /// one commit. `Ok(Err(refusal))`: the operation it names was refused (a lost lock, an
    /// unknown queue, a message not scheduled…) and nothing of the group was written.
    /// `Err`: the storage failed; nothing was acknowledged.
    async fn apply_transaction(
        &self,
        operations: Vec<TxOperation>,
        now: Timestamp,
    ) -> StoreResult<Result<TransactionOutcome, TransactionRefusal>>;

    /// The earliest time after `now` at which something may become receivable on the
    /// queue (a scheduled or backed-off message, or a lock running out); long polls sleep
    /// until then at most.
    async fn next_wake(&self, queue: &EntityName, now: Timestamp)
    -> StoreResult<Option<Timestamp>>;

    // ---- sessions -----------------------------------------------------------------

    /// Locks a session: the named one, or the next one that has a visible message and no
    /// live lock. `Ok(None)` when no session is available; `SessionLocked` when the named
    /// one is held by another receiver.
    async fn accept_session(
        &self,
        queue: &EntityName,
        session_id: Option<&str>,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Option<SessionLock>>;

    /// Extends a session lock. `SessionLockLost` if it expired or is not held.
    async fn renew_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<SessionLock>;

    /// Gives a session lock up.
    async fn release_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        now: Timestamp,
    ) -> StoreResult<()>;

    /// A page of the queue's sessions as they stand at `now`, by session id, those after
    /// `after`, at most `limit` (0 or more than [`MAX_SESSION_PAGE`] means
    /// [`MAX_SESSION_PAGE`]). A session is listed while it has messages or a live lock.
    /// Each summary counts its messages as [`Store::queue_counts`] counts a queue's (a
    /// message lock that ran out by `now` counts where a browse shows it) and names its
    /// lock's end while the lock holds; it never carries the lock token. A queue without
    /// sessions answers an empty page. `QueueNotFound`.
    async fn list_sessions(
        &self,
        queue: &EntityName,
        after: Option<&str>,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<SessionSummary>>;

    // ---- background work ----------------------------------------------------------

    /// Applies due lock expiries and message expiries across all queues (at most `limit`
    /// messages), and forgets duplicate-detection entries whose window has passed.
    async fn sweep(&self, now: Timestamp, limit: u32) -> StoreResult<SweepOutcome>;

    // ---- dead letters -------------------------------------------------------------

    /// A page of one queue's dead-letter records, by id, after the cursor: the records,
    /// and the rows of the page this build cannot read ([`UndecodableRecord`]), which
    /// never fail the page.
    async fn list_dead_letter_page(&self, query: &DeadLetterQuery) -> StoreResult<DeadLetterPage>;

    /// The records of [`Store::list_dead_letter_page`] (rows that cannot be read left
    /// out).
    async fn list_dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> StoreResult<Vec<DeadLetterRecord>> {
        Ok(self.list_dead_letter_page(query).await?.records)
    }

    /// One record. `DeadLetterUndecodable` when its row cannot be read.
    async fn get_dead_letter(&self, queue: &EntityName, id: &str) -> StoreResult<DeadLetterRecord>;

    /// Peek-lock receive from the live area of a queue's dead-letter store. A row that
    /// cannot be read is passed over (neither locked nor returned).
    async fn receive_dead_letters(
        &self,
        queue: &EntityName,
        max: u32,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Vec<DeadLetterDelivery>>;

    /// Completes (removes) or abandons (unlocks) a locked dead letter. `LockLost` if the
    /// lock expired or the record is gone.
    async fn settle_dead_letter(
        &self,
        queue: &EntityName,
        lock_token: &str,
        complete: bool,
        now: Timestamp,
    ) -> StoreResult<()>;

    /// Sends a live dead letter back to its source queue as a new message (new sequence
    /// number, original id and properties, plus a property naming the record) and moves
    /// the record to the archived area, atomically. Duplicate detection does not apply.
    async fn resubmit_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        now: Timestamp,
    ) -> StoreResult<Enqueued>;

    /// Moves a record to another area at `now`, atomically, with its replay bookkeeping
    /// as [`skeleton::replay::moved`] says: moved into live on a queue whose policy
    /// enables replay, it becomes a candidate (a restore is this one move); moved out of
    /// live, it is a candidate no more. A lock on it is released.
    async fn move_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        to: Area,
        now: Timestamp,
    ) -> StoreResult<()>;

    // ---- automatic replay -----------------------------------------------------------

    /// Claims up to `limit` replay candidates due at `now` — live records whose
    /// `replay.due_at` is at or before `now` and that no dead-letter receiver holds
    /// locked — earliest due first (then by id), across every queue, stopping early at
    /// [`skeleton::replay::MAX_CLAIM_BYTES`] of bodies ([`skeleton::replay::claim_cut`]). Each claimed record's due time
    /// moves to `now + claim_ms` in the same transaction (returned records show the new
    /// time), so a judge that dies leaves it to a claim after that.
    ///
    /// A candidate whose row cannot be read ([`UndecodableRecord`]) is set aside in the
    /// same transaction instead of claimed: its reason is stored, no claim takes it again
    /// (until an operator clears that), and this claim alone reports it. It never fails
    /// the claim of the others.
    async fn claim_replay(
        &self,
        now: Timestamp,
        limit: u32,
        claim_ms: u64,
    ) -> StoreResult<ReplayClaim>;

    /// The records of [`Store::claim_replay`].
    async fn claim_replay_candidates(
        &self,
        now: Timestamp,
        limit: u32,
        claim_ms: u64,
    ) -> StoreResult<Vec<DeadLetterRecord>> {
        Ok(self.claim_replay(now, limit, claim_ms).await?.records)
    }

    /// Quarantines a live record whole: to the quarantine area with the judgement (and
    /// its cause in `replay_cause`), its message id written back without its replay count,
    /// the body replaced if `q.body` says so, no longer a candidate, unlocked. `Ok(true)`
    /// when this call moved it; `Ok(false)` when it was no longer live (another judgement
    /// or an operator got there first: nothing changes); `DeadLetterNotFound` when it is
    /// gone.
    async fn quarantine_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        q: &Quarantine,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// Writes the quarantine copy of part of a record ([`skeleton::replay::copy_record`]),
    /// create-if-absent: `Ok(true)` when this call created it, `Ok(false)` when a record
    /// with the copy's id exists already (whatever its area). `DeadLetterNotFound` when
    /// the source record is gone.
    async fn put_quarantine_copy(
        &self,
        queue: &EntityName,
        copy: &QuarantineCopy,
    ) -> StoreResult<bool>;

    /// Ends the replay of a live record whose events were republished: archives it with
    /// the judgement or deletes it. `Ok(true)` when this call did; `Ok(false)` when the
    /// record is gone or no longer live (nothing changes).
    async fn finish_replay(
        &self,
        queue: &EntityName,
        id: &str,
        finish: &ReplayFinish,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// [`Store::finish_replay`] of several records, answered in order. A backend makes it
    /// one transaction (the replay worker ends a whole pass of records with one call); the
    /// default runs them one by one.
    async fn finish_replays(
        &self,
        items: &[(EntityName, String, ReplayFinish)],
        now: Timestamp,
    ) -> StoreResult<Vec<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for (queue, id, finish) in items {
            out.push(self.finish_replay(queue, id, finish, now).await?);
        }
        Ok(out)
    }

    /// Records a failed judgement of a live record: one more failure, `error` as its
    /// `last_error`, due again at `retry_at`. Returns the failures so far; `None` when the
    /// record is gone or no longer live (nothing changes).
    async fn fail_replay(
        &self,
        queue: &EntityName,
        id: &str,
        error: &str,
        retry_at: Timestamp,
    ) -> StoreResult<Option<u32>>;

    /// The drain at start: makes live records that are not candidates, unlocked, of each
    /// rule's queue and dead-lettered before its `older_than`, candidates due at its
    /// `due_at`; at most `limit` in all, oldest first per rule. Archived and quarantined
    /// records are never touched. Returns how many became candidates.
    async fn drain_replay_candidates(&self, rules: &[DrainRule], limit: u32) -> StoreResult<u64>;

    /// Retention: deletes up to `limit` records in all (every area) of each rule's queue
    /// dead-lettered before its `before`, oldest first. Returns how many per queue (only
    /// queues where some were deleted).
    async fn expire_dead_letters(
        &self,
        rules: &[RetentionRule],
        limit: u32,
    ) -> StoreResult<Vec<(EntityName, u64)>>;

    /// Replay counts of the dead-letter store of `queue` (of every queue that has records
    /// when `None`), by queue name. `flag_after`: failed judgements from which a live
    /// record counts as `flagged`.
    async fn replay_counts(
        &self,
        queue: Option<&EntityName>,
        flag_after: u32,
    ) -> StoreResult<Vec<ReplayCounts>>;

    /// Stores imported records in the live area of `queue`, in one transaction, each as
    /// [`skeleton::replay::imported`] makes it (a candidate if the queue's policy enables
    /// replay). `QueueNotFound`. The records' ids are the caller's (new ones).
    async fn import_dead_letters(
        &self,
        queue: &EntityName,
        records: Vec<DeadLetterRecord>,
        now: Timestamp,
    ) -> StoreResult<()>;

    // ---- recovery cases ------------------------------------------------------------
    //
    // Cases are opened by the writes above (see `skeleton::cases`); these read and change
    // them.

    /// The case `id` (`CaseNotFound`).
    async fn get_case(&self, id: &str) -> StoreResult<CaseRecord>;

    /// The timeline of case `id`, oldest first (`CaseNotFound`).
    async fn case_timeline(&self, id: &str) -> StoreResult<Vec<redrive_core::case::TimelineEntry>>;

    /// The cases `query` matches, by id ascending, after its cursor, at most its limit
    /// (capped at [`MAX_CASE_PAGE`]).
    async fn list_cases(&self, query: &CaseQuery) -> StoreResult<Vec<CaseRecord>>;

    /// Counts of the cases `query` matches (its cursor and limit ignored).
    async fn case_counts(&self, query: &CaseQuery) -> StoreResult<CaseCounts>;

    /// The latest dead-letter time of the cases of `queue` with `reason`, open or closed
    /// (`None`: there is none): whether a replay plan's destination is the failing path
    /// for that reason, and until when. One step down the index of cases by queue, reason
    /// and dead-letter time, whatever the number of cases.
    async fn latest_case_dead_letter(
        &self,
        queue: &EntityName,
        reason: &str,
    ) -> StoreResult<Option<Timestamp>>;

    /// Writes one update of a case in one transaction: its mutable part, the appended
    /// timeline entries, a kept payload, and the repair of its record. `CaseNotFound`;
    /// `CaseChanged` (nothing written) when the case is no longer at `update.version`.
    /// Returns the case as written (its version one more).
    async fn update_case(&self, update: &CaseUpdate) -> StoreResult<CaseRecord>;

    /// The cases with these ids that exist (the first [`MAX_CASE_PAGE`] ids; an id
    /// without a case is left out), each with its dead-letter record and its intent, read
    /// together: what the broker's decisions about many cases read, in one read. In the
    /// order of `ids`.
    async fn case_reads(&self, ids: &[String]) -> StoreResult<Vec<CaseRead>>;

    /// Writes several updates of cases in one transaction, each as [`Store::update_case`]
    /// would (with its audit entries): the answer for each, in order. An update whose case
    /// changed or is gone writes nothing of itself and does not hold back the others; an
    /// error of the store writes none of them (`Err`).
    async fn update_cases(
        &self,
        updates: &[CaseUpdate],
    ) -> StoreResult<Vec<StoreResult<CaseRecord>>>;

    /// The bytes kept with case `id` under `digest`, if any.
    async fn case_payload(&self, id: &str, digest: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Up to `limit` cases whose `next_check_at` is at or before `now`, earliest first.
    async fn due_cases(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<CaseRecord>>;

    /// Payload retention: for up to `limit` cases whose `payload_until` has passed at
    /// `now` and whose payload is not yet deleted, deletes their dead-letter record and the
    /// bytes kept with them, and sets `payload_deleted_at` to `now` (the case, its digest
    /// and its timeline stay). Returns the ids of the cases.
    async fn drop_case_payloads(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<String>>;

    /// Records what a producer said about an intent for its `entity`. The first word on
    /// an intent for one entity stands: returns the stored record for that intent and
    /// entity (the given one, or the earlier one unchanged).
    async fn put_intent(&self, intent: &IntentRecord) -> StoreResult<IntentRecord>;

    /// Every word producers said about `intent_id`, oldest first (then by entity), at most
    /// [`MAX_INTENT_WORDS`]. A case's word is the first that covers its queue
    /// ([`skeleton::cases::intent_for`]).
    async fn intent_words(&self, intent_id: &str) -> StoreResult<Vec<IntentRecord>>;

    /// Registers (or replaces) the effect authority of a message type.
    async fn put_effect_authority(&self, authority: &EffectAuthority) -> StoreResult<()>;

    /// Removes the effect authority of `message_type`; whether one was registered.
    async fn delete_effect_authority(&self, message_type: &str) -> StoreResult<bool>;

    /// Every effect authority, by message type.
    async fn list_effect_authorities(&self) -> StoreResult<Vec<EffectAuthority>>;

    /// Writes a case group: a new one when `expected` is `None` (`CaseGroupChanged` if its
    /// id exists), else the group at version `expected` (`CaseGroupNotFound`;
    /// `CaseGroupChanged`, nothing written, when it is no longer there). Returns the group
    /// as written, its version one more (1 for a new one).
    async fn put_case_group(
        &self,
        group: &CaseGroupRecord,
        expected: Option<u64>,
    ) -> StoreResult<CaseGroupRecord>;

    /// The case group `id` (`CaseGroupNotFound`).
    async fn get_case_group(&self, id: &str) -> StoreResult<CaseGroupRecord>;

    /// Case groups by id ascending (of `queue` when given), after `after`, at most `limit`
    /// (capped at [`MAX_CASE_GROUP_PAGE`]).
    async fn list_case_groups(
        &self,
        queue: Option<&EntityName>,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<CaseGroupRecord>>;

    // ---- several processes on one store -------------------------------------------

    /// Names of queues on which another process sharing this store made something
    /// receivable (a send, an abandon, a release), so that long polls here wake at once.
    /// `None` for a backend that only one process writes: the broker's own wake-ups then
    /// cover everything.
    fn remote_wakeups(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl_ms`, if it is free,
    /// expired, or already held by `holder`. Work that must run on one process at a time
    /// (sweeps) runs only while its lease is held; when the holder dies its lease runs out
    /// and another process takes over. A backend that only one process uses always grants.
    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let _ = (name, holder, ttl_ms, now);
        Ok(true)
    }

    // ---- access: tokens and the audit log ------------------------------------------

    /// Stores a new token. `TokenExists` if a token that is not revoked has the same name,
    /// or any token has the same id, secret hash or SQS access key id.
    async fn create_token(&self, token: &NewToken, now: Timestamp) -> StoreResult<TokenRecord>;

    /// Every token, revoked ones too, by creation time.
    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>>;

    /// The token whose secret hashes to `secret_hash` (revoked or not: the caller checks
    /// [`TokenRecord::is_active`]).
    async fn find_token(&self, secret_hash: &str) -> StoreResult<Option<TokenRecord>>;

    /// The token bound to an SQS access key id (revoked or not).
    async fn find_token_by_sqs_key(&self, access_key_id: &str) -> StoreResult<Option<TokenRecord>>;

    /// Revokes a token at `now` (revoking a revoked token keeps its first revocation
    /// time). `TokenNotFound` if there is no such id.
    async fn revoke_token(&self, id: &str, now: Timestamp) -> StoreResult<TokenRecord>;

    /// Appends entries to the audit log in order, in one transaction: each gets the next
    /// `seq` after the chain's head and is chained to the head's hash with
    /// `redrive_core::audit::entry_hash` (the first entry ever to `GENESIS_HASH`), and the
    /// head moves to the last of them in the same transaction. The head, not the newest
    /// row, is what an append follows, so that removing the newest rows cannot go
    /// unnoticed. Entries appended by several processes at once form one chain (the
    /// backend serializes appends). A store without a head refuses to append.
    async fn append_audit(&self, entries: &[AuditFields]) -> StoreResult<Vec<AuditEntry>>;

    /// The chain's head: the newest entry's number and hash as recorded beside the log
    /// (`(0, GENESIS_HASH)` before the first entry; `None`: the head's record is gone).
    async fn audit_head(&self) -> StoreResult<Option<ChainHead>>;

    /// A page of the audit log, oldest first, filtered by `query`.
    async fn list_audit(&self, query: &AuditQuery) -> StoreResult<Vec<AuditEntry>>;

    /// Removes entries older than `before`, keeping at least the newest entry, and in the
    /// same transaction appends `fields` with its targets extended by
    /// `through_seq=<n>` and `through_hash=<hash>` of the last removed entry (see
    /// `redrive_core::audit::PRUNED_ACTION`). Returns how many were removed; removes and
    /// appends nothing when none is old enough.
    async fn prune_audit(&self, before: Timestamp, fields: &AuditFields) -> StoreResult<u64>;

    // ---- the idempotency register ---------------------------------------------------

    /// Creates or replaces the entry of `entry.key` at `now` and returns the record it
    /// replaced (`None`: it is new). A put of an entry equal to the stored one writes
    /// nothing (see `skeleton::register::put`), so the caller tells a change by comparing.
    async fn put_register_entry(
        &self,
        entry: &RegisterEntry,
        now: Timestamp,
    ) -> StoreResult<Option<RegisterRecord>>;

    /// Removes the entry of `key` and returns it (`None`: there was none).
    async fn delete_register_entry(&self, key: &RegisterKey)
    -> StoreResult<Option<RegisterRecord>>;

    /// A page of the register in key order (bytewise on the key's text form): entries
    /// whose key's text is greater than `after`'s, at most `limit` (0 or more than
    /// [`MAX_REGISTER_PAGE`] means [`MAX_REGISTER_PAGE`]).
    async fn list_register(
        &self,
        after: Option<&RegisterKey>,
        limit: u32,
    ) -> StoreResult<Vec<RegisterRecord>>;

    // ---- bounded replay plans --------------------------------------------------------

    /// Stores a new plan with its items (each `waiting` or `held`, `seq` from 0 in
    /// admission order), in one transaction. `ReplayPlanExists` if the id is taken. An
    /// `sqs_move` plan (a message move task, no items; see [`move_plans`]) is refused with
    /// `MoveTaskRunning` while an `sqs_move` plan of the same queue is `running` or
    /// `cancelling`, in the same transaction: one active task per source, whichever node
    /// asks.
    async fn create_replay_plan(
        &self,
        plan: &ReplayPlanRecord,
        items: &[PlanItemRecord],
    ) -> StoreResult<ReplayPlanRecord>;

    /// One plan. `ReplayPlanNotFound`.
    async fn get_replay_plan(&self, id: &str) -> StoreResult<ReplayPlanRecord>;

    /// A page of plans filtered by `query`, in its order (by id unless told otherwise).
    async fn list_replay_plans(&self, query: &PlanQuery) -> StoreResult<Vec<ReplayPlanRecord>>;

    /// Writes `update` in one transaction if the plan is still at `update.version`
    /// (`ReplayPlanChanged` otherwise, nothing written): its mutable part, its items by
    /// `seq`, and the version plus one. An item made `admitted` while another plan's item
    /// of the same case is `admitted` refuses the whole update with `ReplayItemTaken`.
    /// `ReplayPlanNotFound`. An update that ends an `sqs_move` plan (it leaves `running`
    /// or `cancelling`) also deletes, in the same transaction, the finished `sqs_move`
    /// plans of its queue but the [`MOVE_TASKS_KEPT_PER_SOURCE`] most recent. The
    /// runner's columns of an `sqs_move` plan are its state's `runner` and
    /// `runner_until` (see [`skeleton::move_tasks`]). Returns the plan as written.
    async fn update_replay_plan(&self, update: &ReplayPlanUpdate) -> StoreResult<ReplayPlanRecord>;

    /// A page of a plan's items by `seq`, filtered by `query`. `ReplayPlanNotFound`.
    async fn replay_plan_items(
        &self,
        plan_id: &str,
        query: &PlanItemQuery,
    ) -> StoreResult<Vec<PlanItemRecord>>;

    // ---- topics and subscriptions --------------------------------------------------

    /// Creates a topic at version 1. `TopicExists` if the name is taken.
    async fn create_topic(
        &self,
        name: &EntityName,
        policy: &TopicPolicy,
        now: Timestamp,
    ) -> StoreResult<TopicRecord>;

    /// One topic.
    async fn get_topic(&self, name: &EntityName) -> StoreResult<TopicRecord>;

    /// Every topic, by name.
    async fn list_topics(&self) -> StoreResult<Vec<TopicRecord>>;

    /// Deletes a topic and its duplicate-detection entries. Without `force`, refuses with
    /// `TopicHasSubscriptions` while it has subscriptions; with `force`, deletes them and
    /// their queues (messages and dead letters included) in the same transaction.
    async fn delete_topic(&self, name: &EntityName, force: bool) -> StoreResult<()>;

    /// Creates a subscription and its internal queue in one transaction.
    /// `TopicNotFound`, `SubscriptionExists`, or `QueueExists` if the queue name is taken.
    async fn create_subscription(
        &self,
        sub: &NewSubscription,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord>;

    /// One subscription.
    async fn get_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
    ) -> StoreResult<SubscriptionRecord>;

    /// The subscriptions of a topic, by name. `TopicNotFound` if there is no such topic.
    async fn list_subscriptions(&self, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>>;

    /// Every subscription of every topic, by topic and name, in one read (the push
    /// dispatcher's look at what to deliver, whatever the number of topics).
    async fn list_all_subscriptions(&self) -> StoreResult<Vec<SubscriptionRecord>>;

    /// Pauses/resumes a subscription or replaces its filter; bumps its version.
    async fn update_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        update: &SubscriptionUpdate,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord>;

    /// Deletes a subscription with its queue. Without `force`, refuses with
    /// `SubscriptionNotEmpty` while its queue holds messages (undelivered events). With
    /// `force`, those messages and the queue's dead letters are deleted with it and the
    /// number of messages discarded is returned, for the caller to log and count: they are
    /// reported, not moved (the subscription's own dead-letter store goes with it).
    async fn delete_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        force: bool,
    ) -> StoreResult<u64>;

    /// Publishes a batch of events in one transaction: an event whose `dedup_key` was seen
    /// inside the topic's window is answered `duplicate` and fans out nothing; every other
    /// event's deliveries are enqueued (as `enqueue` would) and its key remembered for the
    /// window. All or nothing; durable before the answer. `TopicNotFound`; `QueueNotFound`
    /// if a delivery names a queue that is gone (nothing is stored then).
    async fn publish(
        &self,
        topic: &EntityName,
        events: Vec<PublishEvent>,
        now: Timestamp,
    ) -> StoreResult<Vec<Published>>;

    // ---- failures by signature ---------------------------------------------------

    /// A page of the failure-signature aggregate ([`failure::FailureQuery`]): signatures
    /// of one area, newest `last_seen` first then by id, each with its sparkline. Read
    /// from the aggregate the backend keeps on every dead-letter write, never from the
    /// records.
    async fn list_failures(
        &self,
        query: &failure::FailureQuery,
    ) -> StoreResult<Vec<failure::FailureSignature>>;

    // ---- the overview ----------------------------------------------------------------

    /// Every queue's counts at `now` (each what [`Store::queue_counts`] answers), the
    /// quarantined and flagged records of its dead-letter store (`flag_after`: failed
    /// judgements from which a live candidate counts as flagged), and the open cases of
    /// every queue: grouped reads over the indexes of messages, dead letters and cases,
    /// a fixed number of statements whatever the number of queues (the overview of
    /// `GET /v1/overview`).
    async fn overview_counts(&self, now: Timestamp, flag_after: u32)
    -> StoreResult<OverviewCounts>;
}

/// The largest page of [`Store::list_sessions`].
pub const MAX_SESSION_PAGE: u32 = 100;

/// One session of a queue as a browse sees it at a given time: what waits in it and
/// whether a receiver holds it. Never the lock token, which proves the hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// Messages of the session available and visible now.
    pub active: u64,
    /// Messages of the session visible only later (scheduled, or a redelivery's backoff).
    pub scheduled: u64,
    /// Messages of the session under a live message lock (in flight).
    pub in_flight: u64,
    /// Deferred messages of the session.
    pub deferred: u64,
    /// When the session's lock runs out, while a receiver holds it; `None` when no lock
    /// holds at the time of the listing.
    pub locked_until: Option<Timestamp>,
}

impl SessionSummary {
    /// Whether a receiver holds the session.
    pub fn locked(&self) -> bool {
        self.locked_until.is_some()
    }
}

/// The limit a backend applies to a page of sessions asked with `limit`.
pub fn session_page_limit(limit: u32) -> u32 {
    if limit == 0 || limit > MAX_SESSION_PAGE {
        MAX_SESSION_PAGE
    } else {
        limit
    }
}

/// What a backend read for one page of sessions, put together in session id order.
///
/// `ids` is the page (ascending); `counts` each session's messages by state at `now` as
/// the rows stand, a lock that ran out by `now` left out of `locked` (as
/// [`Store::queue_counts`] leaves it); `expired` the heads of the page's messages whose
/// lock ran out by `now`, counted where a browse shows them
/// ([`skeleton::messages::count_expired_locks`]); `locks` the sessions whose lock holds
/// at `now`, with its end.
pub fn session_summaries(
    ids: Vec<String>,
    counts: Vec<(String, QueueCounts)>,
    expired: &[Head],
    locks: Vec<(String, Timestamp)>,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Vec<SessionSummary> {
    let mut counts: std::collections::HashMap<String, QueueCounts> = counts.into_iter().collect();
    for head in expired {
        if let Some(id) = &head.session_id {
            let c = counts.entry(id.clone()).or_default();
            skeleton::messages::count_expired_locks(c, std::slice::from_ref(head), policy, now);
        }
    }
    let locks: std::collections::HashMap<String, Timestamp> = locks.into_iter().collect();
    ids.into_iter()
        .map(|session_id| {
            let c = counts.get(&session_id).copied().unwrap_or_default();
            SessionSummary {
                locked_until: locks.get(&session_id).copied(),
                active: c.active,
                scheduled: c.scheduled,
                in_flight: c.locked,
                deferred: c.deferred,
                session_id,
            }
        })
        .collect()
}
