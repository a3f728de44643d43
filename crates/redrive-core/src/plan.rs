//! Bounded replay (seed 001, "Turn 'replay slowly' into a testable budget"): the budget of
//! a replay plan, the pacing that keeps every admission inside it, admission windows, and
//! the stop conditions — pure functions over what the caller observed, time passed in.
//!
//! # The budget ([`Budget`])
//!
//! A plan names every limit explicitly: items per second, bytes per second, concurrent
//! deliveries, the admission window (default [`DEFAULT_WINDOW`]) and a dependency
//! reservation (a named dependency with a health probe and its error-rate and latency
//! thresholds). A plan that leaves one out is refused ([`BudgetSpec::check`], matrix row
//! 9: "start an unbounded bulk redrive" is rejected): a limit nobody chose is no limit.
//! Each limit has a range a production plan stays inside, judged here and only here (one
//! `check_…` function per field, edges included): items per second 0.001 to 100,000,
//! bytes per second 1 KiB to 10 GiB, 1 to 1,000 concurrent deliveries, windows of 1 to
//! 100,000, one dependency named by a 1 to 128 character identifier with an http(s)
//! probe of at most 2,048 bytes, an error-rate threshold of 0 to 1 and a latency
//! threshold of 1 ms to one hour; the owner's lease is one minute to seven days and the
//! observation window 100 ms to one hour; a node's failing-path window (how recent a
//! dead letter of the destination with an item's reason makes the destination the failing
//! path, [`failing_path_clears_at`]) one second to 24 hours. NaN and infinities are refused.
//!
//! # Pacing ([`Pacer`])
//!
//! Admissions are spaced, never burst: after an item is admitted at `t`, the next one may
//! be admitted at `t + 1/items_per_s` at the earliest, and not before the bytes already
//! admitted have been paid for at `bytes_per_s` (an item of `b` bytes admitted at `t`
//! holds the byte budget until `t + b / bytes_per_s`). Both are counted from the time the
//! item was actually admitted, never from a slot that came due earlier: a look that comes
//! late admits one item, not the slots it missed (nothing is saved up, nothing caught
//! up). The two budgets hold independently: a large item waits for the byte budget
//! although the item budget has room. An item larger than one second of the byte budget
//! is never admitted under it ([`Admission::TooLarge`]): it takes a separate path.
//! Concurrency is counted in deliveries admitted and not yet finished.
//!
//! The bound, whatever the times of the looks: over any interval `[a, b]` of the clock,
//!
//! - items admitted ≤ 1 + items_per_s × (b − a);
//! - bytes admitted ≤ bytes_per_s × (b − a) + the bytes of the last item admitted in it
//!   (so at most bytes_per_s × (b − a) + the largest item).
//!
//! The clock counts whole milliseconds, so two admissions are never in the same
//! millisecond: a rate above 1,000 items/s admits one item a millisecond, and a gap that
//! is not a whole number of milliseconds is waited out to the next one (at 3 items/s the
//! items go 334 ms apart). The property test `no_interval_exceeds_either_rate` states
//! the bound this way, over arbitrary look times and item sizes.
//!
//! A look need not come at every slot: it admits, each at its own slot
//! ([`Pacer::slot`]), the items whose slots fall within [`LEAD_MS`] after it — each at
//! the time, and in the order, that a look at its slot would have admitted it, and its
//! replay is scheduled for that time (not delivered before it). So the bound above holds
//! over the admission times, whatever the looks (`a_look_ahead_admits_at_the_slots_a_look_at_each_would`,
//! `no_interval_exceeds_either_rate_with_a_lead`), and a plan at 1,000 items/s needs a
//! look every [`LEAD_MS`], not every millisecond. Nothing is caught up: a slot that came
//! due before the look is taken at the look's time, one item, as before.

//! # Windows ([`Window`])
//!
//! Items are admitted one at a time within a window of `window` items. The next window
//! opens only when every item of the current one has reached a terminal or named
//! no-replay state and the gates still pass (the caller re-checks them).
//!
//! # A look ([`look`]) and the admission gates ([`gates`])
//!
//! What one look at a running plan decides, given what the runner found: each observed
//! replay's transition, whether the next window opens, the dependency probe due, stop or
//! completion and the next wake ([`look`]); and, for each waiting item, the admission
//! gates in their order ([`gates`]).
//!
//! # Stop conditions ([`stop`])
//!
//! Each halts the plan with its reason: effect evidence unavailable for an item; one
//! replay with an indeterminate effect; two replays showing the same failure shape; the
//! dependency's error rate over its threshold; its latency over its threshold for two
//! observation windows in a row; ordering or authorization evidence changed; the owner's
//! lease lost; a budget that cannot be observed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

pub mod gates;
pub mod look;

/// How far behind a look may catch up on slots that came due since the last one, ms:
/// none (a catch-up would admit several items at one instant, over the bound).
pub const CATCH_UP_MS: f64 = 0.0;

/// How far ahead of its own time a look admits items, each at its own slot, ms (see
/// "Pacing" above): a look admits what looks at every slot of the next 50 ms would have.
pub const LEAD_MS: i64 = 50;

/// The admission window of a plan that does not name one.
pub const DEFAULT_WINDOW: u32 = 10;
/// The least time between two looks of a plan at replays in flight, ms.
pub const LOOK_GAP_MS: i64 = 20;
/// The largest admission window: as many items as a plan holds (one window for all).
pub const MAX_WINDOW: u32 = 100_000;
/// The lowest item rate a plan may name (items per second): one item every 1,000 s
/// (about 17 minutes). Slower is a paused plan, not a rate.
pub const MIN_ITEMS_PER_S: f64 = 0.001;
/// The highest item rate a plan may name (items per second).
pub const MAX_ITEMS_PER_S: u32 = 100_000;
/// The lowest byte rate a plan may name (bytes per second): 1 KiB/s. An item larger than
/// one second of the byte budget is never admitted under it, so a lower rate would hold
/// all but the smallest items; the item rate is the way to go slower.
pub const MIN_BYTES_PER_S: u64 = 1_024;
/// The highest byte rate a plan may name (bytes per second): 10 GiB/s, beyond any
/// network path a replay takes.
pub const MAX_BYTES_PER_S: u64 = 10 * 1024 * 1024 * 1024;
/// The most concurrent deliveries a plan may name.
pub const MAX_CONCURRENCY: u32 = 1_000;
/// The dependencies a plan names: exactly one reservation (its name, probe and
/// thresholds). The wire has one `dependency` object, not a list.
pub const DEPENDENCIES: usize = 1;
/// The longest dependency name, characters (see [`check_dependency_name`]).
pub const MAX_DEPENDENCY_NAME_LEN: usize = 128;
/// The longest probe URL, bytes.
pub const MAX_PROBE_URL_LEN: usize = 2_048;
/// The highest latency threshold a plan may name, ms: one hour (the probe itself gives
/// up after 5 s, so a higher threshold could never be reached).
pub const MAX_LATENCY_MS: u64 = 60 * 60 * 1000;
/// The owner's lease of a plan that names none, ms (renewed by `start` and `resume`).
pub const DEFAULT_PLAN_LEASE_MS: u64 = 60 * 60 * 1000;
/// The shortest owner's lease, ms: one minute (a shorter one runs out before the plan is
/// started).
pub const MIN_PLAN_LEASE_MS: u64 = 60 * 1000;
/// The longest owner's lease, ms: seven days.
pub const MAX_PLAN_LEASE_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The dependency's observation window of a plan that names none, ms.
pub const DEFAULT_OBSERVE_MS: u64 = 10_000;
/// The shortest observation window, ms.
pub const MIN_OBSERVE_MS: u64 = 100;
/// The longest observation window, ms: one hour.
pub const MAX_OBSERVE_MS: u64 = 60 * 60 * 1000;
/// The longest correction reference, bytes.
pub const MAX_CORRECTION_LEN: usize = 256;
/// The failing-path window of a node that names none, ms: five minutes (see
/// [`failing_path_clears_at`]).
pub const DEFAULT_FAILING_PATH_WINDOW_MS: u64 = 5 * 60 * 1000;
/// The shortest failing-path window, ms: one second. There is no window of 0: it would
/// turn the failing-path gate off, and a destination that repeats the failure is refused
/// by the seed's rule (matrix row 10), not by an option.
pub const MIN_FAILING_PATH_WINDOW_MS: u64 = 1_000;
/// The longest failing-path window, ms: 24 hours (a failure older than a day says little
/// about the destination now, and a longer window would hold plans for days).
pub const MAX_FAILING_PATH_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

