//! The records broker operations take and answer. They are the store's plain
//! data types, re-exported here (one definition, no mapping code), so that an interface
//! depends on the broker alone and speaks to it in these words; the store's operation
//! parameters (settlements, receive parameters, new rows) stay behind the broker.

pub use redrive_store::{
    AuditEntry, AuditQuery, CaseCounts, CaseQuery, CaseRecord, DeadLetterDelivery,
    DeadLetterRecord, Delivery, EffectAuthority, Enqueued, IntentRecord, IntentStatus,
    MAX_AUDIT_PAGE, MAX_CASE_PAGE, MAX_PLAN_ITEM_PAGE, MAX_PLAN_PAGE, MAX_REGISTER_PAGE,
    PlanItemQuery, PlanItemRecord, PlanItemState, PlanKind, PlanMut, PlanQuery, PlanStatus,
    QueueCounts, QueueRecord, RegisterRecord, ReplayPlanRecord, SessionLock, SessionRef, Settled,
    SqsCredentials, StoredMessage, SubscriptionRecord, SubscriptionSpec, SubscriptionUpdate,
    TokenRecord, TopicRecord,
};
pub use redrive_store::{MAX_POLICY_VERSION_PAGE, PolicyVersionRecord};
