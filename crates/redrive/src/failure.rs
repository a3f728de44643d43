//! How a command failed, and the process exit code for each kind of failure.
//!
//! Exit codes: 0 success; 1 the server refused or failed the operation (not found,
//! conflict, 5xx); 2 invalid usage or input (bad flag, bad duration, invalid name, a
//! request the server rejected as malformed or invalid, a bad config file); 3 the server
//! could not be reached.

use std::fmt;

use redrive_api::Problem;
use redrive_client::{
    AccessError, AdminError, ErrorKind, ReceiveError, RecoveryError, SendError, SessionError,
    SettleError,
};

/// Text for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the server refused or failed the operation (not found, conflict, server error)
  2  invalid usage or input (bad flag or value, invalid name, invalid config,
     or a request the server rejected as invalid)
  3  the server could not be reached
  4  a followed replay plan or move task ended stopped (its stop reason is printed)
  5  a case group's decision that some of its cases refused (each is printed; the
     others took it)";

/// Invalid input from the user (flags, files, config): exit code 2.
#[derive(Debug)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// A followed long operation (a replay plan, a move task) that ended stopped on one of
/// its stop conditions: exit code 4, so that a script notices.
#[derive(Debug)]
pub struct Stopped(pub String);

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stopped {}

/// A case group's decision that some members refused while the others took it: exit
/// code 5, so that a script notices.
#[derive(Debug)]
pub struct Partial(pub String);

impl fmt::Display for Partial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Partial {}

/// Shorthand: an `anyhow::Error` carrying an [`InputError`].
pub fn input_error(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(msg.into()))
}

/// What the CLI reads of a failed call of the client, whatever its operation family.
struct Call<'a> {
    kind: ErrorKind,
    problem: Option<&'a Problem>,
    status: Option<u16>,
    detail: Option<&'a str>,
    error: &'a (dyn std::error::Error + 'static),
}

/// The client's error in `cause`, when it is one.
fn call<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<Call<'a>> {
    macro_rules! try_family {
        ($($t:ty),*) => {$(
            if let Some(e) = cause.downcast_ref::<$t>() {
                return Some(Call {
                    kind: e.kind(),
                    problem: e.problem(),
                    status: e.status(),
                    detail: e.detail(),
                    error: cause,
                });
            }
        )*};
    }
    try_family!(
        AdminError,
        RecoveryError,
        AccessError,
        SendError,
        ReceiveError,
        SettleError,
        SessionError
    );
    None
}

impl Call<'_> {
    /// Whether the server could not be reached at all (no answer: refused, reset, timed
    /// out, a TLS failure).
    fn unreachable(&self) -> bool {
        self.status.is_none() && matches!(self.kind, ErrorKind::Transport | ErrorKind::Timeout)
    }

    /// The failure as one line: the problem's title, detail and code; or what kept the
    /// server from answering.
    fn render(&self) -> String {
        if let Some(p) = self.problem {
            return problem_line(p);
        }
        if self.unreachable() {
            let transport = self
                .error
                .source()
                .and_then(|s| s.downcast_ref::<reqwest::Error>());
            let cause = self.error.source().map_or_else(
                || self.kind.to_string(),
                |s| {
                    redrive_tls::tls_failure(s).map_or_else(|| root_cause(s), |tls| tls.to_string())
                },
            );
            return match transport.and_then(reqwest::Error::url) {
                Some(url) => format!("cannot reach the server at {url}: {cause}"),
                None => format!("cannot reach the server: {cause}"),
            };
        }
        match (self.status, self.detail) {
            (Some(_), Some(d)) if d.starts_with("HTTP ") => format!("server answered {d}"),
            _ => self.error.to_string(),
        }
    }
}

