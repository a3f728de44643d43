//! Where a benchmark phase spent its CPU: the load tool itself, the server
//! (`--server-pid`), and every PostgreSQL process on this machine (`--postgres-cpu`),
//! as CPU microseconds per message. On a machine whose cores the three share, these
//! figures say which of them a throughput figure is bounded by.
//!
//! Times are user + system time from `/proc/PID/stat` (fields 14 and 15, in clock ticks
//! of 1/100 s, the fixed `USER_HZ` of Linux's `/proc` interface); a process that starts
//! and ends inside a phase is not counted, so callers mark a phase while its database
//! connections are still open.

use serde_json::Value;

use crate::report::Report;

/// Clock ticks per second in `/proc/PID/stat`.
const TICKS_PER_SECOND: f64 = 100.0;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuWatch {
    pub(crate) server: Option<u32>,
    pub(crate) postgres: bool,
}

/// CPU seconds used so far by each measured party.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuMark {
    client: Option<f64>,
    server: Option<f64>,
    postgres: Option<f64>,
}

impl CpuWatch {
    /// The CPU seconds used so far.
    pub(crate) fn mark(&self) -> CpuMark {
        CpuMark {
            client: process_seconds("self"),
            server: self
                .server
                .and_then(|pid| process_seconds(&pid.to_string())),
            postgres: self
                .postgres
                .then(|| seconds_of_processes_named("postgres")),
        }
    }

    /// Adds `<phase>_cpu_<party>` figures: CPU microseconds per message between the two
    /// marks, for each party measured.
    pub(crate) fn report(
        &self,
        report: &mut Report,
        phase: &str,
        from: CpuMark,
        to: CpuMark,
        messages: u64,
    ) {
        let per_message = |a: Option<f64>, b: Option<f64>| -> Value {
            match (a, b) {
                (Some(a), Some(b)) if messages > 0 => {
                    let us = (b - a).max(0.0) * 1e6 / messages as f64;
                    serde_json::json!((us * 100.0).round() / 100.0)
                }
                _ => Value::Null,
            }
        };
        report.add(
            &format!("{phase}_cpu_client"),
            per_message(from.client, to.client),
            "µs/msg",
        );
        if self.server.is_some() {
            report.add(
                &format!("{phase}_cpu_server"),
                per_message(from.server, to.server),
                "µs/msg",
            );
        }
        if self.postgres {
            report.add(
                &format!("{phase}_cpu_postgres"),
                per_message(from.postgres, to.postgres),
                "µs/msg",
            );
        }
    }
}

/// User + system CPU seconds of `/proc/<pid>` (`pid` may be `self`).
fn process_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_seconds(&stat).map(|(_, s)| s)
}

/// The CPU seconds of every process whose command name is `name`.
fn seconds_of_processes_named(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| stat_seconds(&stat))
        .filter(|(comm, _)| comm == name)
        .map(|(_, s)| s)
        .sum()
}

/// The command name and user + system CPU seconds of a `/proc/PID/stat` line. The name
/// is in parentheses and may itself contain spaces or parentheses, so the fields are
/// counted from the last `)`.
fn stat_seconds(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    // After the name: state (field 3) … utime (14), stime (15).
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, (utime + stime) as f64 / TICKS_PER_SECOND))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_name_and_cpu_seconds() {
        let line = "4242 (postgres) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 125 0 0 20 0 1 0 \
                    100 1000 10 18446744073709551615";
        let (comm, s) = stat_seconds(line).unwrap();
        assert_eq!(comm, "postgres");
        assert!((s - 3.75).abs() < 1e-9, "{s}");
        // A name with spaces and a parenthesis is read up to the last ')'.
        let odd = "7 (a b) c) R 1 7 7 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 1 1 1";
        let (comm, s) = stat_seconds(odd).unwrap();
        assert_eq!(comm, "a b) c");
        assert!((s - 0.1).abs() < 1e-9, "{s}");
        assert!(stat_seconds("garbage").is_none());
    }

    #[test]
    fn marks_read_this_process_and_figures_are_per_message() {
        let watch = CpuWatch {
            server: None,
            postgres: false,
        };
        let (a, b) = (watch.mark(), watch.mark());
        let (a, b) = (a.client.unwrap(), b.client.unwrap());
        assert!(b >= a, "{a} {b}");
        assert!(a.is_finite() && a >= 0.0, "{a}");
        let mut r = Report::new("t", "q");
        watch.report(
            &mut r,
            "publish",
            CpuMark {
                client: Some(1.0),
                server: None,
                postgres: None,
            },
            CpuMark {
                client: Some(1.5),
                server: None,
                postgres: None,
            },
            1_000,
        );
        assert_eq!(r.json()["publish_cpu_client"], serde_json::json!(500.0));
        assert!(r.json().get("publish_cpu_server").is_none());
        // A process that could not be read gives no figure rather than a wrong one.
        let postgres = CpuWatch {
            server: None,
            postgres: true,
        };
        let unread = CpuMark {
            client: Some(1.0),
            server: None,
            postgres: None,
        };
        postgres.report(&mut r, "consume", unread, unread, 1_000);
        assert_eq!(r.json()["consume_cpu_postgres"], Value::Null);
        assert_eq!(r.json()["consume_cpu_client"], serde_json::json!(0.0));
    }
}