/// A dependency the replay draws on, with its health probe and thresholds. Stored as it
/// is (a plan's `spec.budget.dependency`): its field names are the stored JSON's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// Its name (for the record and the stop reason).
    pub name: String,
    /// The health probe (`http://` or `https://`).
    pub probe_url: String,
    /// The highest error rate (0 to 1) observed over a window that lets the plan go on.
    pub max_error_rate: f64,
    /// The highest latency (ms) observed over a window that lets the plan go on.
    pub max_latency_ms: u64,
}

/// A budget as asked for: every field must be given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetSpec {
    /// Items admitted per second.
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second.
    pub bytes_per_s: Option<u64>,
    /// Deliveries in flight at once.
    pub max_concurrent: Option<u32>,
    /// Items per admission window (default [`DEFAULT_WINDOW`] when the caller says so
    /// explicitly by leaving it out; see [`BudgetSpec::check`]).
    pub window: Option<u32>,
    /// The dependency reservation.
    pub dependency: Option<Dependency>,
}

/// A budget with every limit named. Stored as it is (a plan's `spec.budget`): its field
/// names are the stored JSON's, so rows written before keep decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Items admitted per second.
    pub items_per_s: f64,
    /// Bytes admitted per second.
    pub bytes_per_s: u64,
    /// Deliveries in flight at once.
    pub max_concurrent: u32,
    /// Items per admission window.
    pub window: u32,
    /// The dependency reservation.
    pub dependency: Dependency,
}

/// Why a budget is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// Fields left out: an unbounded replay is refused.
    #[error("an unbounded replay is refused: name {}", .missing.join(", "))]
    Unbounded {
        /// The fields left out.
        missing: Vec<&'static str>,
    },
    /// A field out of its range.
    #[error("`{field}` {why}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

fn out_of_range(field: &'static str, why: String) -> BudgetError {
    BudgetError::OutOfRange { field, why }
}

/// A number as a refusal repeats it: as written when short, else in scientific notation
/// (`1e-300`, not three hundred digits).
fn shown(v: f64) -> String {
    let plain = v.to_string();
    if plain.len() <= 24 {
        plain
    } else {
        format!("{v:e}")
    }
}

/// `items_per_s`: a finite number from [`MIN_ITEMS_PER_S`] to [`MAX_ITEMS_PER_S`],
/// both included (NaN and infinities refused).
pub fn check_items_per_s(v: f64) -> Result<f64, BudgetError> {
    if v.is_finite() && (MIN_ITEMS_PER_S..=f64::from(MAX_ITEMS_PER_S)).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "items_per_s",
            format!(
                "must be a number from {MIN_ITEMS_PER_S} to {MAX_ITEMS_PER_S} (got {})",
                shown(v)
            ),
        ))
    }
}

/// `bytes_per_s`: a whole number from [`MIN_BYTES_PER_S`] (1 KiB/s) to
/// [`MAX_BYTES_PER_S`] (10 GiB/s), both included.
pub fn check_bytes_per_s(v: u64) -> Result<u64, BudgetError> {
    if (MIN_BYTES_PER_S..=MAX_BYTES_PER_S).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "bytes_per_s",
            format!(
                "must be from {MIN_BYTES_PER_S} (1 KiB/s) to {MAX_BYTES_PER_S} (10 GiB/s) (got {v})"
            ),
        ))
    }
}

/// `max_concurrent`: 1 to [`MAX_CONCURRENCY`].
pub fn check_max_concurrent(v: u32) -> Result<u32, BudgetError> {
    if (1..=MAX_CONCURRENCY).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "max_concurrent",
            format!("must be from 1 to {MAX_CONCURRENCY} (got {v})"),
        ))
    }
}

/// `window`: 1 to [`MAX_WINDOW`].
pub fn check_window(v: u32) -> Result<u32, BudgetError> {
    if (1..=MAX_WINDOW).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "window",
            format!("must be from 1 to {MAX_WINDOW} (got {v})"),
        ))
    }
}

/// `dependency.name`: 1 to [`MAX_DEPENDENCY_NAME_LEN`] characters of ASCII letters,
/// digits, `-`, `_`, `.` and `:`, starting with a letter or digit (`ledger-db`,
/// `payments.ledger:5432`). It names the dependency in the record, the stop reason and
/// the metrics, so it is a short identifier, not free text.
pub fn check_dependency_name(v: &str) -> Result<&str, BudgetError> {
    let grammar = "must be 1 to 128 characters of ASCII letters, digits, '-', '_', '.' and ':', starting with a letter or digit";
    let ok = !v.is_empty()
        && v.len() <= MAX_DEPENDENCY_NAME_LEN
        && v.as_bytes()[0].is_ascii_alphanumeric()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Ok(v)
    } else {
        Err(out_of_range(
            "dependency.name",
            format!("{grammar} (got {} bytes)", v.len()),
        ))
    }
}

/// `dependency.probe_url`: an `http://` or `https://` URL with a host, at most
/// [`MAX_PROBE_URL_LEN`] bytes, without whitespace or control characters. (Where it may
/// point is the network policy's, checked when it is read.)
pub fn check_probe_url(v: &str) -> Result<&str, BudgetError> {
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"));
    let ok = v.len() <= MAX_PROBE_URL_LEN
        && rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && !v.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(v)
    } else {
        Err(out_of_range(
            "dependency.probe_url",
            format!(
                "must be an http:// or https:// URL with a host, at most {MAX_PROBE_URL_LEN} bytes without whitespace"
            ),
        ))
    }
}

/// `dependency.max_error_rate`: a finite number from 0 to 1, both included (0: any
/// error stops the plan; 1: the error rate never does).
pub fn check_max_error_rate(v: f64) -> Result<f64, BudgetError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "dependency.max_error_rate",
            format!("must be a number from 0 to 1 (got {})", shown(v)),
        ))
    }
}

