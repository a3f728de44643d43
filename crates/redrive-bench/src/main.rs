//! `redrive-bench`, the load tool: scenarios against a running redrive server (w1
//! throughput, latency, w2 dead-lettering, fill; `native`), with optional sampling of the
//! server's resident memory and CPU (`report`, `cpu`); `pg-baseline`, a raw PostgreSQL
//! queue to compare the PostgreSQL store with (`pg`); `sqs` through the SQS endpoint with
//! the AWS SDK (`sqs`); push delivery (`push`); and `nats-baseline`, the same scenarios
//! against NATS JetStream (`nats`), which `--compare nats` alternates with redrive's own
//! runs round by round (`compare`). A tool for people, never a timed test.
//!
//! It is its own crate so that the shipped `redrive` binary carries neither the AWS SDK
//! nor raw SQL; it talks to the server over HTTP only, through `redrive-client` (the
//! push scenarios' receivers and the SQS SDK aside), and needs no `redrive` binary of its own (the server it measures is
//! started by whoever runs it, see docs/benchmarks.md). This file only parses arguments
//! and dispatches.

mod compare;
mod cpu;
mod native;
mod nats;
mod overview;
mod pg;
mod plans;
mod processor;
mod push;
mod queue_floor;
mod replay;
mod report;
mod sqlite_floor;
mod sqs;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
// The `redrive` package's library half, under the names the scenarios use.
use redrive::{failure, output, units};

use crate::failure::input_error;
use crate::output::print_json;
use crate::report::{MemorySampler, Report};

/// The same allocator as the `redrive` binary: the load tool's own CPU per message
/// (`*_cpu_client`) was measured with it when the tool lived in that binary
/// (docs/benchmarks.md), and it runs on the same cores as the server it measures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// redrive-bench: load tests against a running redrive server.
#[derive(Debug, Parser)]
#[command(name = "redrive-bench", version, after_help = failure::EXIT_CODES_HELP)]
struct Cli {
    /// Server URL.
    #[arg(
        long,
        global = true,
        env = "REDRIVE_URL",
        default_value = "http://127.0.0.1:7474"
    )]
    url: String,
    /// API token (`rdt_…`) sent with every request; needed when the server has
    /// authentication on.
    #[arg(long, global = true, env = "REDRIVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the report as JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    scenario: Scenario,
    /// Sample this server process's resident memory (VmRSS from /proc/PID/status).
    #[arg(long, global = true, value_name = "PID")]
    server_pid: Option<u32>,
    /// Use this queue name instead of a fresh `bench-…` one.
    #[arg(long, global = true, value_name = "NAME", value_parser = units::queue_name)]
    queue: Option<String>,
    /// Keep the queue afterwards (fill always keeps it); for NATS, the stream.
    #[arg(long, global = true)]
    keep: bool,
    /// NATS server for `nats-baseline` and `--compare nats`.
    #[arg(
        long,
        global = true,
        env = nats::URL_VAR,
        default_value = nats::DEFAULT_URL,
        value_name = "URL"
    )]
    nats_url: String,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Throughput: publish N messages in batches, then receive and complete them all.
    W1(native::W1Args),
    /// Send→receive latency at a fixed publish rate with concurrent long-polling consumers.
    Latency(native::LatencyArgs),
    /// Dead-lettering: consumers abandon everything until max delivery count (3) is hit.
    W2(native::W2Args),
    /// Leave N messages waiting in a queue and report the server's memory after.
    Fill(native::FillArgs),
    /// Raw pgmq-style baseline in SQL (no server): inserts, then receive + delete.
    PgBaseline(pg::PgBaselineArgs),
    /// SQS endpoint, end to end with the AWS SDK: SendMessageBatch 10, ReceiveMessage 10,
    /// DeleteMessageBatch, producers and consumers at once.
    Sqs(sqs::SqsBenchArgs),
    /// Push delivery: a local receiver, a topic with one push subscription to it, N events
    /// published; events per second from the first publish to the last event received
    /// (`--backlog`: the drain of a paused subscription's backlog after its resume;
    /// `--rate`: publish → first delivery attempt latency at a fixed rate).
    Push(push::PushBenchArgs),
    /// Automatic replay: N dead-lettered events written into a replaying queue, timed
    /// from the first write until every event is republished.
    Replay(replay::ReplayArgs),
    /// The judgement of one dead-letter record of N events, in this process (no server).
    Judge(replay::JudgeArgs),
    /// Bounded replay: one plan over N eligible cases at an items/s budget; the rate over
    /// every 10 s window against the budget.
    Plan(plans::PlanArgs),
    /// The SQLite writer's ceiling for a replay plan (no server): per item the rows a plan
    /// writes, on a fresh file with the store's settings; items per second.
    SqliteFloor(sqlite_floor::SqliteFloorArgs),
    /// The SQLite writer's ceiling for receive + complete (no server), with the lock in
    /// the message's row (the store's design) or in memory; messages per second.
    SqliteQueueFloor(queue_floor::QueueFloorArgs),
    /// Push retries: many push subscriptions to a receiver that answers 500, every event
    /// waiting in backoff after its first attempt; the server's memory then.
    PushBackoff(push::PushBackoffArgs),
    /// A redrive-client processor (64 concurrent calls, no-op handler) against the load
    /// tool's own receive + complete loop, alternating over rounds; both rates and ratio.
    Processor(processor::ProcessorArgs),
    /// The console's overview on a large store: N queues and M dead letters written
    /// through the API, then `GET /v1/overview` timed (median, p90, slowest).
    Overview(overview::OverviewArgs),
    /// NATS JetStream as the baseline (no redrive server): w1, latency or w2 on a fresh
    /// file-storage work-queue stream, through a durable pull consumer.
    NatsBaseline(nats::NatsBaselineArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(failure::exit_code(&e))
        }
    }
}

