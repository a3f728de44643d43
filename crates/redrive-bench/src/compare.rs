//! `--compare nats` on redrive's `w1`, `latency` and `w2`: the scenario runs against the
//! redrive server and against NATS JetStream (`nats`) in alternating rounds — redrive,
//! NATS, redrive, NATS… — each run on a fresh queue or stream, with the same arguments.
//! Each round gives both figures and their ratio per metric; the run ends with each
//! metric's median ratio and its spread (the lowest and highest round).
//!
//! Every ratio reads the same way: above 1, redrive is ahead. A rate is redrive / NATS; a
//! latency, where less is better, is NATS / redrive.

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use redrive_client::Client;
use serde_json::{Map, Value, json};

use crate::native::{self, Nodes};
use crate::nats::{self, Nats, NatsScenario};
use crate::output::Table;
use crate::report::{Report, round2};

/// Rounds when `--rounds` is not given.
pub(crate) const DEFAULT_ROUNDS: u32 = 3;

/// What redrive's scenario is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum System {
    /// NATS JetStream at --nats-url (`nats-baseline`'s scenario of the same name).
    Nats,
}

/// `--compare SYSTEM` and `--rounds`, on each scenario that has a counterpart.
#[derive(Debug, Clone, Args)]
pub(crate) struct CompareArgs {
    /// Also run the scenario against SYSTEM, alternating rounds (redrive first), each on a
    /// fresh queue or stream; prints both figures and their ratio per round, then the
    /// median ratio and its spread (a ratio above 1: redrive ahead).
    #[arg(long, value_enum, value_name = "SYSTEM")]
    pub(crate) compare: Option<System>,
    /// Rounds of --compare (default 3).
    #[arg(long, requires = "compare", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) rounds: Option<u32>,
    /// `w1` and `w2` with --compare: NATS publish acks in flight. By default the same
    /// number as --in-flight (K acks against K send requests of --batch messages);
    /// --in-flight × --batch matches them message for message.
    #[arg(long, requires = "compare", value_parser = clap::value_parser!(u32).range(1..=4_096))]
    pub(crate) nats_in_flight: Option<u32>,
}

impl CompareArgs {
    /// The rounds to run.
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds.unwrap_or(DEFAULT_ROUNDS)
    }
}

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    /// A rate: more is better; the ratio is redrive / NATS.
    Higher,
    /// A latency: less is better; the ratio is NATS / redrive.
    Lower,
}

/// A figure both systems report, and how the two are compared.
#[derive(Debug)]
pub(crate) struct Metric {
    /// The name the comparison gives it.
    pub(crate) name: &'static str,
    /// Its unit.
    pub(crate) unit: &'static str,
    /// Its key in redrive's report.
    pub(crate) redrive: &'static str,
    /// Its key in the NATS report.
    pub(crate) nats: &'static str,
    /// Which way is better.
    pub(crate) better: Better,
}

const fn rate_metric(name: &'static str, redrive: &'static str, nats: &'static str) -> Metric {
    Metric {
        name,
        unit: "msgs/s",
        redrive,
        nats,
        better: Better::Higher,
    }
}

const fn latency_metric(name: &'static str) -> Metric {
    Metric {
        name,
        unit: "ms",
        redrive: name,
        nats: name,
        better: Better::Lower,
    }
}

/// `w1`: publish, and receive + complete (redrive) against receive + ack (NATS).
const W1_METRICS: &[Metric] = &[
    rate_metric("publish_rate", "publish_rate", "publish_rate"),
    rate_metric("consume_rate", "receive_complete_rate", "receive_ack_rate"),
];

/// `latency`: publish → receive percentiles.
const LATENCY_METRICS: &[Metric] = &[
    latency_metric("latency_p50"),
    latency_metric("latency_p90"),
    latency_metric("latency_p99"),
];

/// `w2`: messages dead-lettered (redrive) or reported at max deliveries (NATS) per second.
const W2_METRICS: &[Metric] = &[rate_metric(
    "dead_letter_rate",
    "dead_letter_rate",
    "dead_letter_rate",
)];