/// `dependency.max_latency_ms`: 1 to [`MAX_LATENCY_MS`] (one hour).
pub fn check_max_latency_ms(v: u64) -> Result<u64, BudgetError> {
    if (1..=MAX_LATENCY_MS).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "dependency.max_latency_ms",
            format!("must be from 1 to {MAX_LATENCY_MS} (one hour) (got {v})"),
        ))
    }
}

/// `lease_ms`: [`MIN_PLAN_LEASE_MS`] (one minute) to [`MAX_PLAN_LEASE_MS`] (seven days);
/// [`DEFAULT_PLAN_LEASE_MS`] when absent.
pub fn check_lease_ms(v: Option<u64>) -> Result<u64, BudgetError> {
    let v = v.unwrap_or(DEFAULT_PLAN_LEASE_MS);
    if (MIN_PLAN_LEASE_MS..=MAX_PLAN_LEASE_MS).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "lease_ms",
            format!(
                "must be from {MIN_PLAN_LEASE_MS} (one minute) to {MAX_PLAN_LEASE_MS} (seven days) (got {v})"
            ),
        ))
    }
}

/// `observe_ms`: [`MIN_OBSERVE_MS`] to [`MAX_OBSERVE_MS`] (one hour);
/// [`DEFAULT_OBSERVE_MS`] when absent.
pub fn check_observe_ms(v: Option<u64>) -> Result<u64, BudgetError> {
    let v = v.unwrap_or(DEFAULT_OBSERVE_MS);
    if (MIN_OBSERVE_MS..=MAX_OBSERVE_MS).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "observe_ms",
            format!("must be from {MIN_OBSERVE_MS} to {MAX_OBSERVE_MS} (one hour) (got {v})"),
        ))
    }
}

/// The failing-path window of a node (`[replay_plans] failing_path_window`):
/// [`MIN_FAILING_PATH_WINDOW_MS`] (one second) to [`MAX_FAILING_PATH_WINDOW_MS`] (24
/// hours).
pub fn check_failing_path_window_ms(v: u64) -> Result<u64, BudgetError> {
    if (MIN_FAILING_PATH_WINDOW_MS..=MAX_FAILING_PATH_WINDOW_MS).contains(&v) {
        Ok(v)
    } else {
        Err(out_of_range(
            "failing_path_window",
            format!(
                "must be from {MIN_FAILING_PATH_WINDOW_MS} ms (one second) to {MAX_FAILING_PATH_WINDOW_MS} ms (24 hours) (got {v} ms)"
            ),
        ))
    }
}

/// When a destination stops being the failing path for a reason: `latest` is the latest
/// time the destination dead-lettered that reason (`None`: never). A destination is the
/// failing path while that dead letter is less than `window_ms` old, so it clears at
/// `latest + window_ms`; `None` when that time is not after `now` (it is off the failing
/// path now).
pub fn failing_path_clears_at(
    latest: Option<Timestamp>,
    window_ms: u64,
    now: Timestamp,
) -> Option<Timestamp> {
    let window = i64::try_from(window_ms).unwrap_or(i64::MAX);
    latest
        .map(|t| t.plus_millis(window))
        .filter(|clears| *clears > now)
}

/// `correction`: 1 to [`MAX_CORRECTION_LEN`] bytes, not blank, without NUL characters.
pub fn check_correction(v: &str) -> Result<&str, BudgetError> {
    if v.trim().is_empty() || v.len() > MAX_CORRECTION_LEN || v.contains('\0') {
        Err(out_of_range(
            "correction",
            format!("must be 1 to {MAX_CORRECTION_LEN} bytes, not blank, without NUL characters"),
        ))
    } else {
        Ok(v)
    }
}

impl BudgetSpec {
    /// The budget, if every limit is named and in range. The window alone may be left out
    /// (it has a documented default); item rate, byte rate, concurrency and the dependency
    /// reservation may not. Each field's range is its `check_…` function's: this is the
    /// one place a plan's budget is judged, before anything is stored.
    pub fn check(&self) -> Result<Budget, BudgetError> {
        let mut missing = Vec::new();
        if self.items_per_s.is_none() {
            missing.push("items_per_s");
        }
        if self.bytes_per_s.is_none() {
            missing.push("bytes_per_s");
        }
        if self.max_concurrent.is_none() {
            missing.push("max_concurrent");
        }
        if self.dependency.is_none() {
            missing.push("dependency");
        }
        let (Some(items), Some(bytes), Some(conc), Some(dep)) = (
            self.items_per_s,
            self.bytes_per_s,
            self.max_concurrent,
            self.dependency.clone(),
        ) else {
            return Err(BudgetError::Unbounded { missing });
        };
        check_items_per_s(items)?;
        check_bytes_per_s(bytes)?;
        check_max_concurrent(conc)?;
        let window = check_window(self.window.unwrap_or(DEFAULT_WINDOW))?;
        check_dependency_name(&dep.name)?;
        check_probe_url(&dep.probe_url)?;
        check_max_error_rate(dep.max_error_rate)?;
        check_max_latency_ms(dep.max_latency_ms)?;
        Ok(Budget {
            items_per_s: items,
            bytes_per_s: bytes,
            max_concurrent: conc,
            window,
            dependency: dep,
        })
    }
}

impl Budget {
    /// The least time `items` items of `bytes` bytes in all take under this budget, ms:
    /// the slower of the two rates, before processing time, pauses and reconciliation (a
    /// lower bound, not a promise). 240 items at 1/s is at least 240 s.
    pub fn lower_bound_ms(&self, items: u64, bytes: u64) -> u64 {
        let by_items = (items as f64 / self.items_per_s * 1000.0).ceil();
        let by_bytes = (bytes as f64 / self.bytes_per_s as f64 * 1000.0).ceil();
        by_items.max(by_bytes) as u64
    }

    /// The budget in words, for the case's admission entry.
    pub fn describe(&self) -> String {
        format!(
            "{} items/s, {} bytes/s, {} concurrent, window {}, dependency {} (error rate ≤ {}, latency ≤ {} ms)",
            self.items_per_s,
            self.bytes_per_s,
            self.max_concurrent,
            self.window,
            self.dependency.name,
            self.dependency.max_error_rate,
            self.dependency.max_latency_ms
        )
    }

    fn item_gap_ms(&self) -> f64 {
        1000.0 / self.items_per_s
    }

    /// How far behind `now` a look catches up on slots that came due meanwhile: never
    /// ([`CATCH_UP_MS`]); each admission is spaced from the one before it.
    pub fn catch_up_ms(&self) -> f64 {
        CATCH_UP_MS
    }

    /// When a plan whose next slot is `slot` looks again: at the slot (a look admits one
    /// item per slot, so a later look would lose slots, never gain them).
    pub fn next_look(&self, slot: Timestamp, _now: Timestamp) -> Timestamp {
        slot
    }

    fn byte_ms(&self, bytes: u64) -> f64 {
        bytes as f64 * 1000.0 / self.bytes_per_s as f64
    }
}

/// What the pacer answers for the next item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admit it now.
    Now,
    /// Not before this time (the item or the byte budget).
    At(Timestamp),
    /// The concurrency bound is reached: when a delivery finishes.
    Concurrency,
    /// Larger than one second of the byte budget: never admitted under it.
    TooLarge,
}

