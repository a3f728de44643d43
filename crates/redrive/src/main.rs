//! The `redrive` binary: `serve` runs the broker; the other commands operate a running
//! server over its HTTP API (the load tool is `redrive-bench`, a crate of its own). This
//! file only parses arguments and dispatches.

mod cmd;
mod config;
mod migrate;
mod serve;

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
// The package's library half (shared with `redrive-bench`), under the names the commands use.
use redrive::{failure, output, progress, units};

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
        default_value = "http://127.0.0.1:7474",
        help_heading = GLOBAL
    )]
    url: String,
    /// API token (`rdt_…`) sent with every request; needed when the server has
    /// authentication on.
    #[arg(long, global = true, env = "REDRIVE_TOKEN", hide_env_values = true, help_heading = GLOBAL)]
    token: Option<String>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    /// A PEM file of extra certificate authorities to trust besides the platform's: for an
    /// `https://` server URL and, with `serve`, for every outgoing request (`ca_file`).
    #[arg(long, global = true, env = "REDRIVE_CA_FILE", value_name = "FILE", help_heading = GLOBAL)]
    ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The help section of the options every command takes.
const GLOBAL: &str = "Global options";

/// The operator options `serve` does not take (it is the server, not a client of one).
const NOT_FOR_SERVE: [&str; 3] = ["url", "token", "json"];

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
    /// Dead letters across queues grouped by failure signature (reason, outcome, type,
    /// source and the description with ids and numbers masked), newest first.
    Failures(cmd::failures::FailuresArgs),
    /// Replaying dead letters: automatic replay's standing per queue, and bounded replay
    /// plans over recovery cases (preview, plan, start, pause, resume, cancel, follow,
    /// items); SQS move tasks show here as plans too.
    #[command(subcommand)]
    Replay(cmd::replay::ReplayCommand),
    /// A queue's sessions: what waits in each and who holds it.
    #[command(subcommand)]
    Session(cmd::session::SessionCommand),
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
    quiet_on_closed_stdout();
    let cli = match parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
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
    let (result, warning) = runtime.block_on(run(cli));
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", failure::render(&e));
            ExitCode::from(failure::exit_code(&e))
        }
    };
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    code
}

/// The exit status of a process whose reader closed its standard output (128 + SIGPIPE,
/// what a shell reports for a program the signal stopped).
const CLOSED_STDOUT: i32 = 141;

/// A command whose output goes to a reader that stopped reading (`redrive … | head -1`)
/// ends quietly, as a program stopped by SIGPIPE does, instead of with a panic and a
/// backtrace: Rust ignores SIGPIPE, so a write to the closed pipe fails and `println!`
/// panics on it. Every other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(CLOSED_STDOUT);
        }
        report(info);
    }));
}

/// The command line as clap reads it, with two changes: every option that takes a value
/// takes a negative number as its value (so that `--max-delivery-count -1` reaches the
/// option's range check instead of being read as a flag), and `serve` refuses the
/// operator options (`--url`, `--token`, `--json`), which it would otherwise ignore.
fn command() -> clap::Command {
    let serve_refuses = |mut c: clap::Command| {
        for id in NOT_FOR_SERVE {
            let arg = clap::Arg::new(id).long(id).hide(true);
            c = c.arg(if id == "json" {
                arg.action(clap::ArgAction::SetTrue)
            } else {
                arg.action(clap::ArgAction::Set)
            });
        }
        c
    };
    negative_numbers_as_values(Cli::command()).mut_subcommand("serve", serve_refuses)
}

/// Lets every option and positional value of `cmd` and its subcommands be a negative
/// number, and a duration, time, size or count option take any value that starts with
/// `-` (`-5s`, `-1h` for "an hour ago"), so that its own parser says what is wrong with
/// it rather than clap reading it as flags.
fn negative_numbers_as_values(cmd: clap::Command) -> clap::Command {
    const SIGNED: [&str; 8] = ["DUR", "DUR|none", "TIME", "N", "SEQ", "SIZE", "MIN", "RATE"];
    let cmd = cmd.mut_args(|a| {
        if !a.get_action().takes_values() {
            return a;
        }
        let signed = a
            .get_value_names()
            .is_some_and(|names| names.iter().any(|n| SIGNED.contains(&n.as_str())));
        a.allow_negative_numbers(true).allow_hyphen_values(signed)
    });
    cmd.mut_subcommands(negative_numbers_as_values)
}

/// Parses `args` (the program's name first).
fn parse(args: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    if let Some(serve) = matches.subcommand_matches("serve") {
        for id in NOT_FOR_SERVE {
            if serve.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
                return Err(cmd.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!("--{id} is an option of the operator commands, not of serve"),
                ));
            }
        }
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// Prints a usage error as one `error:` line and the help hint of the command it is
/// about, and returns exit code 2; help and version go out as clap prints them.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        _ => {}
    }
    eprintln!("{}", one_line(e));
    ExitCode::from(2)
}