/// Runs a scenario and prints its report.
async fn run(args: Cli) -> anyhow::Result<()> {
    let client = native::client(&args.url, args.token.as_deref())
        .map_err(|e| input_error(format!("{e:#}")))?;
    let json = args.json;
    if let Scenario::Judge(a) = &args.scenario {
        let mut report = Report::new("judge", "");
        replay::judge(a, &mut report)?;
        return print_report(json, &report);
    }
    if let Scenario::SqliteFloor(a) = &args.scenario {
        let mut report = Report::new("sqlite-floor", "");
        sqlite_floor::run(a, &mut report)?;
        return print_report(json, &report);
    }
    if let Scenario::SqliteQueueFloor(a) = &args.scenario {
        let mut report = Report::new("sqlite-queue-floor", "");
        queue_floor::run(a, &mut report)?;
        return print_report(json, &report);
    }
    if let Scenario::PgBaseline(a) = args.scenario {
        return run_pg_baseline(json, a, args.server_pid, args.queue.is_some(), args.keep).await;
    }
    if let Scenario::NatsBaseline(a) = args.scenario {
        return run_nats_baseline(
            json,
            a,
            &args.nats_url,
            args.server_pid,
            args.queue.is_some(),
            args.keep,
        )
        .await;
    }
    if let Scenario::Sqs(a) = args.scenario {
        let memory = match args.server_pid {
            Some(pid) => Some(MemorySampler::start(pid)?),
            None => None,
        };
        let mut report = Report::new("sqs", "");
        let outcome = sqs::run(a, args.keep, &mut report).await;
        if let Some(m) = memory {
            m.finish(&mut report).await;
        }
        report.queue = outcome?;
        return print_report(json, &report);
    }
    if let Scenario::Push(_) | Scenario::PushBackoff(_) = args.scenario {
        let base = client.url().as_str().to_owned();
        client
            .wire()
            .healthz()
            .await
            .with_context(|| format!("server at {base}"))?;
        let memory = match args.server_pid {
            Some(pid) => Some(MemorySampler::start(pid)?),
            None => None,
        };
        let name = match args.scenario {
            Scenario::PushBackoff(_) => "push-backoff",
            _ => "push",
        };
        let topic = args
            .queue
            .clone()
            .unwrap_or_else(|| format!("bench-{name}-{}", units::now().0));
        let mut report = Report::new(name, &topic);
        let outcome = match args.scenario {
            Scenario::PushBackoff(a) => {
                let pid = args.server_pid;
                push::run_backoff(&client, a, topic, args.keep, pid, &mut report).await
            }
            Scenario::Push(a) => push::run(&client, a, topic, args.keep, &mut report).await,
            _ => unreachable!("a push scenario"),
        };
        if let Some(m) = memory {
            m.finish(&mut report).await;
        }
        report.queue = outcome?;
        return print_report(json, &report);
    }
    let nodes = match &args.scenario {
        Scenario::W1(a) => native::nodes(&client, args.token.as_deref(), &a.also)?,
        _ => native::Nodes::one(client.clone()),
    };
    for node in nodes.clients.iter() {
        node.wire()
            .healthz()
            .await
            .with_context(|| format!("server at {}", node.url()))?;
    }
    if let Some(scenario) = comparison(&args.scenario) {
        return run_comparison(json, &args, &nodes, &client, scenario).await;
    }
    let memory = match args.server_pid {
        Some(pid) => Some(MemorySampler::start(pid)?),
        None => None,
    };
    let scenario_name = match &args.scenario {
        Scenario::W1(_) => "w1",
        Scenario::Latency(_) => "latency",
        Scenario::W2(_) => "w2",
        Scenario::Fill(_) => "fill",
        Scenario::PgBaseline(_) => "pg-baseline",
        Scenario::Sqs(_) => "sqs",
        Scenario::Push(_) => "push",
        Scenario::PushBackoff(_) => "push-backoff",
        Scenario::Replay(_) => "replay",
        Scenario::Judge(_) => "judge",
        Scenario::SqliteFloor(_) => "sqlite-floor",
        Scenario::SqliteQueueFloor(_) => "sqlite-queue-floor",
        Scenario::Plan(_) => "plan",
        Scenario::Processor(_) => "processor",
        Scenario::Overview(_) => "overview",
        Scenario::NatsBaseline(_) => "nats-baseline",
    };
    let queue = args
        .queue
        .clone()
        .unwrap_or_else(|| format!("bench-{scenario_name}-{}", units::now().0));
    let mut report = Report::new(scenario_name, &queue);
    let keep = args.keep || matches!(args.scenario, Scenario::Fill(_) | Scenario::Overview(_));
    let outcome = match args.scenario {
        Scenario::W1(a) => native::w1(&nodes, &queue, a, args.server_pid, &mut report).await,
        Scenario::Latency(a) => native::latency(&client, &queue, a, &mut report).await,
        Scenario::W2(a) => native::w2(&client, &queue, a, &mut report).await,
        Scenario::Fill(a) => native::fill(&client, &queue, a, &mut report).await,
        Scenario::Replay(a) => replay::run(&client, &queue, a, &mut report).await,
        Scenario::Plan(a) => plans::run(&client, &queue, a, &mut report).await,
        Scenario::Overview(a) => overview::run(&client, &queue, a, &mut report).await,
        Scenario::Processor(a) => {
            let token = args.token.as_deref();
            processor::run(&args.url, token, &client, &queue, a, &mut report).await
        }
        Scenario::PgBaseline(_)
        | Scenario::Judge(_)
        | Scenario::SqliteFloor(_)
        | Scenario::SqliteQueueFloor(_)
        | Scenario::Sqs(_)
        | Scenario::Push(_)
        | Scenario::PushBackoff(_)
        | Scenario::NatsBaseline(_) => {
            unreachable!("handled above")
        }
    };
    if let Some(m) = memory {
        m.finish(&mut report).await;
    }
    if !keep && let Err(e) = client.admin().delete_queue(&queue, true).await {
        eprintln!("warning: could not delete bench queue {queue}: {e}");
    }
    outcome?;
    print_report(json, &report)
}

