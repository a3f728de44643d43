//! The dependency reservation's health probe.
//!
//! # The exchange
//!
//! The broker sends `GET <probe_url>` and expects `200` with a JSON object
//! `{"error_rate": <0 to 1>, "latency_ms": <integer>}`: the dependency's own current
//! error rate and latency over its latest observation window. Anything else — another
//! status, a body that is not that object, more than [`MAX_PROBE_BYTES`], no answer
//! within [`PROBE_TIMEOUT_MS`], a refused connection, an address the broker's network
//! policy forbids — is a budget that cannot be observed: the plan stops
//! (`budget_unobservable`), it never guesses the dependency is healthy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most bytes of a probe's answer read.
pub const MAX_PROBE_BYTES: usize = 16 * 1024;
/// How long a probe may take, ms.
pub const PROBE_TIMEOUT_MS: u64 = 5_000;

/// What a probe observed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// The dependency's error rate, 0 to 1.
    pub error_rate: f64,
    /// Its latency, ms.
    pub latency_ms: u64,
}

#[derive(Deserialize)]
struct Answer {
    error_rate: f64,
    latency_ms: u64,
}

/// Reads the dependency's health at `url`: the reading, or why it cannot be observed.
pub async fn read(
    client: &reqwest::Client,
    network: &redrive_push::NetworkPolicy,
    url: &str,
) -> Result<Reading, String> {
    network
        .check_literal(url)
        .map_err(|f| format!("probe {url} not allowed: {f}"))?;
    let mut response = client
        .get(url)
        .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
        .send()
        .await
        .map_err(|e| format!("probe {url}: {}", redrive_tls::explain(&e)))?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        return Err(format!("probe {url} answered {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("probe {url}: {e}"))?
    {
        if body.len() + chunk.len() > MAX_PROBE_BYTES {
            return Err(format!(
                "probe {url}: answer longer than {MAX_PROBE_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    let a: Answer = serde_json::from_slice(&body).map_err(|e| {
        format!("probe {url}: answer is not {{\"error_rate\", \"latency_ms\"}}: {e}")
    })?;
    if !(a.error_rate.is_finite() && (0.0..=1.0).contains(&a.error_rate)) {
        return Err(format!(
            "probe {url}: error_rate {} is not between 0 and 1",
            a.error_rate
        ));
    }
    Ok(Reading {
        error_rate: a.error_rate,
        latency_ms: a.latency_ms,
    })
}
