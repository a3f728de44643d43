//! Rows of the idempotency register (see `redrive_core::register`).

use redrive_core::Timestamp;
use redrive_core::register::RegisterEntry;

/// A stored register entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterRecord {
    /// The entry.
    pub entry: RegisterEntry,
    /// When it was last changed (a put of an equal entry does not change it).
    pub updated_at: Timestamp,
}

/// Most entries one register page returns.
pub const MAX_REGISTER_PAGE: u32 = 1_000;