fn print_report(json: bool, report: &Report) -> anyhow::Result<()> {
    if json {
        print_json(&report.json())
    } else {
        print!("{}", report.table().render());
        Ok(())
    }
}

/// `pg-baseline`: no server involved; `--server-pid` may still sample a process (e.g. a
/// PostgreSQL backend or the postmaster).
async fn run_pg_baseline(
    json: bool,
    a: pg::PgBaselineArgs,
    server_pid: Option<u32>,
    queue_given: bool,
    keep: bool,
) -> anyhow::Result<()> {
    if queue_given {
        return Err(input_error(
            "--queue does not apply to pg-baseline (use --schema NAME)",
        ));
    }
    let memory = match server_pid {
        Some(pid) => Some(MemorySampler::start(pid)?),
        None => None,
    };
    let mut report = Report::new("pg-baseline", "");
    let outcome = pg::run(a, keep, &mut report).await;
    if let Some(m) = memory {
        m.finish(&mut report).await;
    }
    report.queue = outcome?;
    print_report(json, &report)
}

/// `nats-baseline`: no redrive server involved; `--server-pid` may still sample a process
/// (e.g. the NATS server).
async fn run_nats_baseline(
    json: bool,
    a: nats::NatsBaselineArgs,
    nats_url: &str,
    server_pid: Option<u32>,
    queue_given: bool,
    keep: bool,
) -> anyhow::Result<()> {
    if queue_given {
        return Err(input_error(
            "--queue does not apply to nats-baseline (use --stream NAME)",
        ));
    }
    let nats = nats::Nats::connect(nats_url).await?;
    let stream = a
        .stream
        .clone()
        .unwrap_or_else(|| nats::fresh_stream(a.scenario.name()));
    let memory = match server_pid {
        Some(pid) => Some(MemorySampler::start(pid)?),
        None => None,
    };
    let mut report = Report::new(&format!("nats-baseline {}", a.scenario.name()), &stream);
    let outcome = nats::run(&nats, &a.scenario, &stream, keep, &mut report).await;
    if let Some(m) = memory {
        m.finish(&mut report).await;
    }
    outcome?;
    print_report(json, &report)
}

