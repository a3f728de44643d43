//! Per-subscription push delivery statistics: events delivered, failed attempts by status
//! class, events given up on by reason, and the publish → delivered latency histogram.
//!
//! These are counters of this process since it started (as Prometheus counters are); the
//! durable state of a subscription — what is pending, in backoff, in flight and
//! dead-lettered — is its queue's counts, read from the store.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::Mutex;

use redrive_events::AttemptOutcome;

/// Upper bounds (seconds) of the delivery latency histogram's buckets: from a fast
/// first attempt to retries hours later (an event may live 24 h).
pub const LATENCY_BUCKETS_S: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0, 1800.0,
    3600.0, 21600.0, 86400.0,
];

/// The class of a failed attempt's outcome, as counted and labelled.
pub fn failure_class(outcome: &AttemptOutcome) -> Option<&'static str> {
    match outcome {
        AttemptOutcome::Status { status, .. } => match status {
            200..=299 => None,
            408 => Some("408"),
            429 => Some("429"),
            400..=499 => Some("4xx"),
            500..=599 => Some("5xx"),
            _ => Some("other"),
        },
        AttemptOutcome::Timeout => Some("timeout"),
        AttemptOutcome::ConnectionError => Some("connection_error"),
        AttemptOutcome::TlsError => Some("tls_error"),
    }
}

/// One subscription's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushCounters {
    /// Events delivered (a 2xx answer).
    pub delivered: u64,
    /// Failed attempts per event, by class: `408`, `429`, `4xx`, `5xx`, `other` (an
    /// unexpected status), `timeout`, `connection_error`, `tls_error`.
    pub failed_attempts: BTreeMap<String, u64>,
    /// Events given up on, by Event Grid's reason.
    pub dead_lettered: BTreeMap<String, u64>,
    /// Events given up on and dropped (the subscription accepts dropping).
    pub dropped: u64,
    /// Publish → delivered latency: counts per bucket of [`LATENCY_BUCKETS_S`] (not
    /// cumulative), then the overflow bucket.
    pub latency_buckets: Vec<u64>,
    /// Sum of the latencies, seconds.
    pub latency_sum_s: f64,
}

impl PushCounters {
    fn observe_latency(&mut self, seconds: f64) {
        if self.latency_buckets.is_empty() {
            self.latency_buckets = vec![0; LATENCY_BUCKETS_S.len() + 1];
        }
        let i = LATENCY_BUCKETS_S
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(LATENCY_BUCKETS_S.len());
        self.latency_buckets[i] += 1;
        self.latency_sum_s += seconds;
    }
}

/// Every subscription's counters, keyed by (topic, subscription).
#[derive(Default)]
pub(crate) struct PushStats {
    subs: Mutex<HashMap<(String, String), PushCounters>>,
    /// Counts the changes of what a subscription's stats show, made on this node: every
    /// counter changed here, and every receive and settlement of the push dispatcher once
    /// written ([`PushStats::changed`]). Waited on through
    /// [`Broker::push_changes`](crate::Broker::push_changes).
    changes: tokio::sync::watch::Sender<u64>,
}

impl PushStats {
    fn with(&self, topic: &str, sub: &str, f: impl FnOnce(&mut PushCounters)) {
        {
            let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
            f(subs.entry((topic.to_owned(), sub.to_owned())).or_default());
        }
        self.changed();
    }

    /// Something a subscription's stats show changed (a counter, or a push receive or
    /// settlement written).
    pub(crate) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The count of changes, to wait on.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// `n` events delivered, each `latency_s` after its publish.
    pub(crate) fn delivered(&self, topic: &str, sub: &str, latencies_s: &[f64]) {
        self.with(topic, sub, |c| {
            c.delivered += latencies_s.len() as u64;
            for &l in latencies_s {
                c.observe_latency(l);
            }
        });
    }

    /// `n` events saw a failed attempt of this class.
    pub(crate) fn failed(&self, topic: &str, sub: &str, class: &'static str, n: u64) {
        self.with(topic, sub, |c| {
            *c.failed_attempts.entry(class.to_owned()).or_insert(0) += n;
        });
    }

    /// An event given up on and dead-lettered for `reason`.
    pub(crate) fn dead_lettered(&self, topic: &str, sub: &str, reason: &str) {
        self.with(topic, sub, |c| {
            *c.dead_lettered.entry(reason.to_owned()).or_insert(0) += 1;
        });
    }

    /// An event given up on and dropped.
    pub(crate) fn dropped(&self, topic: &str, sub: &str) {
        self.with(topic, sub, |c| c.dropped += 1);
    }

