//! Operator commands against a running server, one file per command family; each prints
//! tables by default and the API's JSON with `--json`.

pub mod access;
pub mod case;
pub mod case_group;
pub mod dlq;
pub mod failures;
pub mod message;
pub mod queue;
pub mod register;
pub mod replay;
pub mod session;
pub mod stats;
pub mod topic;

pub use crate::units::queue_name;
use redrive_client::Client;

/// What every operator command gets.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The server's client.
    pub client: Client,
    /// Print the API's JSON instead of tables.
    pub json: bool,
}

/// A clap value parser for dead-letter areas.
pub fn area(s: &str) -> Result<String, String> {
    match s {
        "live" | "archived" | "quarantine" => Ok(s.to_owned()),
        _ => Err(format!(
            "invalid area {s:?} (expected live, archived or quarantine)"
        )),
    }
}