/// The scenario with its arguments when it was given `--compare`.
fn comparison(scenario: &Scenario) -> Option<compare::Scenario> {
    match scenario {
        Scenario::W1(a) if a.compare.compare.is_some() => Some(compare::Scenario::W1(a.clone())),
        Scenario::Latency(a) if a.compare.compare.is_some() => {
            Some(compare::Scenario::Latency(a.clone()))
        }
        Scenario::W2(a) if a.compare.compare.is_some() => Some(compare::Scenario::W2(a.clone())),
        _ => None,
    }
}

/// `--compare nats`: the NATS server is checked before the first round, so that a missing
/// one fails the run at once.
async fn run_comparison(
    json: bool,
    args: &Cli,
    nodes: &native::Nodes,
    client: &redrive_client::Client,
    scenario: compare::Scenario,
) -> anyhow::Result<()> {
    if args.queue.is_some() {
        return Err(input_error(
            "--queue does not apply to --compare: every round runs on a fresh queue",
        ));
    }
    if args.server_pid.is_some() {
        return Err(input_error(
            "--server-pid does not apply to --compare: the rounds measure two servers",
        ));
    }
    let rounds = match &scenario {
        compare::Scenario::W1(a) => a.compare.rounds(),
        compare::Scenario::Latency(a) => a.compare.rounds(),
        compare::Scenario::W2(a) => a.compare.rounds(),
    };
    let nats = nats::Nats::connect(&args.nats_url).await?;
    let outcome = compare::run(nodes, client, &nats, scenario, rounds, args.keep).await?;
    if json {
        print_json(&outcome.json())
    } else {
        print!("{}", outcome.render());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