    /// A copy of one subscription's counters (zeros when it has none yet).
    pub(crate) fn get(&self, topic: &str, sub: &str) -> PushCounters {
        let subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        subs.get(&(topic.to_owned(), sub.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Forgets a deleted subscription (`None`: every subscription of the topic).
    pub(crate) fn forget(&self, topic: &str, sub: Option<&str>) {
        let mut subs = self.subs.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|(t, s), _| t != topic || sub.is_some_and(|sub| s != sub));
    }

    /// Prometheus text.
    pub(crate) fn render(&self) -> String {
        let mut subs: Vec<((String, String), PushCounters)> = self
            .subs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        subs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::new();
        let labels = |t: &str, s: &str| {
            format!(
                "topic=\"{}\",subscription=\"{}\"",
                crate::metrics::escape_label(t),
                crate::metrics::escape_label(s)
            )
        };
        let _ = writeln!(
            out,
            "# HELP redrive_push_delivered_total Events delivered to push endpoints (2xx)."
        );
        let _ = writeln!(out, "# TYPE redrive_push_delivered_total counter");
        for ((t, s), c) in &subs {
            let _ = writeln!(
                out,
                "redrive_push_delivered_total{{{}}} {}",
                labels(t, s),
                c.delivered
            );
        }
        let _ = writeln!(
            out,
            "# HELP redrive_push_failed_attempts_total Failed push attempts per event, by status class (408, 429, 4xx, 5xx, other, timeout, connection_error, tls_error)."
        );
        let _ = writeln!(out, "# TYPE redrive_push_failed_attempts_total counter");
        for ((t, s), c) in &subs {
            for (class, n) in &c.failed_attempts {
                let _ = writeln!(
                    out,
                    "redrive_push_failed_attempts_total{{{},class=\"{class}\"}} {n}",
                    labels(t, s)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP redrive_push_dead_lettered_total Events push delivery gave up on and dead-lettered, by reason."
        );
        let _ = writeln!(out, "# TYPE redrive_push_dead_lettered_total counter");
        for ((t, s), c) in &subs {
            for (reason, n) in &c.dead_lettered {
                let _ = writeln!(
                    out,
                    "redrive_push_dead_lettered_total{{{},reason=\"{}\"}} {n}",
                    labels(t, s),
                    crate::metrics::escape_label(reason)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP redrive_push_delivery_latency_seconds Time from publish to successful delivery."
        );
        let _ = writeln!(
            out,
            "# TYPE redrive_push_delivery_latency_seconds histogram"
        );
        for ((t, s), c) in &subs {
            if c.latency_buckets.is_empty() {
                continue;
            }
            let l = labels(t, s);
            let mut cumulative = 0;
            for (i, bound) in LATENCY_BUCKETS_S.iter().enumerate() {
                cumulative += c.latency_buckets[i];
                let _ = writeln!(
                    out,
                    "redrive_push_delivery_latency_seconds_bucket{{{l},le=\"{bound}\"}} {cumulative}"
                );
            }
            cumulative += c.latency_buckets[LATENCY_BUCKETS_S.len()];
            let _ = writeln!(
                out,
                "redrive_push_delivery_latency_seconds_bucket{{{l},le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "redrive_push_delivery_latency_seconds_sum{{{l}}} {}",
                c.latency_sum_s
            );
            let _ = writeln!(
                out,
                "redrive_push_delivery_latency_seconds_count{{{l}}} {cumulative}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_fall_into_their_classes() {
        let st = |status| AttemptOutcome::Status {
            status,
            retry_after_ms: None,
        };
        assert_eq!(failure_class(&st(200)), None);
        assert_eq!(failure_class(&st(204)), None);
        assert_eq!(failure_class(&st(408)), Some("408"));
        assert_eq!(failure_class(&st(429)), Some("429"));
        assert_eq!(failure_class(&st(413)), Some("4xx"));
        assert_eq!(failure_class(&st(503)), Some("5xx"));
        assert_eq!(failure_class(&st(302)), Some("other"));
        assert_eq!(failure_class(&AttemptOutcome::Timeout), Some("timeout"));
        assert_eq!(
            failure_class(&AttemptOutcome::ConnectionError),
            Some("connection_error")
        );
        assert_eq!(failure_class(&AttemptOutcome::TlsError), Some("tls_error"));
    }

    #[test]
    fn the_histogram_is_cumulative_and_counts_every_observation() {
        let s = PushStats::default();
        s.delivered("t", "a", &[0.0005, 0.004, 0.004, 7.0, 100_000.0]);
        s.failed("t", "a", "5xx", 2);
        s.dead_lettered("t", "a", "EndpointRejected");
        let c = s.get("t", "a");
        assert_eq!(c.delivered, 5);
        assert_eq!(c.failed_attempts["5xx"], 2);
        assert_eq!(c.dead_lettered["EndpointRejected"], 1);
        let text = s.render();
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_bucket{topic=\"t\",subscription=\"a\",le=\"0.001\"} 1"
        ));
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_bucket{topic=\"t\",subscription=\"a\",le=\"0.005\"} 3"
        ));
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_bucket{topic=\"t\",subscription=\"a\",le=\"10\"} 4"
        ));
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_bucket{topic=\"t\",subscription=\"a\",le=\"86400\"} 4"
        ));
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_bucket{topic=\"t\",subscription=\"a\",le=\"+Inf\"} 5"
        ));
        assert!(text.contains(
            "redrive_push_delivery_latency_seconds_count{topic=\"t\",subscription=\"a\"} 5"
        ));
        assert!(text.contains(
            "redrive_push_failed_attempts_total{topic=\"t\",subscription=\"a\",class=\"5xx\"} 2"
        ));
        s.forget("t", Some("a"));
        assert_eq!(s.get("t", "a"), PushCounters::default());
    }
}
