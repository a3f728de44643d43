//! How a command failed, and the process exit code for each kind of failure.
//!
//! Exit codes: 0 success; 1 the server refused or failed the operation (not found,
//! conflict, 5xx); 2 invalid usage or input (bad flag, bad duration, invalid name, a
//! request the server rejected as malformed or invalid, a bad config file); 3 the server
//! could not be reached.

use std::fmt;

use crate::client::ClientError;

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
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return client_exit_code(c);
        }
    }
    1
}

fn client_exit_code(err: &ClientError) -> u8 {
    if err.is_unreachable() {
        return 3;
    }
    match err.status() {
        // Malformed, invalid, too large, unsupported media type: the input was wrong.
        Some(400 | 413 | 415 | 422) => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_api::{ErrorCode, Problem};

    #[test]
    fn input_errors_exit_2_even_under_context() {
        let e = input_error("bad").context("while doing x");
        assert_eq!(exit_code(&e), 2);
    }

    #[test]
    fn server_problems_exit_by_kind() {
        let invalid = ClientError::Problem(Box::new(Problem::new(ErrorCode::InvalidName, "x")));
        assert_eq!(exit_code(&anyhow::Error::new(invalid)), 2);
        let missing = ClientError::Problem(Box::new(Problem::new(ErrorCode::QueueNotFound, "x")));
        assert_eq!(exit_code(&anyhow::Error::new(missing).context("show")), 1);
        assert_eq!(exit_code(&anyhow::anyhow!("other")), 1);
        let partial = anyhow::Error::new(Partial("2 of 5 refused".into())).context("claim");
        assert_eq!(exit_code(&partial), 5);
        let stopped = anyhow::Error::new(Stopped("plan_1 stopped".into())).context("follow");
        assert_eq!(exit_code(&stopped), 4);
    }
}