/// A problem document as one line: `Title: detail (code, field f, reason)`.
fn problem_line(p: &Problem) -> String {
    let mut line = p.title.clone();
    if let Some(d) = &p.detail {
        line.push_str(&format!(": {d}"));
    }
    line.push_str(&format!(" ({}", p.code));
    if let Some(field) = p.extra.get("field").and_then(|v| v.as_str()) {
        line.push_str(&format!(", field {field}"));
    }
    // A case's or plan's conflict reason is a stable code the detail does not repeat.
    if (p.code == "case_conflict" || p.code == "plan_conflict")
        && let Some(reason) = p.extra.get("reason").and_then(|v| v.as_str())
    {
        line.push_str(&format!(", {reason}"));
    }
    line.push(')');
    line
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The error as the CLI prints it: each context, then the cause, joined by `: `; a failed
/// call of the client is said as its problem document (or why no answer came), and ends
/// the line. A cause that its wrapper's message already ends with (an error that shows
/// its source, as the store's do) is said once.
pub fn render(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        if let Some(c) = call(cause) {
            parts.push(c.render());
            break;
        }
        let text = cause.to_string();
        if parts.last().is_some_and(|p| p.ends_with(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
}

/// A client error as the CLI prints it (see [`render`]).
pub fn client_line(err: &(dyn std::error::Error + 'static)) -> String {
    call(err).map_or_else(|| err.to_string(), |c| c.render())
}

/// The exit code for an error, from the first classified cause in its chain.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.downcast_ref::<InputError>().is_some() {
            return 2;
        }
        if cause.downcast_ref::<Stopped>().is_some() {
            return 4;
        }
        if cause.downcast_ref::<Partial>().is_some() {
            return 5;
        }
        if let Some(c) = call(cause) {
            return client_exit_code(&c);
        }
    }
    1
}

fn client_exit_code(err: &Call<'_>) -> u8 {
    if err.unreachable() {
        return 3;
    }
    match err.status {
        // Malformed, invalid, too large, unsupported media type: the input was wrong.
        Some(400 | 413 | 415 | 422) => 2,
        // Refused by the client's own check before it was sent.
        None if err.kind == ErrorKind::Invalid => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_api::ErrorCode;

    #[test]
    fn a_cause_its_wrapper_already_shows_is_said_once() {
        #[derive(Debug)]
        struct Shows(std::io::Error);
        impl std::fmt::Display for Shows {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "storage error: {}", self.0)
            }
        }
        impl std::error::Error for Shows {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Shows(std::io::Error::other("the file is in use")))
            .context("cannot open the store");
        assert_eq!(
            render(&e),
            "cannot open the store: storage error: the file is in use"
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("write");
        assert_eq!(render(&plain), "write: disk full");
    }

    #[test]
    fn input_errors_exit_2_even_under_context() {
        let e = input_error("bad").context("while doing x");
        assert_eq!(exit_code(&e), 2);
    }

    #[test]
    fn classified_causes_set_the_exit_code() {
        assert_eq!(exit_code(&anyhow::anyhow!("other")), 1);
        let partial = anyhow::Error::new(Partial("2 of 5 refused".into())).context("claim");
        assert_eq!(exit_code(&partial), 5);
        let stopped = anyhow::Error::new(Stopped("plan_1 stopped".into())).context("follow");
        assert_eq!(exit_code(&stopped), 4);
    }

    #[test]
    fn problems_read_as_one_line() {
        let p = Problem::new(ErrorCode::QueueNotFound, "queue \"nope\" does not exist");
        assert_eq!(
            problem_line(&p),
            "Queue not found: queue \"nope\" does not exist (queue_not_found)"
        );
        let p = Problem::new(ErrorCode::InvalidPolicy, "must be between 1 and 10000")
            .with("field", "max_delivery_count");
        assert_eq!(
            problem_line(&p),
            "Invalid queue policy: must be between 1 and 10000 (invalid_policy, field max_delivery_count)"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_exits_3_and_names_the_url() {
        // Port 1 on loopback: nothing listens there, the connection is refused.
        let client = redrive_client::Client::builder("http://127.0.0.1:1")
            .retry(redrive_client::RetryOptions::none())
            .build()
            .unwrap();
        let err = client.admin().list_queues().await.unwrap_err();
        let err = anyhow::Error::new(err).context("list queues");
        assert_eq!(exit_code(&err), 3);
        let line = render(&err);
        assert!(
            line.starts_with(
                "list queues: cannot reach the server at http://127.0.0.1:1/v1/queues: "
            ),
            "{line}"
        );
    }
}
