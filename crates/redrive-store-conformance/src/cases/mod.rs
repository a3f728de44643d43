//! The cases, one `pub async fn` each, grouped by area and re-exported here so that the
//! macro can name them as `cases::<name>`.

mod access;
mod concurrency;
mod dead_letters;
mod dedup;
mod durability;
mod enqueue;
mod expiry;
mod failures;
mod groups;
mod leases;
mod move_tasks;
mod overview;
mod policy_versions;
mod queues;
mod receive;
mod recovery;
mod register;
mod replay;
mod replay_plans;
mod sessions;
mod settle;
mod sweep;
mod topics;
mod transactions;

pub use access::*;
pub use concurrency::*;
pub use dead_letters::*;
pub use dedup::*;
pub use durability::*;
pub use enqueue::*;
pub use expiry::*;
pub use failures::*;
pub use groups::*;
pub use leases::*;
pub use move_tasks::*;
pub use overview::*;
pub use policy_versions::*;
pub use queues::*;
pub use receive::*;
pub use recovery::*;
pub use register::*;
pub use replay::*;
pub use replay_plans::*;
pub use sessions::*;
pub use settle::*;
pub use sweep::*;
pub use topics::*;
pub use transactions::*;

/// Imports every case file uses.
mod prelude {
    pub(crate) use crate::TestStore;
    pub(crate) use crate::assert_err;
    pub(crate) use crate::support::*;
    pub(crate) use redrive_core::{
        Area, Backoff, DeadLetterReason, EvidenceQuality, MessageState, Properties, PropertyValue,
        QueuePolicy, RouteKind, Timestamp,
    };
    pub(crate) use redrive_store::{
        DeadLetterQuery, NewMessage, QueueCounts, SessionRef, SettleAction, Settlement, StoreError,
    };
}
