//! The `redrive` binary: `serve` runs the broker; the other commands operate a running
//! server over its HTTP API (the load tool is `redrive-bench`, a crate of its own). This
//! file only parses arguments and dispatches.

mod cmd;
mod config;
mod migrate;
mod serve;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
// The package's library half (shared with `redrive-bench`), under the names the commands use.
use redrive::{client, failure, output, units};

use crate::cmd::Ctx;

/// mimalloc instead of the system allocator: the server allocates and frees many
/// short-lived buffers of mixed sizes per request (bodies, JSON, rows), and under load
/// glibc's malloc spent about a third of the node's CPU on them (`_int_malloc`,
/// `unlink_chunk`, `malloc_consolidate`; see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// redrive: a message broker in which a dead letter is the start of a recovery.
#[derive(Debug, Parser)]
#[command(name = "redrive", version, after_help = failure::EXIT_CODES_HELP)]
struct Cli {
    /// Server URL for operator commands.
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
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// A PEM file of extra certificate authorities to trust besides the platform's: for an
    /// `https://` server URL and, with `serve`, for every outgoing request (`ca_file`).
    #[arg(long, global = true, env = "REDRIVE_CA_FILE", value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker.
    Serve(serve::ServeArgs),
    /// Apply the store's schema migrations and print its schema version.
    Migrate(migrate::MigrateArgs),
    /// Manage queues.
    #[command(subcommand)]
    Queue(cmd::queue::QueueCommand),
    /// Send one message (body from the argument, --file, or stdin).
    Send(cmd::message::SendArgs),
    /// Receive messages with a lock, then settle them or print their lock tokens.
    ///
    /// Without an action the messages stay locked and their lock tokens are printed (use
    /// `redrive settle`). With --json the output is {"messages": [...]} plus "settled" (the
    /// settle results) when an action was given, or "session" when a session was accepted.
    Receive(cmd::message::ReceiveArgs),
    /// Settle one delivery by its lock token.
    Settle(cmd::message::SettleArgs),
    /// Cancel a scheduled message by its sequence number.
    Unschedule(cmd::message::UnscheduleArgs),
    /// Browse messages without locking them.
    Peek(cmd::message::PeekArgs),
    /// Inspect and recover dead letters.
    #[command(subcommand)]
    Dlq(cmd::dlq::DlqCommand),
    /// Automatic replay of dead letters: where each queue's records stand.
    #[command(subcommand)]
    Replay(cmd::replay::ReplayCommand),
    /// Show live counts of one queue or of all.
    Stats(cmd::stats::StatsArgs),
    /// Manage API tokens (admin).
    #[command(subcommand)]
    Token(cmd::access::TokenCommand),
    /// Read and verify the audit log (admin).
    #[command(subcommand)]
    Audit(cmd::access::AuditCommand),
    /// The idempotency register: which message types a replay may republish.
    #[command(subcommand)]
    Register(cmd::register::RegisterCommand),
    /// Recovery cases: search, show and work them (claim first), replay one.
    #[command(subcommand)]
    Case(cmd::case::CaseCommand),
    /// A producer's intents: show, cancel or supersede one (its open cases close).
    #[command(subcommand)]
    Intent(cmd::case::IntentCommand),
    /// Effect authorities: who answers whether a message type's effect happened.
    #[command(subcommand)]
    EffectAuthority(cmd::case::EffectAuthorityCommand),
    #[command(flatten)]
    Topics(cmd::topic::TopicCommands),
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

async fn run(cli: Cli) -> anyhow::Result<()> {
    let ctx = || -> anyhow::Result<Ctx> {
        let trust = redrive_tls::Trust::load(cli.ca_file.as_deref())
            .map_err(|e| failure::input_error(format!("--ca-file: {e}")))?;
        let client = client::Client::trusting(&cli.url, Duration::from_secs(60), &trust)
            .map_err(|e| failure::input_error(format!("{e:#}")))?
            .with_token(cli.token.clone());
        Ok(Ctx {
            client,
            json: cli.json,
        })
    };
    match cli.command {
        Command::Serve(args) => serve::run(args, cli.ca_file.clone()).await,
        Command::Migrate(args) => migrate::run(args, cli.json).await,
        Command::Queue(c) => cmd::queue::run(&ctx()?, c).await,
        Command::Send(a) => cmd::message::send(&ctx()?, a).await,
        Command::Receive(a) => cmd::message::receive(&ctx()?, a).await,
        Command::Settle(a) => cmd::message::settle(&ctx()?, a).await,
        Command::Unschedule(a) => cmd::message::unschedule(&ctx()?, a).await,
        Command::Peek(a) => cmd::message::peek(&ctx()?, a).await,
        Command::Dlq(c) => cmd::dlq::run(&ctx()?, c).await,
        Command::Replay(c) => cmd::replay::run(&ctx()?, c).await,
        Command::Stats(a) => cmd::stats::run(&ctx()?, a).await,
        Command::Token(c) => cmd::access::run_token(&ctx()?, c).await,
        Command::Audit(c) => cmd::access::run_audit(&ctx()?, c).await,
        Command::Register(c) => cmd::register::run(&ctx()?, c).await,
        Command::Case(c) => cmd::case::run(&ctx()?, c).await,
        Command::Intent(c) => cmd::case::run_intent(&ctx()?, c).await,
        Command::EffectAuthority(c) => cmd::case::run_effect_authority(&ctx()?, c).await,
        Command::Topics(c) => cmd::topic::run(&ctx()?, c).await,
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
