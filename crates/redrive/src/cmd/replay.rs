//! The auto-replay flags shared by `queue create|update` and `sub create|update`, and how
//! `queue show` / `sub show` print the policy.

use clap::Args;
use redrive_core::replay::{AutoReplay, AutoReplayPatch, ReplayDestination};

use crate::output::KeyValues;
use crate::units::{format_duration_ms, parse_duration_ms, parse_size_u32};

/// Auto-replay flags: only those given are set (a create starts from the defaults).
#[derive(Debug, Clone, Default, Args)]
pub struct ReplayArgs {
    /// Replay live dead letters automatically (`=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub auto_replay: Option<bool>,
    /// Replays of one event before it is quarantined (1 to 100; default 3).
    #[arg(long, value_name = "N")]
    pub max_replay_attempts: Option<u32>,
    /// Delay before a dead letter is judged for replay (e.g. 30s; at most 7d; default 0).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
    pub replay_delay: Option<u64>,
    /// Byte budget of one republished chunk (e.g. 512KiB; 1KiB to 256MiB; default 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub replay_chunk_bytes: Option<u32>,
    /// Event budget of one republished chunk (1 to 5000; default 5000).
    #[arg(long, value_name = "N")]
    pub replay_chunk_events: Option<u32>,
}

impl ReplayArgs {
    /// The fields given, as a patch of the auto-replay policy.
    pub fn patch(&self) -> AutoReplayPatch {
        AutoReplayPatch {
            enabled: self.auto_replay,
            max_replay_attempts: self.max_replay_attempts,
            judge_delay_ms: self.replay_delay,
            max_chunk_bytes: self.replay_chunk_bytes,
            max_chunk_events: self.replay_chunk_events,
            destination: None,
        }
    }
}

/// Adds the auto-replay policy to `kv`, one line per field; `sep` joins the words of a
/// key (`_` for `queue show`, ` ` for `sub show`, as their other keys).
pub fn describe(kv: &mut KeyValues, a: &AutoReplay, sep: &str) {
    let key = |k: &str| k.replace('_', sep);
    kv.add(key("auto_replay"), if a.enabled { "on" } else { "off" })
        .add(
            key("max_replay_attempts"),
            a.max_replay_attempts.to_string(),
        )
        .add(key("replay_delay"), format_duration_ms(a.judge_delay_ms))
        .add(key("replay_chunk_bytes"), a.max_chunk_bytes.to_string())
        .add(key("replay_chunk_events"), a.max_chunk_events.to_string())
        .add(
            key("replay_destination"),
            match a.destination {
                ReplayDestination::Origin => "origin",
            },
        );
}
