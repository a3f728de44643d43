//! The store skeleton: what every backend does alike, written once.
//!
//! A backend owns its SQL and its transactions: which rows an operation looks at, how it
//! locks them, how it batches its writes and when it commits. Everything between reading
//! a row and writing one is here, as plain data and pure functions, so that the SQLite
//! store (synchronous, on its writer thread) and the PostgreSQL store (asynchronous, one
//! transaction per operation) run the same code and cannot drift apart:
//!
//! - [`columns`]: how values are kept in columns (milliseconds, JSON, names), the
//!   [`Columns`] trait a backend implements for its row type, the column lists of the
//!   shared decoders ([`columns!`](crate::columns)), and [`RowError`].
//! - [`messages`]: a message row ([`Head`], [`MessageRow`]) and its mapping to the
//!   trait's types, lock tokens, the rows an enqueue inserts, and the per-row rules of
//!   receive, settle and sweep: each asks `redrive_core::machine` and answers with the
//!   [`Write`] the backend stores.
//! - [`dead_letters`]: where a dead letter goes ([`DeadLetterPlan`]: the evidence
//!   record, the copy forwarded to a dead-letter queue, the fallback), resubmission, and
//!   the peek-lock of dead-letter records.
//! - [`entities`]: queue, topic, subscription and session records and the rules of their
//!   creation, update and deletion, and the fan-out of a publish.
//! - [`access`]: token and audit rows, the numbering and chaining of audit entries.
//! - [`register`]: idempotency register rows, and whether a put changes anything.
//! - [`cases`]: when a dead-letter record opens a recovery case (the statements both
//!   backends run), case rows, timeline entries and their columns.
//! - [`move_tasks`]: message move task rows, the progress a runner may write, cancel
//!   requests and the claim of orphaned tasks.
//! - [`replay_plans`]: bounded replay plan and item rows, the checks of a new plan and
//!   of an update, the item lease, and the statements and filters both backends run.
//! - [`replay`]: automatic replay's bookkeeping: when a record is a candidate, what a
//!   move between areas does to it, quarantine copies, imported records, the counts.
//!
//! # Adding a store operation
//!
//! 1. The trait method and its parameter and result types in this crate (`lib.rs`,
//!    `types.rs` or `access.rs`).
//! 2. The decision: a pure function in `redrive_core::machine` when it is a rule about a
//!    message's state, otherwise here, in the module of its concern, taking rows as
//!    decoded and answering what to write.
//! 3. In each backend, the SQL: find (and lock) the rows, decode them with the shared
//!    decoders, call the decision, write what it answers, inside the backend's
//!    transaction.
//! 4. One conformance case in `redrive-store-conformance`, which every backend runs.

pub mod access;
pub mod cases;
pub mod columns;
pub mod dead_letters;
pub mod entities;
pub mod failures;
pub mod messages;
pub mod move_tasks;
pub mod register;
pub mod replay;
pub mod replay_plans;

#[cfg(test)]
mod testing;

pub use columns::{Columns, RowError};
pub use dead_letters::DeadLetterPlan;
pub use messages::{Cause, Head, MessageRow, NewRow, Received, Settling, Write};