/// The ratio of two figures that reads "above 1: redrive ahead" (see [`Better`]); none
/// when a figure is missing or the divisor is not positive.
pub(crate) fn ratio(redrive: Option<f64>, nats: Option<f64>, better: Better) -> Option<f64> {
    let (num, den) = match better {
        Better::Higher => (redrive?, nats?),
        Better::Lower => (nats?, redrive?),
    };
    (num.is_finite() && den.is_finite() && den > 0.0 && num >= 0.0).then(|| num / den)
}

/// A metric's ratios over the rounds: the median and the lowest and highest round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    /// The median (of an even count, the mean of the middle two).
    pub(crate) median: f64,
    /// The lowest ratio.
    pub(crate) min: f64,
    /// The highest ratio.
    pub(crate) max: f64,
    /// The rounds that had a ratio.
    pub(crate) rounds: usize,
}

/// The spread of the ratios that exist; none when no round has one.
pub(crate) fn spread(ratios: &[Option<f64>]) -> Option<Spread> {
    let mut v: Vec<f64> = ratios.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        rounds: n,
    })
}

/// One of redrive's scenarios with its arguments, run on both sides.
pub(crate) enum Scenario {
    /// `w1`.
    W1(native::W1Args),
    /// `latency`.
    Latency(native::LatencyArgs),
    /// `w2`.
    W2(native::W2Args),
}

impl Scenario {
    fn name(&self) -> &'static str {
        match self {
            Scenario::W1(_) => "w1",
            Scenario::Latency(_) => "latency",
            Scenario::W2(_) => "w2",
        }
    }

    fn metrics(&self) -> &'static [Metric] {
        match self {
            Scenario::W1(_) => W1_METRICS,
            Scenario::Latency(_) => LATENCY_METRICS,
            Scenario::W2(_) => W2_METRICS,
        }
    }

    /// The same scenario with the same arguments for `nats-baseline`.
    fn nats(&self) -> NatsScenario {
        match self {
            Scenario::W1(a) => {
                let mut n: nats::W1Args = a.into();
                if let Some(k) = a.compare.nats_in_flight {
                    n.publish.in_flight = k;
                }
                NatsScenario::W1(n)
            }
            Scenario::Latency(a) => NatsScenario::Latency(a.into()),
            Scenario::W2(a) => {
                let mut n: nats::W2Args = a.into();
                if let Some(k) = a.compare.nats_in_flight {
                    n.publish.in_flight = k;
                }
                NatsScenario::W2(n)
            }
        }
    }

    async fn redrive(
        &self,
        nodes: &Nodes,
        client: &Client,
        queue: &str,
        report: &mut Report,
    ) -> anyhow::Result<()> {
        match self {
            Scenario::W1(a) => native::w1(nodes, queue, a.clone(), None, report).await,
            Scenario::Latency(a) => native::latency(client, queue, a.clone(), report).await,
            Scenario::W2(a) => native::w2(client, queue, a.clone(), report).await,
        }
    }
}

/// One round: both reports and the ratio of each metric.
#[derive(Debug)]
struct Round {
    queue: String,
    stream: String,
    redrive: Value,
    nats: Value,
    ratios: Vec<Option<f64>>,
}

/// The outcome of a `--compare` run.
#[derive(Debug)]
pub(crate) struct Comparison {
    scenario: &'static str,
    nats_url: String,
    metrics: &'static [Metric],
    rounds: Vec<Round>,
}

/// A figure of a report as a number.
fn figure(report: &Value, key: &str) -> Option<f64> {
    report.get(key).and_then(Value::as_f64)
}

/// Writes every dirty page and commits the file system's journal (`sync`) between two
/// runs, so that one run's leftovers are not timed in the next: the pages a JetStream file
/// store leaves unsynced, and the blocks of a deleted stream, which a file system mounted
/// with `discard` trims in its next journal commit while every `fsync` waits for it.
async fn settle_disk() {
    let done = tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await;
    if !matches!(done, Ok(Ok(s)) if s.success()) {
        eprintln!(
            "warning: `sync` between runs failed; the next run may pay for this one's writes"
        );
    }
}

