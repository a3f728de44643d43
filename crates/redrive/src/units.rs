//! Durations (`30s`, `500ms`, `5m`, `2h`, `7d`, `1h30m`) and byte sizes (`256`, `64KiB`,
//! `1MiB`) as typed on the command line, times given as RFC 3339 or relative to now, and
//! queue names checked before anything is sent.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redrive_core::{EntityName, Timestamp};

/// A clap value parser that checks the queue naming rule before anything is sent.
pub fn queue_name(s: &str) -> Result<String, String> {
    s.parse::<EntityName>()
        .map(|n| n.as_str().to_owned())
        .map_err(|e| e.to_string())
}

/// A clap value parser for a whole number from `lo` to `hi`: any other number — a
/// negative one too, when its argument allows negative numbers — is refused naming the
/// range, as the server would refuse it.
pub fn ranged(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| {
        let range = || format!("expected a whole number from {lo} to {hi}");
        let n: i128 = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a whole number ({})", range()))?;
        u64::try_from(n)
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| format!("{n} is out of range ({})", range()))
    }
}

/// [`ranged`] for a value the API takes as a 32-bit number.
pub fn ranged_u32(lo: u32, hi: u32) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync {
    let inner = ranged(u64::from(lo), u64::from(hi));
    move |s: &str| inner(s).map(|n| u32::try_from(n).unwrap_or(hi))
}

/// [`ranged`] for a sequence number (1 and up).
pub fn sequence(s: &str) -> Result<i64, String> {
    ranged(1, i64::MAX as u64)(s).map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Parses a duration: one or more `<integer><unit>` parts with unit `ms`, `s`, `m`, `h` or
/// `d` (`1h30m`). A bare `0` is zero. Returns milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration (expected e.g. 30s, 500ms, 5m, 2h, 7d)".to_owned());
    }
    if text == "0" {
        return Ok(0);
    }
    if text.starts_with('-') {
        return Err(format!(
            "invalid duration {s:?}: a duration cannot be negative (expected e.g. 30s, 500ms, 5m)"
        ));
    }
    let bad = |why: &str| format!("invalid duration {s:?}: {why} (expected e.g. 30s, 500ms, 5m)");
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let value: u64 = rest[..digits]
            .parse()
            .map_err(|_| bad("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(bad("missing unit")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        total = value
            .checked_mul(factor)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| bad("too large"))?;
    }
    Ok(total)
}

/// Formats milliseconds the way [`parse_duration_ms`] reads them, largest units first
/// (`90000` → `1m30s`).
pub fn format_duration_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// Parses a byte size: a plain number of bytes, or with a suffix `B`, `KB`/`MB` (powers of
/// 1000) or `K`/`KiB`/`M`/`MiB` (powers of 1024), case-insensitive.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let bad = || format!("invalid size {s:?} (expected e.g. 256, 64KiB, 1MiB)");
    if digits == 0 {
        return Err(bad());
    }
    let value: u64 = text[..digits].parse().map_err(|_| bad())?;
    let factor: u64 = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "k" | "kib" => 1_024,
        "mb" => 1_000_000,
        "m" | "mib" => 1_048_576,
        _ => return Err(bad()),
    };
    value.checked_mul(factor).ok_or_else(bad)
}

/// Parses a size that must fit a `u32` (message sizes).
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    u32::try_from(v).map_err(|_| format!("size {s:?} is too large"))
}

/// Now, from the system clock.
pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp(ms)
}

/// Parses a point in time: RFC 3339, or `+DUR` (from now) or `-DUR` (before now), as
/// RFC 3339 text for the API.
pub fn parse_time(s: &str) -> Result<String, String> {
    parse_time_at(s, now())
}

/// [`parse_time`] with an explicit "now".
pub fn parse_time_at(s: &str, now: Timestamp) -> Result<String, String> {
    let text = s.trim();
    if let Some(d) = text.strip_prefix('+') {
        let ms = parse_duration_ms(d)?;
        return Ok(now.plus(Duration::from_millis(ms)).to_rfc3339());
    }
    if let Some(d) = text.strip_prefix('-') {
        let ms = i64::try_from(parse_duration_ms(d)?).map_err(|_| "duration too large")?;
        return Ok(now.plus_millis(-ms).to_rfc3339());
    }
    match Timestamp::parse_rfc3339(text) {
        Some(t) => Ok(t.to_rfc3339()),
        None => Err(format!(
            "invalid time {s:?} (expected RFC 3339 like 2026-01-31T12:00:00Z, or +DUR / -DUR)"
        )),
    }
}

/// [`parse_time`] for the end of a value window (`--valid-until`): a time already past is
/// refused, since the message would be worth nothing from the start (its case would close
/// `expired` at once).
pub fn parse_future_time(s: &str) -> Result<String, String> {
    future_time_at(s, now())
}

fn future_time_at(s: &str, now: Timestamp) -> Result<String, String> {
    let text = parse_time_at(s, now)?;
    match Timestamp::parse_rfc3339(&text) {
        Some(t) if t > now => Ok(text),
        _ => Err(format!(
            "{text} is already past: a message whose value window has ended is worth nothing \
             (give a later time, or +DUR from now)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_window_must_end_after_now() {
        let now = Timestamp::parse_rfc3339("2026-12-01T00:00:00Z").unwrap();
        assert_eq!(
            future_time_at("+2d", now).unwrap(),
            "2026-12-03T00:00:00.000Z"
        );
        let e = future_time_at("2026-08-16T00:00:00Z", now).unwrap_err();
        assert!(
            e.starts_with("2026-08-16T00:00:00.000Z is already past"),
            "{e}"
        );
        assert!(future_time_at("-1s", now).is_err());
        assert!(
            future_time_at("2026-12-01T00:00:00Z", now).is_err(),
            "now is not later"
        );
    }

    #[test]
    fn durations_accept_every_unit_and_combinations() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("1s500ms"), Ok(1_500));
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert_eq!(parse_duration_ms(" 10s "), Ok(10_000));
    }

    #[test]
    fn durations_refuse_missing_or_unknown_units() {
        for bad in [
            "",
            "30",
            "abc",
            "5x",
            "s",
            "1.5s",
            "-3s",
            "10 s",
            "99999999999999999999d",
        ] {
            let err = parse_duration_ms(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn durations_format_back_to_what_parses() {
        for ms in [
            0,
            1,
            500,
            1_000,
            30_000,
            90_000,
            5_400_000,
            604_800_000,
            1_500,
        ] {
            assert_eq!(parse_duration_ms(&format_duration_ms(ms)), Ok(ms));
        }
        assert_eq!(format_duration_ms(90_000), "1m30s");
    }

    #[test]
    fn sizes_accept_bytes_and_suffixes() {
        assert_eq!(parse_size("256"), Ok(256));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("64k"), Ok(65_536));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("1GiB").is_err());
        assert!(parse_size_u32("100000MiB").is_err());
    }

    #[test]
    fn times_are_rfc3339_or_relative() {
        let now = Timestamp(1_700_000_000_000);
        assert_eq!(
            parse_time_at("+1m", now),
            Ok(Timestamp(1_700_000_060_000).to_rfc3339())
        );
        assert_eq!(
            parse_time_at("-1s", now),
            Ok(Timestamp(1_699_999_999_000).to_rfc3339())
        );
        assert_eq!(
            parse_time_at("2026-01-31T12:00:00Z", now),
            Ok("2026-01-31T12:00:00.000Z".to_owned())
        );
        assert!(parse_time_at("tomorrow", now).is_err());
    }
}
