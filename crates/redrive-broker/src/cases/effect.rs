//! Asking an effect authority whether an intent's effect exists.
//!
//! # The exchange
//!
//! The broker sends `POST <url>` with a JSON body
//! `{"intent_id", "message_type", "case_id", "queue", "message_id"}` and expects `200`
//! with `{"effect": "present" | "absent" | "indeterminate", "evidence": "<text>"}`
//! (`evidence` at most [`MAX_EVIDENCE_LEN`] bytes: the intent-to-effect binding when
//! present). Anything else — another status, a body that is not that object, more than
//! [`MAX_ANSWER_BYTES`], no answer within the authority's timeout, a refused connection,
//! an address the broker's network policy forbids — is `unreachable`, with what happened
//! as its evidence: never a guess at the effect.

use std::time::Duration;

use redrive_core::case::EffectAnswer;
use redrive_store::{CaseRecord, EffectAuthority};
use serde::Deserialize;

/// Most bytes of an authority's answer read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Longest evidence text kept.
pub const MAX_EVIDENCE_LEN: usize = 4096;
/// The timeout of an authority registered without one, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// The longest timeout an authority may have, ms.
pub const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Deserialize)]
struct Answer {
    effect: String,
    #[serde(default)]
    evidence: Option<String>,
}

/// What the authority said, and the evidence.
pub async fn ask(
    client: &reqwest::Client,
    network: &redrive_push::NetworkPolicy,
    authority: &EffectAuthority,
    case: &CaseRecord,
) -> (EffectAnswer, String) {
    if let Err(f) = network.check_literal(&authority.url) {
        return (
            EffectAnswer::Unreachable,
            format!("effect authority {} not allowed: {f}", authority.url),
        );
    }
    let body = serde_json::json!({
        "intent_id": case.intent_id,
        "message_type": case.message_type,
        "case_id": case.id,
        "queue": case.queue.as_str(),
        "message_id": case.message_id,
    });
    let timeout = Duration::from_millis(authority.timeout_ms.clamp(1, MAX_TIMEOUT_MS));
    let unreachable = |why: String| {
        (
            EffectAnswer::Unreachable,
            format!("effect authority {}: {why}", authority.url),
        )
    };
    let response = match client
        .post(&authority.url)
        .timeout(timeout)
        .json(&body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return unreachable(error_chain(&e)),
    };
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        return unreachable(format!("answered {status}"));
    }
    let bytes = match read_bounded(response).await {
        Ok(b) => b,
        Err(why) => return unreachable(why),
    };
    let answer: Answer = match serde_json::from_slice(&bytes) {
        Ok(a) => a,
        Err(e) => return unreachable(format!("answer is not the expected JSON object: {e}")),
    };
    let effect = match answer.effect.as_str() {
        "present" => EffectAnswer::Present,
        "absent" => EffectAnswer::Absent,
        "indeterminate" => EffectAnswer::Indeterminate,
        other => {
            return unreachable(format!(
                "answered effect {other:?} (expected present, absent or indeterminate)"
            ));
        }
    };
    let mut evidence = answer
        .evidence
        .unwrap_or_else(|| format!("{} answered {}", authority.url, effect));
    if evidence.len() > MAX_EVIDENCE_LEN {
        let mut end = MAX_EVIDENCE_LEN;
        while !evidence.is_char_boundary(end) {
            end -= 1;
        }
        evidence.truncate(end);
    }
    (effect, evidence)
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if out.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(format!("answer longer than {MAX_ANSWER_BYTES} bytes"));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(out),
            Err(e) => return Err(error_chain(&e)),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// Checks an authority's URL and timeout when it is registered.
pub fn check(url: &str, timeout_ms: u64) -> Result<(), crate::BrokerError> {
    redrive_push::endpoint::check_url(url)
        .map_err(|e| crate::BrokerError::invalid("url", e.to_string()))?;
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(crate::BrokerError::invalid(
            "timeout_ms",
            format!("must be between 1 and {MAX_TIMEOUT_MS}"),
        ));
    }
    Ok(())
}