/// Runs `rounds` rounds of `scenario`, redrive first in each, on a fresh queue and a fresh
/// stream per round; each is deleted after its run unless `keep`.
pub(crate) async fn run(
    nodes: &Nodes,
    client: &Client,
    nats: &Nats,
    scenario: Scenario,
    rounds: u32,
    keep: bool,
) -> anyhow::Result<Comparison> {
    let name = scenario.name();
    let metrics = scenario.metrics();
    let nats_scenario = scenario.nats();
    let stamp = crate::units::now().0;
    let mut out = Comparison {
        scenario: name,
        nats_url: nats.url().to_owned(),
        metrics,
        rounds: Vec::new(),
    };
    for round in 1..=rounds {
        let queue = format!("bench-{name}-{stamp}-r{round}");
        let mut redrive = Report::new(name, &queue);
        let outcome = scenario.redrive(nodes, client, &queue, &mut redrive).await;
        if !keep && let Err(e) = client.admin().delete_queue(&queue, true).await {
            eprintln!("warning: could not delete bench queue {queue}: {e}");
        }
        outcome.with_context(|| format!("round {round}: redrive"))?;
        settle_disk().await;

        let stream = format!("bench_{name}_{stamp}_r{round}");
        let mut other = Report::new(&format!("nats-baseline {name}"), &stream);
        nats::run(nats, &nats_scenario, &stream, keep, &mut other)
            .await
            .with_context(|| format!("round {round}: NATS"))?;
        settle_disk().await;

        let (redrive, other) = (redrive.json(), other.json());
        let ratios: Vec<Option<f64>> = metrics
            .iter()
            .map(|m| {
                ratio(
                    figure(&redrive, m.redrive),
                    figure(&other, m.nats),
                    m.better,
                )
            })
            .collect();
        let line: Vec<String> = metrics
            .iter()
            .zip(&ratios)
            .map(|(m, r)| {
                format!(
                    "{} redrive {} / NATS {} {} (ratio {})",
                    m.name,
                    cell(redrive.get(m.redrive)),
                    cell(other.get(m.nats)),
                    m.unit,
                    ratio_cell(*r)
                )
            })
            .collect();
        eprintln!("round {round}: {}", line.join("; "));
        out.rounds.push(Round {
            queue,
            stream,
            redrive,
            nats: other,
            ratios,
        });
    }
    Ok(out)
}

/// A report figure as a table cell.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{:.2}", round2(r)))
}

fn direction(better: Better) -> &'static str {
    match better {
        Better::Higher => "redrive/NATS",
        Better::Lower => "NATS/redrive",
    }
}

impl Comparison {
    /// Each metric's spread over the rounds, in the order of the metrics.
    fn summary(&self) -> Vec<Option<Spread>> {
        (0..self.metrics.len())
            .map(|i| {
                let ratios: Vec<Option<f64>> = self.rounds.iter().map(|r| r.ratios[i]).collect();
                spread(&ratios)
            })
            .collect()
    }

    /// The comparison for a terminal: what a ratio means, every round's figures, then
    /// the median ratio and its spread per metric.
    pub(crate) fn render(&self) -> String {
        let mut rounds = Table::new(["ROUND", "METRIC", "UNIT", "REDRIVE", "NATS", "RATIO"]);
        for (i, round) in self.rounds.iter().enumerate() {
            for (m, r) in self.metrics.iter().zip(&round.ratios) {
                rounds.row([
                    (i + 1).to_string(),
                    m.name.to_owned(),
                    m.unit.to_owned(),
                    cell(round.redrive.get(m.redrive)),
                    cell(round.nats.get(m.nats)),
                    ratio_cell(*r),
                ]);
            }
        }
        let mut summary = Table::new(["METRIC", "RATIO", "MEDIAN", "MIN", "MAX", "ROUNDS"]);
        for (m, s) in self.metrics.iter().zip(self.summary()) {
            let (median, min, max, n) = s.map_or_else(
                || {
                    (
                        "-".to_owned(),
                        "-".to_owned(),
                        "-".to_owned(),
                        "0".to_owned(),
                    )
                },
                |s| {
                    (
                        ratio_cell(Some(s.median)),
                        ratio_cell(Some(s.min)),
                        ratio_cell(Some(s.max)),
                        s.rounds.to_string(),
                    )
                },
            );
            summary.row([
                m.name.to_owned(),
                direction(m.better).to_owned(),
                median,
                min,
                max,
                n,
            ]);
        }
        format!(
            "{}: redrive against NATS JetStream at {}, {} rounds, redrive first in each.\n\
             A ratio above 1 means redrive is ahead: rates are redrive/NATS, latencies \
             NATS/redrive.\n\n{}\n{}",
            self.scenario,
            self.nats_url,
            self.rounds.len(),
            rounds.render(),
            summary.render()
        )
    }