/// The pacing state of a running plan (durable: the caller stores it with the plan, so a
/// resumed plan keeps its spacing).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pacer {
    /// The earliest time the next item may be admitted by the item budget (ms, fractional).
    pub next_item_ms: f64,
    /// The time until which admitted bytes hold the byte budget (ms, fractional).
    pub bytes_until_ms: f64,
    /// Deliveries admitted and not yet finished.
    pub in_flight: u32,
}

impl Pacer {
    /// Whether an item of `bytes` may be admitted at `now` under `budget`.
    pub fn check(&self, budget: &Budget, bytes: u64, now: Timestamp) -> Admission {
        if bytes > budget.bytes_per_s {
            return Admission::TooLarge;
        }
        if self.in_flight >= budget.max_concurrent {
            return Admission::Concurrency;
        }
        let now_ms = now.as_millis() as f64;
        let at = self.next_item_ms.max(self.bytes_until_ms);
        if at <= now_ms {
            Admission::Now
        } else {
            Admission::At(Timestamp(at.ceil() as i64))
        }
    }

    /// The time the next item is admitted at by a look at `now` that lets it go: the
    /// first whole millisecond at which [`Pacer::check`] answers [`Admission::Now`] (`now`
    /// itself when it does already). A look admits it there ([`Pacer::admit`] at the slot)
    /// when the slot is at most [`LEAD_MS`] after `now`.
    pub fn slot(&self, now: Timestamp) -> Timestamp {
        let at = self.next_item_ms.max(self.bytes_until_ms).ceil();
        if at <= now.as_millis() as f64 {
            now
        } else {
            Timestamp(at as i64)
        }
    }

    /// Whether an item of `bytes` may be admitted by a look at `now` at its slot
    /// ([`Pacer::slot`], at most [`LEAD_MS`] ahead): [`Pacer::check`] at the end of the
    /// look's lead.
    pub fn check_ahead(&self, budget: &Budget, bytes: u64, now: Timestamp) -> Admission {
        self.check(budget, bytes, now.plus_millis(LEAD_MS))
    }

    /// Records the admission of an item of `bytes` at `now` (after [`Pacer::check`]
    /// answered [`Admission::Now`]): the next item no sooner than `1/items_per_s` after
    /// `now`, and the bytes held from `now` (or from when those before are paid for, were
    /// `now` earlier: an admission the check did not allow only pushes the next further).
    pub fn admit(&mut self, budget: &Budget, bytes: u64, now: Timestamp) {
        let now_ms = now.as_millis() as f64;
        self.next_item_ms = now_ms.max(self.next_item_ms) + budget.item_gap_ms();
        self.bytes_until_ms = now_ms.max(self.bytes_until_ms) + budget.byte_ms(bytes);
        self.in_flight += 1;
    }

    /// Records a delivery that finished (delivered, failed or stopped).
    pub fn finish(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// Where an item of a window stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemState {
    /// Not admitted yet.
    Waiting,
    /// Admitted; its outcome not yet observed.
    Admitted,
    /// Terminal or a named no-replay state.
    Settled,
}

/// The current admission window of a plan, counted (a plan keeps its counts, not its
/// items, so a window of 100,000 items costs nothing to look at).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// The window's number, from 1 (0: none opened yet).
    pub number: u32,
    /// Items admitted in it.
    pub admitted: u32,
    /// Of the plan's items, those admitted and not settled.
    pub in_flight: u32,
}

impl Window {
    /// Whether every item of the window has settled: the next window may open if the
    /// gates still pass.
    pub fn complete(&self) -> bool {
        self.admitted > 0 && self.in_flight == 0
    }

    /// Whether the window may take another item under `budget`.
    pub fn has_room(&self, budget: &Budget) -> bool {
        self.admitted < budget.window
    }

    /// How many more items the window takes under `budget`.
    pub fn room(&self, budget: &Budget) -> u32 {
        budget.window.saturating_sub(self.admitted)
    }

    /// Whether the next window opens at this look: none opened yet, or the current one
    /// full and complete — and items still wait (the caller re-checks the gates, the
    /// dependency read again first).
    pub fn opens(&self, budget: &Budget, waiting: bool) -> bool {
        waiting && (self.number == 0 || (!self.has_room(budget) && self.complete()))
    }

    /// The room a look reads ahead for: a whole window where the next one may open (none
    /// opened yet, or the current one full), else what the current one has left.
    pub fn room_ahead(&self, budget: &Budget) -> u32 {
        if self.number == 0 || !self.has_room(budget) {
            budget.window
        } else {
            self.room(budget)
        }
    }

    /// Opens the next window.
    pub fn open(&mut self) {
        self.number += 1;
        self.admitted = 0;
    }

    /// Records an item's move from `from` to `to`: an admission takes room in the window
    /// and is in flight until it settles; an admission undone gives both back.
    pub fn record(&mut self, from: ItemState, to: ItemState) {
        match (from, to) {
            (ItemState::Waiting, ItemState::Admitted) => {
                self.admitted += 1;
                self.in_flight += 1;
            }
            (ItemState::Admitted, ItemState::Settled) => {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            (ItemState::Admitted, ItemState::Waiting) => {
                self.admitted = self.admitted.saturating_sub(1);
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            _ => {}
        }
    }
}

/// What the plan observed since it last looked, for [`stop`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    /// Items whose effect evidence was unavailable (authority unreachable) at admission.
    pub effect_unavailable: Vec<String>,
    /// Replays whose effect came back indeterminate.
    pub effect_indeterminate: Vec<String>,
    /// Replays that failed, with their failure shape (reason).
    pub failures: Vec<(String, String)>,
    /// The dependency's error rate over the last observation window, if observed.
    pub error_rate: Option<f64>,
    /// The dependency's latency (ms) over the last two observation windows, latest last.
    pub latency_ms: Vec<u64>,
    /// Ordering evidence changed since the plan started.
    pub ordering_changed: bool,
    /// The owner's authorization changed (token revoked, rotated, grant removed).
    pub authorization_changed: bool,
    /// The owner's lease on the plan is lost.
    pub lease_lost: bool,
    /// A budget could not be observed (the dependency's probe gave nothing).
    pub budget_unobservable: bool,
}

/// Why a plan stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// Authoritative evidence for an item's prior effect became unavailable.
    EffectUnavailable {
        /// The item.
        item: String,
    },
    /// One replay produced an indeterminate effect.
    EffectIndeterminate {
        /// The item.
        item: String,
    },
    /// Two replays showed the same failure shape.
    RepeatedFailure {
        /// The shape.
        shape: String,
        /// The two items.
        items: [String; 2],
    },
    /// The dependency's error rate crossed its threshold.
    ErrorRate {
        /// Observed.
        observed: f64,
        /// The threshold.
        threshold: f64,
    },
    /// The dependency's latency crossed its threshold for two observation windows.
    Latency {
        /// Observed, the two windows.
        observed: [u64; 2],
        /// The threshold.
        threshold: u64,
    },
    /// Ordering evidence changed.
    OrderingChanged,
    /// Authorization evidence changed.
    AuthorizationChanged,
    /// The owner lost its lease.
    LeaseLost,
    /// A budget could not be observed.
    BudgetUnobservable,
}