/// A clap error as one line and the hint: `error: …` and `For more information, try
/// 'redrive <command> --help'.`
fn one_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    // The first paragraph, its lines joined (a list of missing arguments goes on the same
    // line); clap's tips and usage after it are left out.
    let first = text
        .trim_start()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut first = if first.is_empty() {
        "error: invalid usage".to_owned()
    } else {
        first
    };
    // A similar name clap found is worth keeping (`a similar subcommand exists: 'create'`).
    if let Some(similar) = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tip: "))
        .find(|t| t.starts_with("a similar"))
    {
        first = format!("{first} ({similar})");
    }
    let path = command_path(std::env::args().skip(1));
    format!("{first}\nFor more information, try '{path} --help'.")
}

/// The subcommand path the arguments name (`redrive queue create`), for the help hint:
/// each argument that names a subcommand of the one before it, up to the first other
/// value (an option's value is passed over).
fn command_path(args: impl Iterator<Item = String>) -> String {
    let root = Cli::command();
    let takes_value = |c: &clap::Command, long: &str| {
        c.get_arguments()
            .chain(root.get_arguments())
            .any(|a| a.get_long() == Some(long) && a.get_action().takes_values())
    };
    let mut path = vec![root.get_name().to_owned()];
    let mut current = &root;
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        if let Some(long) = a.strip_prefix("--") {
            if !long.contains('=') && takes_value(current, long) {
                args.next();
            }
            continue;
        }
        if a.starts_with('-') {
            continue;
        }
        match current.find_subcommand(&a) {
            Some(sub) => {
                path.push(sub.get_name().to_owned());
                current = sub;
            }
            None => break,
        }
    }
    path.join(" ")
}

/// Runs the command; the second value is a warning for after its outcome (a token the
/// server did not check).
async fn run(cli: Cli) -> (anyhow::Result<()>, Option<String>) {
    let url = cli.url.clone();
    let client: std::sync::OnceLock<redrive_client::Client> = std::sync::OnceLock::new();
    let result = dispatch(cli, &client).await;
    let warning = client
        .get()
        .is_some_and(redrive_client::Client::token_unchecked)
        .then(|| format!("the server at {url} runs without authentication: the token sent (--token or REDRIVE_TOKEN) was not checked"));
    (result, warning)
}

/// Runs the command; `client` keeps the client it made, for what it learnt of the server.
async fn dispatch(
    cli: Cli,
    client: &std::sync::OnceLock<redrive_client::Client>,
) -> anyhow::Result<()> {
    let ctx = || -> anyhow::Result<Ctx> {
        let trust = redrive_tls::Trust::load(cli.ca_file.as_deref())
            .map_err(|e| failure::input_error(format!("--ca-file: {e}")))?;
        // One attempt per request, as the CLI always made: a script sees each failure
        // as it happens and decides itself whether to run the command again.
        let mut builder = redrive_client::Client::builder(cli.url.clone())
            .timeout(Duration::from_secs(60))
            .retry(redrive_client::RetryOptions::none())
            .trust(trust);
        if let Some(token) = cli.token.as_deref().filter(|t| !t.trim().is_empty()) {
            builder = builder.token(token);
        }
        let made = builder
            .build()
            .map_err(|e| failure::input_error(e.to_string()))?;
        Ok(Ctx {
            client: client.get_or_init(|| made).clone(),
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
        Command::Failures(a) => cmd::failures::run(&ctx()?, a).await,
        Command::Replay(c) => cmd::replay::run(&ctx()?, c).await,
        Command::Session(c) => cmd::session::run(&ctx()?, c).await,
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
        command().debug_assert();
    }

    fn args(line: &str) -> Vec<std::ffi::OsString> {
        line.split(' ').map(Into::into).collect()
    }

    #[test]
    fn a_negative_number_reaches_the_range_check() {
        let e = parse(args("redrive queue create q --max-delivery-count -1")).unwrap_err();
        let text = e.render().to_string();
        assert!(
            text.contains("-1 is out of range (expected a whole number from 1 to 10000)"),
            "{text}"
        );
        assert!(
            !text.contains("-- -1"),
            "no tip to pass it after --: {text}"
        );
        let e = parse(args("redrive dlq list q --limit 0")).unwrap_err();
        assert!(e.render().to_string().contains("from 1 to 1000"), "{e}");
        assert!(parse(args("redrive queue create q --max-delivery-count 10000")).is_ok());
    }

    #[test]
    fn serve_refuses_the_operator_options() {
        for flag in ["--url http://x", "--token rdt_x", "--json"] {
            let e = parse(args(&format!("redrive serve {flag}"))).unwrap_err();
            let text = e.render().to_string();
            assert!(text.contains("not of serve"), "{flag}: {text}");
        }
        assert!(parse(args("redrive serve --ca-file ca.pem")).is_ok());
        assert!(parse(args("redrive --json stats")).is_ok());
    }

    #[test]
    fn the_help_hint_names_the_command_the_arguments_name() {
        let a = [
            "--url",
            "http://x",
            "queue",
            "create",
            "q",
            "--max-delivery-count",
            "-1",
        ];
        assert_eq!(
            command_path(a.iter().map(|s| s.to_string())),
            "redrive queue create"
        );
        assert_eq!(command_path(std::iter::empty()), "redrive");
        let a = ["topic", "sub", "create", "t"];
        assert_eq!(
            command_path(a.iter().map(|s| s.to_string())),
            "redrive topic"
        );
    }
}
