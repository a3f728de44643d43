//! What a run reports: the figures in order (a table, or JSON with `--json`), rates and
//! percentiles, progress on a terminal, and the server's resident memory sampled from
//! `/proc` (`--server-pid`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::failure::input_error;
use crate::output::Table;

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
pub(crate) fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0 <= q*n <= n
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

pub(crate) fn secs(d: Duration) -> f64 {
    round2(d.as_secs_f64())
}

/// Per second, rounded to a whole number.
pub(crate) fn rate(count: u64, d: Duration) -> u64 {
    let s = d.as_secs_f64();
    if s <= 0.0 {
        return 0;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a positive rate
    let r = (count as f64 / s).round() as u64;
    r
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

// ---- progress and memory ---------------------------------------------------------------

/// Prints `label n/total` on stderr twice a second while stderr is a terminal.
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn start(label: &'static str, total: u64, count: Arc<AtomicU64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let task = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    eprint!("\r{label} {}/{total}   ", count.load(Ordering::Relaxed));
                }
                eprint!("\r{}\r", " ".repeat(label.len() + 32));
            })
        });
        Progress { stop, task }
    }

    pub(crate) async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

/// Samples a process's VmRSS every 100 ms; reports idle (at start), peak, and end.
pub(crate) struct MemorySampler {
    pid: u32,
    idle_kib: u64,
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl MemorySampler {
    pub(crate) fn start(pid: u32) -> anyhow::Result<MemorySampler> {
        let idle_kib = read_status_kib(pid, "VmRSS").ok_or_else(|| {
            input_error(format!(
                "--server-pid {pid}: cannot read VmRSS from /proc/{pid}/status"
            ))
        })?;
        let peak_kib = Arc::new(AtomicU64::new(idle_kib));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (peak, stop) = (peak_kib.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(kib) = read_status_kib(pid, "VmRSS") {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Ok(MemorySampler {
            pid,
            idle_kib,
            peak_kib,
            stop,
            task,
        })
    }

    pub(crate) async fn finish(self, report: &mut Report) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let end = read_status_kib(self.pid, "VmRSS");
        if let Some(kib) = end {
            self.peak_kib.fetch_max(kib, Ordering::Relaxed);
        }
        let mib = |kib: u64| round2(kib as f64 / 1_024.0);
        report.add("server_rss_idle", mib(self.idle_kib), "MiB");
        report.add(
            "server_rss_peak",
            mib(self.peak_kib.load(Ordering::Relaxed)),
            "MiB",
        );
        report.add(
            "server_rss_after",
            end.map_or(Value::Null, |k| json!(mib(k))),
            "MiB",
        );
        if let Some(hwm) = read_status_kib(self.pid, "VmHWM") {
            report.add("server_rss_high_water", mib(hwm), "MiB");
        }
    }
}

/// A `kB` field of `/proc/PID/status`.
pub(crate) fn read_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_kib(&text, field)
}

fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

// ---- report -----------------------------------------------------------------------------

/// Figures of one run, in the order they were added.
pub(crate) struct Report {
    scenario: String,
    pub(crate) queue: String,
    figures: Vec<(String, Value, &'static str)>,
}

impl Report {
    pub(crate) fn new(scenario: &str, queue: &str) -> Report {
        Report {
            scenario: scenario.to_owned(),
            queue: queue.to_owned(),
            figures: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, name: &str, value: impl Into<Value>, unit: &'static str) {
        self.figures.push((name.to_owned(), value.into(), unit));
    }

    pub(crate) fn table(&self) -> Table {
        let mut t = Table::new(["METRIC", "VALUE", "UNIT"]);
        t.row(["scenario".to_owned(), self.scenario.clone(), String::new()]);
        t.row(["queue".to_owned(), self.queue.clone(), String::new()]);
        for (name, value, unit) in &self.figures {
            let v = match value {
                Value::String(s) => s.clone(),
                Value::Null => "-".to_owned(),
                other => other.to_string(),
            };
            t.row([name.clone(), v, (*unit).to_owned()]);
        }
        t
    }

    pub(crate) fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("scenario".into(), json!(self.scenario));
        m.insert("queue".into(), json!(self.queue));
        for (name, value, _) in &self.figures {
            m.insert(name.clone(), value.clone());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 0.50), Some(50));
        assert_eq!(percentile(&s, 0.90), Some(90));
        assert_eq!(percentile(&s, 0.99), Some(99));
        assert_eq!(percentile(&s, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.5), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn status_fields_parse() {
        let status = "Name:\tredrive\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS"), Some(10_240));
        assert_eq!(status_field_kib(status, "VmHWM"), Some(20_480));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
    }

    #[test]
    fn reports_render_as_table_and_json() {
        let mut r = Report::new("w1", "q");
        r.add("publish_rate", 1234, "msgs/s");
        r.add("latency_p99", Value::Null, "ms");
        let t = r.table().render();
        assert!(t.contains("publish_rate"), "{t}");
        assert_eq!(r.json()["publish_rate"], json!(1234));
        assert_eq!(r.json()["scenario"], json!("w1"));
    }
}