impl StopReason {
    /// The reason's stable name (for the record and the metric label).
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::EffectUnavailable { .. } => "effect_unavailable",
            StopReason::EffectIndeterminate { .. } => "effect_indeterminate",
            StopReason::RepeatedFailure { .. } => "repeated_failure",
            StopReason::ErrorRate { .. } => "dependency_error_rate",
            StopReason::Latency { .. } => "dependency_latency",
            StopReason::OrderingChanged => "ordering_changed",
            StopReason::AuthorizationChanged => "authorization_changed",
            StopReason::LeaseLost => "lease_lost",
            StopReason::BudgetUnobservable => "budget_unobservable",
        }
    }
}

/// The first stop condition `o` meets under `budget`, if any, in the seed's order.
pub fn stop(budget: &Budget, o: &Observations) -> Option<StopReason> {
    if let Some(item) = o.effect_unavailable.first() {
        return Some(StopReason::EffectUnavailable { item: item.clone() });
    }
    if let Some(item) = o.effect_indeterminate.first() {
        return Some(StopReason::EffectIndeterminate { item: item.clone() });
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (item, shape) in &o.failures {
        if let Some(first) = seen.insert(shape.as_str(), item.as_str()) {
            return Some(StopReason::RepeatedFailure {
                shape: shape.clone(),
                items: [first.to_owned(), item.clone()],
            });
        }
    }
    let dep = &budget.dependency;
    if let Some(rate) = o.error_rate.filter(|r| *r > dep.max_error_rate) {
        return Some(StopReason::ErrorRate {
            observed: rate,
            threshold: dep.max_error_rate,
        });
    }
    if let [.., a, b] = o.latency_ms.as_slice()
        && *a > dep.max_latency_ms
        && *b > dep.max_latency_ms
    {
        return Some(StopReason::Latency {
            observed: [*a, *b],
            threshold: dep.max_latency_ms,
        });
    }
    if o.ordering_changed {
        return Some(StopReason::OrderingChanged);
    }
    if o.authorization_changed {
        return Some(StopReason::AuthorizationChanged);
    }
    if o.lease_lost {
        return Some(StopReason::LeaseLost);
    }
    if o.budget_unobservable {
        return Some(StopReason::BudgetUnobservable);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_number_is_repeated_short() {
        let e = check_items_per_s(1e-300).unwrap_err().to_string();
        assert!(e.contains("(got 1e-300)"), "{e}");
        let e = check_items_per_s(200_000.0).unwrap_err().to_string();
        assert!(e.contains("(got 200000)"), "{e}");
        let e = check_max_error_rate(f64::MAX).unwrap_err().to_string();
        assert!(e.len() < 120, "{e}");
    }
    use proptest::prelude::*;

    fn dep() -> Dependency {
        Dependency {
            name: "ledger".into(),
            probe_url: "http://ledger.internal/health".into(),
            max_error_rate: 0.05,
            max_latency_ms: 250,
        }
    }

    /// The seed's worked example: 1 item/s, 64 KiB/s, 2 concurrent, window 10.
    fn seed() -> Budget {
        BudgetSpec {
            items_per_s: Some(1.0),
            bytes_per_s: Some(64 * 1024),
            max_concurrent: Some(2),
            window: Some(10),
            dependency: Some(dep()),
        }
        .check()
        .unwrap()
    }

    /// The field a refusal names.
    fn field<T: std::fmt::Debug>(r: Result<T, BudgetError>) -> &'static str {
        match r {
            Err(BudgetError::OutOfRange { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn the_item_rate_is_bounded_with_inclusive_edges() {
        assert_eq!(check_items_per_s(0.001), Ok(0.001));
        assert_eq!(check_items_per_s(100_000.0), Ok(100_000.0));
        for bad in [
            0.000_999,
            1e-300,
            0.0,
            -1.0,
            100_000.001,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(field(check_items_per_s(bad)), "items_per_s", "{bad}");
        }
        let e = check_items_per_s(1e-300).unwrap_err().to_string();
        assert!(e.contains("0.001") && e.contains("100000"), "{e}");
    }

    #[test]
    fn the_byte_rate_is_bounded_with_inclusive_edges() {
        assert_eq!(check_bytes_per_s(1_024), Ok(1_024));
        assert_eq!(check_bytes_per_s(10 << 30), Ok(10 << 30));
        for bad in [0, 1_023, (10 << 30) + 1, u64::MAX] {
            assert_eq!(field(check_bytes_per_s(bad)), "bytes_per_s", "{bad}");
        }
    }

    #[test]
    fn concurrency_and_window_are_bounded_with_inclusive_edges() {
        assert_eq!(check_max_concurrent(1), Ok(1));
        assert_eq!(check_max_concurrent(1_000), Ok(1_000));
        for bad in [0, 1_001, u32::MAX] {
            assert_eq!(field(check_max_concurrent(bad)), "max_concurrent");
        }
        assert_eq!(check_window(1), Ok(1));
        assert_eq!(check_window(100_000), Ok(100_000));
        for bad in [0, 100_001, u32::MAX] {
            assert_eq!(field(check_window(bad)), "window");
        }
    }

    #[test]
    fn a_dependency_name_is_a_short_identifier() {
        let longest = "a".repeat(128);
        for ok in [
            "ledger-db",
            "a",
            "payments.ledger:5432",
            "L_1",
            longest.as_str(),
        ] {
            assert_eq!(check_dependency_name(ok), Ok(ok));
        }
        let too_long = "a".repeat(129);
        let huge = "d".repeat(10_000);
        for bad in [
            "",
            " ",
            "-ledger",
            ".ledger",
            "ledger db",
            "ledger/db",
            "lédger",
            "ledger\0",
            too_long.as_str(),
            huge.as_str(),
        ] {
            assert_eq!(
                field(check_dependency_name(bad)),
                "dependency.name",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_probe_url_is_an_http_url_of_bounded_length() {
        let longest = format!("http://h/{}", "p".repeat(MAX_PROBE_URL_LEN - 9));
        assert_eq!(longest.len(), MAX_PROBE_URL_LEN);
        for ok in [
            "http://ledger.internal/health",
            "https://127.0.0.1:8080",
            longest.as_str(),
        ] {
            assert_eq!(check_probe_url(ok), Ok(ok));
        }
        let too_long = format!("{longest}p");
        for bad in [
            "",
            "ftp://ledger/health",
            "http://",
            "http:///health",
            "http://ledger/he alth",
            "http://ledger/\nhealth",
            "ledger.internal/health",
            too_long.as_str(),
        ] {
            assert_eq!(
                field(check_probe_url(bad)),
                "dependency.probe_url",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_dependency_thresholds_are_bounded_with_inclusive_edges() {
        assert_eq!(check_max_error_rate(0.0), Ok(0.0));
        assert_eq!(check_max_error_rate(1.0), Ok(1.0));
        for bad in [
            -0.000_1,
            1.000_1,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(
                field(check_max_error_rate(bad)),
                "dependency.max_error_rate",
                "{bad}"
            );
        }
        assert_eq!(check_max_latency_ms(1), Ok(1));
        assert_eq!(check_max_latency_ms(3_600_000), Ok(3_600_000));
        for bad in [0, 3_600_001, u64::MAX] {
            assert_eq!(
                field(check_max_latency_ms(bad)),
                "dependency.max_latency_ms",
                "{bad}"
            );
        }
    }

    #[test]
    fn the_lease_the_observation_window_and_the_correction_are_bounded() {
        assert_eq!(check_lease_ms(None), Ok(DEFAULT_PLAN_LEASE_MS));
        assert_eq!(check_lease_ms(Some(60_000)), Ok(60_000));
        assert_eq!(check_lease_ms(Some(604_800_000)), Ok(604_800_000));
        for bad in [0, 59_999, 604_800_001, u64::MAX] {
            assert_eq!(field(check_lease_ms(Some(bad))), "lease_ms", "{bad}");
        }
        assert_eq!(check_observe_ms(None), Ok(DEFAULT_OBSERVE_MS));
        assert_eq!(check_observe_ms(Some(100)), Ok(100));
        assert_eq!(check_observe_ms(Some(3_600_000)), Ok(3_600_000));
        for bad in [0, 99, 3_600_001, u64::MAX] {
            assert_eq!(field(check_observe_ms(Some(bad))), "observe_ms", "{bad}");
        }
        let longest = "c".repeat(256);
        assert_eq!(check_correction(&longest), Ok(longest.as_str()));
        assert_eq!(check_correction("c1"), Ok("c1"));
        for bad in [
            "".to_owned(),
            "  ".to_owned(),
            "c\u{0}1".to_owned(),
            "c".repeat(257),
        ] {
            assert_eq!(field(check_correction(&bad)), "correction", "{bad:?}");
        }
    }

    #[test]
    fn the_failing_path_window_is_bounded_and_clears_at_the_last_dead_letter_plus_it() {
        assert_eq!(check_failing_path_window_ms(1_000), Ok(1_000));
        assert_eq!(
            check_failing_path_window_ms(DEFAULT_FAILING_PATH_WINDOW_MS),
            Ok(300_000)
        );
        assert_eq!(check_failing_path_window_ms(86_400_000), Ok(86_400_000));
        for bad in [0, 999, 86_400_001, u64::MAX] {
            assert_eq!(
                field(check_failing_path_window_ms(bad)),
                "failing_path_window",
                "{bad}"
            );
        }
        let now = Timestamp(1_000_000);
        assert_eq!(failing_path_clears_at(None, 300_000, now), None, "never");
        // Dead-lettered a minute ago: failing for four more minutes.
        assert_eq!(
            failing_path_clears_at(Some(Timestamp(940_000)), 300_000, now),
            Some(Timestamp(1_240_000))
        );
        // Exactly one window ago: clear now, not a millisecond later.
        assert_eq!(
            failing_path_clears_at(Some(Timestamp(700_000)), 300_000, now),
            None
        );
        assert_eq!(
            failing_path_clears_at(Some(Timestamp(700_001)), 300_000, now),
            Some(Timestamp(1_000_001))
        );
        // A shorter window clears sooner.
        assert_eq!(
            failing_path_clears_at(Some(Timestamp(940_000)), 30_000, now),
            None
        );
        assert_eq!(
            failing_path_clears_at(Some(Timestamp(i64::MAX - 5)), u64::MAX, now),
            Some(Timestamp(i64::MAX)),
            "saturates"
        );
    }

    #[test]
    fn a_budget_is_refused_at_its_first_field_out_of_range() {
        let spec = |f: &dyn Fn(&mut BudgetSpec)| {
            let mut b = BudgetSpec {
                items_per_s: Some(1.0),
                bytes_per_s: Some(64 * 1024),
                max_concurrent: Some(2),
                window: Some(10),
                dependency: Some(dep()),
            };
            f(&mut b);
            b.check()
        };
        assert!(spec(&|_| {}).is_ok());
        type Change<'a> = &'a dyn Fn(&mut BudgetSpec);
        let cases: [(&str, Change<'_>); 8] = [
            ("items_per_s", &|b| b.items_per_s = Some(1e-300)),
            ("bytes_per_s", &|b| b.bytes_per_s = Some(u64::MAX)),
            ("max_concurrent", &|b| b.max_concurrent = Some(0)),
            ("window", &|b| b.window = Some(0)),
            ("dependency.name", &|b| {
                b.dependency.as_mut().unwrap().name = "d".repeat(10_000);
            }),
            ("dependency.probe_url", &|b| {
                b.dependency.as_mut().unwrap().probe_url = "gopher://x".into();
            }),
            ("dependency.max_error_rate", &|b| {
                b.dependency.as_mut().unwrap().max_error_rate = f64::NAN;
            }),
            ("dependency.max_latency_ms", &|b| {
                b.dependency.as_mut().unwrap().max_latency_ms = u64::MAX;
            }),
        ];
        for (want, f) in cases {
            assert_eq!(field(spec(f)), want);
        }
    }

    #[test]
    fn an_unbounded_plan_is_refused_naming_what_is_missing() {
        let e = BudgetSpec {
            items_per_s: Some(1.0),
            ..BudgetSpec::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(
            e,
            BudgetError::Unbounded {
                missing: vec!["bytes_per_s", "max_concurrent", "dependency"]
            }
        );
        assert!(e.to_string().starts_with("an unbounded replay is refused"));
        let e = BudgetSpec {
            items_per_s: Some(f64::NAN),
            bytes_per_s: Some(MIN_BYTES_PER_S),
            max_concurrent: Some(1),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap_err();
        assert!(matches!(
            e,
            BudgetError::OutOfRange {
                field: "items_per_s",
                ..
            }
        ));
    }

    #[test]
    fn the_window_defaults_to_ten() {
        let b = BudgetSpec {
            items_per_s: Some(1.0),
            bytes_per_s: Some(MIN_BYTES_PER_S),
            max_concurrent: Some(1),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        assert_eq!(b.window, DEFAULT_WINDOW);
    }

    /// The stored shape of a budget (`replay_plans.spec`'s `budget`), as rows written
    /// before hold it: it decodes, and encodes back to the same value.
    #[test]
    fn a_stored_budget_reads_as_before() {
        let text = r#"{"items_per_s":2.5,"bytes_per_s":65536,"max_concurrent":2,"window":10,"dependency":{"name":"ledger","probe_url":"http://ledger.internal/health","max_error_rate":0.05,"max_latency_ms":250}}"#;
        let b: Budget = serde_json::from_str(text).unwrap();
        assert_eq!(
            b,
            Budget {
                items_per_s: 2.5,
                bytes_per_s: 65_536,
                max_concurrent: 2,
                window: 10,
                dependency: dep(),
            }
        );
        assert_eq!(serde_json::to_string(&b).unwrap(), text);
        assert_eq!(
            b.describe(),
            "2.5 items/s, 65536 bytes/s, 2 concurrent, window 10, dependency ledger (error rate ≤ 0.05, latency ≤ 250 ms)"
        );
    }

    #[test]
    fn the_seed_lower_bound_is_240_seconds() {
        let b = seed();
        assert_eq!(b.lower_bound_ms(240, 240 * 40 * 1024), 240_000);
        // The byte budget binds when items are large: 240 items of 128 KiB at 64 KiB/s.
        assert_eq!(b.lower_bound_ms(240, 240 * 128 * 1024), 480_000);
    }

    #[test]
    fn a_large_item_waits_for_the_byte_budget_although_the_item_budget_has_room() {
        let b = BudgetSpec {
            items_per_s: Some(10.0),
            bytes_per_s: Some(8000),
            max_concurrent: Some(10),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        let mut p = Pacer::default();
        let t0 = Timestamp(1_000_000);
        assert_eq!(p.check(&b, 6400, t0), Admission::Now);
        p.admit(&b, 6400, t0);
        // The item budget allows one at +100 ms; the 6,400 bytes hold the byte budget 800 ms.
        assert_eq!(
            p.check(&b, 6400, t0.plus_millis(100)),
            Admission::At(t0.plus_millis(800))
        );
        assert_eq!(p.check(&b, 8001, t0), Admission::TooLarge);
    }

    #[test]
    fn concurrency_is_bounded_until_a_delivery_finishes() {
        let b = seed();
        let mut p = Pacer::default();
        let t = Timestamp(0);
        p.admit(&b, 10, t);
        p.admit(&b, 10, t.plus_millis(1000));
        assert_eq!(p.check(&b, 10, t.plus_millis(5000)), Admission::Concurrency);
        p.finish();
        assert_eq!(p.check(&b, 10, t.plus_millis(5000)), Admission::Now);
    }

    #[test]
    fn a_window_completes_when_every_item_settles() {
        let b = seed();
        let mut w = Window {
            number: 1,
            ..Window::default()
        };
        assert!(!w.complete());
        for _ in 0..10 {
            assert!(w.has_room(&b));
            w.record(ItemState::Waiting, ItemState::Admitted);
        }
        assert!(!w.has_room(&b));
        assert!(!w.complete());
        for _ in 0..10 {
            w.record(ItemState::Admitted, ItemState::Settled);
        }
        assert!(w.complete());
    }

    #[test]
    fn the_next_window_opens_only_when_the_last_is_full_and_settled() {
        let b = seed();
        let none = Window::default();
        assert!(none.opens(&b, true), "the first window opens");
        assert!(!none.opens(&b, false), "nothing waits: no window opens");
        assert_eq!(none.room_ahead(&b), 10);
        let mut w = Window {
            number: 1,
            ..Window::default()
        };
        for _ in 0..9 {
            w.record(ItemState::Waiting, ItemState::Admitted);
            w.record(ItemState::Admitted, ItemState::Settled);
        }
        assert!(w.complete() && w.has_room(&b));
        assert!(!w.opens(&b, true), "a window with room is not replaced");
        assert_eq!(w.room_ahead(&b), 1);
        w.record(ItemState::Waiting, ItemState::Admitted);
        assert!(!w.opens(&b, true), "one item of it is still in flight");
        assert_eq!(w.room_ahead(&b), 10);
        w.record(ItemState::Admitted, ItemState::Waiting);
        assert_eq!(
            (w.admitted, w.in_flight),
            (9, 0),
            "an undone admission gives back its room"
        );
        w.record(ItemState::Waiting, ItemState::Admitted);
        w.record(ItemState::Admitted, ItemState::Settled);
        assert!(w.opens(&b, true));
        w.open();
        assert_eq!((w.number, w.admitted), (2, 0));
    }

    #[test]
    fn stop_conditions_in_order() {
        let b = seed();
        assert_eq!(stop(&b, &Observations::default()), None);
        let two = Observations {
            failures: vec![
                ("a".into(), "parse".into()),
                ("b".into(), "timeout".into()),
                ("c".into(), "parse".into()),
            ],
            ..Observations::default()
        };
        assert_eq!(
            stop(&b, &two),
            Some(StopReason::RepeatedFailure {
                shape: "parse".into(),
                items: ["a".into(), "c".into()]
            })
        );
        let one_slow = Observations {
            latency_ms: vec![100, 300],
            ..Observations::default()
        };
        assert_eq!(stop(&b, &one_slow), None, "one slow window is not two");
        let two_slow = Observations {
            latency_ms: vec![300, 260],
            ..Observations::default()
        };
        assert_eq!(stop(&b, &two_slow).unwrap().as_str(), "dependency_latency");
        let errors = Observations {
            error_rate: Some(0.2),
            lease_lost: true,
            ..Observations::default()
        };
        assert_eq!(stop(&b, &errors).unwrap().as_str(), "dependency_error_rate");
        let indeterminate = Observations {
            effect_indeterminate: vec!["x".into()],
            ..errors.clone()
        };
        assert_eq!(
            stop(&b, &indeterminate).unwrap().as_str(),
            "effect_indeterminate"
        );
        for (o, name) in [
            (
                Observations {
                    ordering_changed: true,
                    ..Observations::default()
                },
                "ordering_changed",
            ),
            (
                Observations {
                    authorization_changed: true,
                    ..Observations::default()
                },
                "authorization_changed",
            ),
            (
                Observations {
                    lease_lost: true,
                    ..Observations::default()
                },
                "lease_lost",
            ),
            (
                Observations {
                    budget_unobservable: true,
                    ..Observations::default()
                },
                "budget_unobservable",
            ),
            (
                Observations {
                    effect_unavailable: vec!["y".into()],
                    ..Observations::default()
                },
                "effect_unavailable",
            ),
        ] {
            assert_eq!(stop(&b, &o).unwrap().as_str(), name);
        }
    }

    /// A late look admits one item, not the slots it missed: at 1,000 items/s after an
    /// idle 60 ms, one item; the next a millisecond later. At 4 items/s the seed's worked
    /// example admits at 0, 250, 500 and 750 ms however often it is looked at.
    #[test]
    fn a_late_look_admits_one_item_and_catches_nothing_up() {
        let burst = |rate: f64, idle: i64| {
            let b = BudgetSpec {
                items_per_s: Some(rate),
                bytes_per_s: Some(1 << 30),
                max_concurrent: Some(1_000),
                window: None,
                dependency: Some(dep()),
            }
            .check()
            .unwrap();
            let mut p = Pacer::default();
            let t0 = Timestamp(1_000_000);
            p.admit(&b, 10, t0);
            let now = t0.plus_millis(idle);
            let mut n = 0;
            while p.check(&b, 10, now) == Admission::Now {
                p.admit(&b, 10, now);
                p.finish();
                n += 1;
            }
            (n, p.check(&b, 10, now))
        };
        assert_eq!(burst(1_000.0, 60), (1, Admission::At(Timestamp(1_000_061))));
        assert_eq!(
            burst(100_000.0, 1_000),
            (1, Admission::At(Timestamp(1_001_001)))
        );
        assert_eq!(burst(1.0, 5_000), (1, Admission::At(Timestamp(1_006_000))));
        let four = BudgetSpec {
            items_per_s: Some(4.0),
            bytes_per_s: Some(64 * 1024),
            max_concurrent: Some(10),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        let mut p = Pacer::default();
        let mut at = Vec::new();
        // Looked at every 10 ms for a second.
        for ms in (0..1_000).step_by(10) {
            let now = Timestamp(ms);
            while p.check(&four, 100, now) == Admission::Now {
                p.admit(&four, 100, now);
                at.push(ms);
            }
        }
        assert_eq!(at, [0, 250, 500, 750]);
    }

    #[test]
    fn a_plan_looked_at_when_the_pacer_says_admits_its_rate() {
        let fast = BudgetSpec {
            items_per_s: Some(1_000.0),
            bytes_per_s: Some(1 << 30),
            max_concurrent: Some(1_000),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        let now = Timestamp(1_000_000);
        assert_eq!(fast.next_look(now.plus_millis(1), now), now.plus_millis(1));
        // Looking only when `next_look` says, 10 s at 1,000 items/s admit 10,000 items.
        let mut p = Pacer::default();
        let mut t = now;
        let mut n = 0u64;
        let end = now.plus_millis(10_000);
        while t < end {
            let mut slot = None;
            loop {
                match p.check(&fast, 10, t) {
                    Admission::Now => {
                        p.admit(&fast, 10, t);
                        p.finish();
                        n += 1;
                    }
                    Admission::At(s) => {
                        slot = Some(s);
                        break;
                    }
                    _ => break,
                }
            }
            t = fast.next_look(slot.expect("a next slot"), t);
        }
        assert_eq!(n, 10_000);
    }

    /// A budget of `rate` items/s and `byte_rate` bytes/s, the rest out of the way.
    fn rates(rate: f64, byte_rate: u64) -> Budget {
        BudgetSpec {
            items_per_s: Some(rate),
            bytes_per_s: Some(byte_rate),
            max_concurrent: Some(1_000),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap()
    }

    /// The pacing bound over admissions `(ms, bytes)` in time order: over any interval
    /// [a, b], items ≤ 1 + rate × (b − a) and bytes ≤ byte_rate × (b − a) + the bytes of
    /// the last item admitted in it.
    pub(crate) fn within_bound(
        admitted: &[(i64, u64)],
        rate: f64,
        byte_rate: u64,
    ) -> Result<(), TestCaseError> {
        for i in 0..admitted.len() {
            let mut bytes = 0u64;
            for j in i..admitted.len() {
                let t = (admitted[j].0 - admitted[i].0) as f64 / 1000.0;
                let items = (j - i + 1) as f64;
                bytes += admitted[j].1;
                prop_assert!(
                    items <= 1.0 + rate * t + 1e-9,
                    "{items} items in {t} s at {rate}/s"
                );
                prop_assert!(
                    bytes as f64 <= byte_rate as f64 * t + admitted[j].1 as f64 + 1e-6,
                    "{bytes} bytes in {t} s at {byte_rate}/s"
                );
            }
        }
        Ok(())
    }

    proptest! {
        /// The bound, over looks at arbitrary times (each look admits every item the
        /// pacer lets go then) and arbitrary item sizes: over any interval [a, b],
        /// items ≤ 1 + items_per_s × (b − a), and bytes ≤ bytes_per_s × (b − a) + the
        /// bytes of the last item admitted in it (hence ≤ … + the largest item).
        #[test]
        fn no_interval_exceeds_either_rate(
            rate in 0.5f64..5_000.0,
            byte_rate in 1_024u64..100_000,
            gaps in proptest::collection::vec(0i64..400, 1..300),
            sizes in proptest::collection::vec(1u64..1_024, 1..200),
        ) {
            let b = rates(rate, byte_rate);
            let mut p = Pacer::default();
            let mut now = Timestamp(0);
            let mut admitted: Vec<(i64, u64)> = Vec::new();
            let mut next = sizes.iter().copied().peekable();
            for gap in gaps {
                now = now.plus_millis(gap);
                while let Some(&size) = next.peek() {
                    if p.check(&b, size, now) != Admission::Now {
                        break;
                    }
                    p.admit(&b, size, now);
                    admitted.push((now.as_millis(), size));
                    next.next();
                }
            }
            within_bound(&admitted, rate, byte_rate)?;
        }

        /// The same bound over the admission times when each look admits ahead, at their
        /// slots, every item whose slot is within its lead; and no item is admitted before
        /// the look that admits it, nor more than the lead after it.
        #[test]
        fn no_interval_exceeds_either_rate_with_a_lead(
            rate in 0.5f64..100_000.0,
            byte_rate in 1_024u64..10_000_000,
            gaps in proptest::collection::vec(0i64..400, 1..300),
            sizes in proptest::collection::vec(1u64..1_024, 1..400),
        ) {
            let b = rates(rate, byte_rate);
            let mut p = Pacer::default();
            let mut now = Timestamp(0);
            let mut admitted: Vec<(i64, u64)> = Vec::new();
            let mut next = sizes.iter().copied().peekable();
            for gap in gaps {
                now = now.plus_millis(gap);
                while let Some(&size) = next.peek() {
                    if p.check_ahead(&b, size, now) != Admission::Now {
                        break;
                    }
                    let at = p.slot(now);
                    prop_assert!(at >= now && at <= now.plus_millis(LEAD_MS));
                    prop_assert_eq!(p.check(&b, size, at), Admission::Now);
                    p.admit(&b, size, at);
                    admitted.push((at.as_millis(), size));
                    next.next();
                }
            }
            within_bound(&admitted, rate, byte_rate)?;
        }
    }

    /// A look that admits ahead admits at the slots, in the order, that a look at each
    /// slot would have: at 1,000 items/s a look at t takes t, t+1 … t+50, one a
    /// millisecond; at 4 items/s it takes one (the next slot is past its lead).
    #[test]
    fn a_look_ahead_admits_at_the_slots_a_look_at_each_would() {
        let budget = |rate: f64| {
            BudgetSpec {
                items_per_s: Some(rate),
                bytes_per_s: Some(1 << 30),
                max_concurrent: Some(1_000),
                window: None,
                dependency: Some(dep()),
            }
            .check()
            .unwrap()
        };
        let t = Timestamp(10_000);
        let look = |b: &Budget, p: &mut Pacer, now: Timestamp| {
            let mut at = Vec::new();
            while p.check_ahead(b, 100, now) == Admission::Now {
                let slot = p.slot(now);
                p.admit(b, 100, slot);
                at.push(slot.as_millis());
            }
            at
        };
        let fast = budget(1_000.0);
        let mut p = Pacer::default();
        let ahead = look(&fast, &mut p, t);
        assert_eq!(ahead, (10_000..=10_050).collect::<Vec<i64>>());
        // Looks at every one of those slots admit the same items at the same times.
        let mut q = Pacer::default();
        let mut each: Vec<i64> = Vec::new();
        for ms in 10_000..=10_050 {
            let now = Timestamp(ms);
            assert_eq!(q.check(&fast, 100, now), Admission::Now);
            q.admit(&fast, 100, now);
            each.push(ms);
        }
        assert_eq!(ahead, each);
        assert_eq!(p, q, "the same pacer after");
        // The next look, at the next slot, goes on from there.
        assert_eq!(p.slot(t), Timestamp(10_051));
        let slow = budget(4.0);
        let mut p = Pacer::default();
        assert_eq!(look(&slow, &mut p, t), [10_000]);
        assert_eq!(look(&slow, &mut p, t.plus_millis(199)), Vec::<i64>::new());
        assert_eq!(look(&slow, &mut p, t.plus_millis(200)), [10_250]);
        // Nothing is caught up: a look long after its slot admits at its own time.
        assert_eq!(look(&slow, &mut p, t.plus_millis(5_000)), [15_000]);
    }
}
