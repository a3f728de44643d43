//! The refusals the case operations share.

use redrive_core::case::CaseError;
use redrive_store::CaseRecord;

use crate::BrokerError;

use redrive_core::case::step::{self as core_step};

pub(crate) fn conflict(code: &str, why: impl Into<String>) -> BrokerError {
    BrokerError::CaseConflict {
        code: code.to_owned(),
        why: why.into(),
        owner: None,
    }
}

pub(crate) fn claimed(why: impl Into<String>, owner: &str) -> BrokerError {
    BrokerError::CaseConflict {
        code: "case_claimed".to_owned(),
        why: why.into(),
        owner: Some(owner.to_owned()),
    }
}

pub(crate) fn case_error(e: CaseError) -> BrokerError {
    if let CaseError::Claimed { owner, .. } = &e {
        return claimed(e.to_string(), owner);
    }
    let code = match &e {
        CaseError::Claimed { .. } => "case_claimed",
        CaseError::NotOwner { .. } => "not_case_owner",
        CaseError::Closed { .. } => "case_closed",
        _ => "case_state",
    };
    conflict(code, e.to_string())
}

/// `message type "x"`, or `a message without a type` (for texts).
pub(crate) fn type_words(case: &CaseRecord) -> String {
    core_step::type_words(case.queue.as_str(), case.message_type.as_deref())
}