    /// The comparison as JSON: every round's two reports and ratios, and per metric the
    /// median ratio and its spread.
    pub(crate) fn json(&self) -> Value {
        let rounds: Vec<Value> = self
            .rounds
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let ratios: Map<String, Value> = self
                    .metrics
                    .iter()
                    .zip(&r.ratios)
                    .map(|(m, x)| (m.name.to_owned(), json!(x.map(round2))))
                    .collect();
                json!({
                    "round": i + 1,
                    "queue": r.queue,
                    "stream": r.stream,
                    "redrive": r.redrive,
                    "nats": r.nats,
                    "ratios": ratios,
                })
            })
            .collect();
        let summary: Map<String, Value> = self
            .metrics
            .iter()
            .zip(self.summary())
            .map(|(m, s)| {
                (
                    m.name.to_owned(),
                    json!({
                        "unit": m.unit,
                        "ratio": direction(m.better),
                        "median": s.map(|s| round2(s.median)),
                        "min": s.map(|s| round2(s.min)),
                        "max": s.map(|s| round2(s.max)),
                        "rounds": s.map_or(0, |s| s.rounds),
                    }),
                )
            })
            .collect();
        json!({
            "scenario": self.scenario,
            "compare": "nats",
            "nats_url": self.nats_url,
            "ratio_above_1": "redrive ahead",
            "rounds": rounds,
            "summary": summary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct W1Cli {
        #[command(flatten)]
        a: native::W1Args,
    }

    fn w1(args: &[&str]) -> Result<native::W1Args, clap::Error> {
        use clap::Parser;
        let mut v = vec!["w1"];
        v.extend_from_slice(args);
        W1Cli::try_parse_from(v).map(|c| c.a)
    }

    #[test]
    fn nats_acks_in_flight_follow_the_send_requests_unless_given() {
        let acks = |a: native::W1Args| match Scenario::W1(a).nats() {
            NatsScenario::W1(n) => n.publish.in_flight,
            other => panic!("w1 became {other:?}"),
        };
        assert_eq!(
            acks(w1(&["--compare", "nats", "--in-flight", "16"]).unwrap()),
            16
        );
        let matched = w1(&[
            "--compare",
            "nats",
            "--in-flight",
            "16",
            "--batch",
            "256",
            "--nats-in-flight",
            "4096",
        ])
        .unwrap();
        assert_eq!(matched.publish.in_flight, 16, "redrive's own unchanged");
        assert_eq!(acks(matched), 4_096);
        assert!(w1(&["--nats-in-flight", "64"]).is_err(), "needs --compare");
        assert!(w1(&["--compare", "nats", "--nats-in-flight", "4097"]).is_err());
        assert!(w1(&["--compare", "nats", "--nats-in-flight", "0"]).is_err());
    }

    #[test]
    fn ratios_read_above_one_as_redrive_ahead() {
        // Rates: redrive / NATS.
        assert_eq!(ratio(Some(300.0), Some(100.0), Better::Higher), Some(3.0));
        assert_eq!(ratio(Some(50.0), Some(100.0), Better::Higher), Some(0.5));
        // Latencies: NATS / redrive, so that a faster redrive is above 1 too.
        assert_eq!(ratio(Some(2.0), Some(4.0), Better::Lower), Some(2.0));
        assert_eq!(ratio(Some(4.0), Some(2.0), Better::Lower), Some(0.5));
        // Missing figures and zero divisors give no ratio.
        assert_eq!(ratio(None, Some(1.0), Better::Higher), None);
        assert_eq!(ratio(Some(1.0), None, Better::Lower), None);
        assert_eq!(ratio(Some(1.0), Some(0.0), Better::Higher), None);
        assert_eq!(ratio(Some(0.0), Some(1.0), Better::Lower), None);
        assert_eq!(ratio(Some(0.0), Some(5.0), Better::Higher), Some(0.0));
        assert_eq!(ratio(Some(f64::NAN), Some(5.0), Better::Higher), None);
    }

    #[test]
    fn spreads_take_the_median_and_the_extremes() {
        let s = spread(&[Some(3.0), Some(1.0), Some(2.0)]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0,
                rounds: 3
            }
        );
        // An even count: the mean of the middle two.
        let s = spread(&[Some(4.0), Some(1.0), Some(2.0), Some(10.0)]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (3.0, 1.0, 10.0, 4));
        // Rounds without a ratio are left out.
        let s = spread(&[None, Some(0.8), None]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (0.8, 0.8, 0.8, 1));
        assert_eq!(spread(&[None, None]), None);
        assert_eq!(spread(&[]), None);
    }

    fn comparison() -> Comparison {
        let round = |redrive: u64, nats: u64| {
            let ratios = vec![ratio(
                Some(redrive as f64),
                Some(nats as f64),
                Better::Higher,
            )];
            Round {
                queue: "q".into(),
                stream: "s".into(),
                redrive: json!({"dead_letter_rate": redrive}),
                nats: json!({"dead_letter_rate": nats}),
                ratios,
            }
        };
        Comparison {
            scenario: "w2",
            nats_url: "nats://127.0.0.1:4222".into(),
            metrics: W2_METRICS,
            rounds: vec![round(200, 100), round(100, 100), round(300, 100)],
        }
    }

    #[test]
    fn comparisons_render_every_round_and_the_summary() {
        let c = comparison();
        let text = c.render();
        assert!(text.contains("above 1 means redrive is ahead"), "{text}");
        assert!(text.contains("NATS/redrive"), "{text}");
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("dead_letter_rate") && l.contains("msgs/s"))
                .count(),
            3,
            "{text}"
        );
        let summary = text
            .lines()
            .find(|l| l.starts_with("dead_letter_rate") && l.contains("redrive/NATS"))
            .unwrap_or_else(|| panic!("no summary row: {text}"));
        assert!(
            summary.contains("2.00") && summary.contains("1.00"),
            "{summary}"
        );
        assert!(summary.contains("3.00"), "{summary}");

        let j = c.json();
        assert_eq!(j["rounds"].as_array().map(Vec::len), Some(3));
        assert_eq!(j["rounds"][0]["ratios"]["dead_letter_rate"], json!(2.0));
        assert_eq!(j["rounds"][2]["nats"]["dead_letter_rate"], json!(100));
        let s = &j["summary"]["dead_letter_rate"];
        assert_eq!(
            (&s["median"], &s["min"], &s["max"], &s["rounds"]),
            (&json!(2.0), &json!(1.0), &json!(3.0), &json!(3))
        );
        assert_eq!(s["ratio"], "redrive/NATS");
    }

    #[test]
    fn every_metric_maps_to_keys_both_reports_have() {
        assert_eq!(W1_METRICS[1].redrive, "receive_complete_rate");
        assert_eq!(W1_METRICS[1].nats, "receive_ack_rate");
        assert!(LATENCY_METRICS.iter().all(|m| m.better == Better::Lower));
        assert!(
            W1_METRICS
                .iter()
                .chain(W2_METRICS)
                .all(|m| m.better == Better::Higher)
        );
        assert!(LATENCY_METRICS.iter().any(|m| m.name == "latency_p99"));
    }

    #[test]
    fn rounds_default_to_three() {
        let a = CompareArgs {
            compare: Some(System::Nats),
            rounds: None,
            nats_in_flight: None,
        };
        assert_eq!(a.rounds(), DEFAULT_ROUNDS);
        assert_eq!(DEFAULT_ROUNDS, 3);
    }
}
