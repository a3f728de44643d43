//! The native API, one file per resource; each ends with its `router()`.

pub(crate) mod access;
pub(crate) mod case_groups;
pub(crate) mod cases;
pub(crate) mod dead_letters;
pub(crate) mod failures;
pub(crate) mod messages;
pub(crate) mod ops;
pub(crate) mod overview;
pub(crate) mod queues;
pub(crate) mod register;
pub(crate) mod replay;
pub(crate) mod sessions;
pub(crate) mod topics;
pub(crate) mod transactions;
