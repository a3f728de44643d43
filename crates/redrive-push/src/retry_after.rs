//! `Retry-After` (RFC 9110 §10.2.3): delta-seconds, or an HTTP date taken relative to the
//! response's own `Date` header (so that a skewed endpoint clock does not stretch or
//! shrink the wait), or to our clock's now when the response has no usable `Date`.
//!
//! HTTP dates are parsed by hand in all three forms a recipient must accept (IMF-fixdate,
//! RFC 850, asctime); the arithmetic reuses [`Timestamp::parse_rfc3339`].

use redrive_core::Timestamp;
use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};

/// The wait a response asks for, in milliseconds, if it carries a valid `Retry-After`.
/// A date in the past means "now" (`Some(0)`); an unparseable value is ignored (`None`).
pub fn retry_after_ms(headers: &HeaderMap, now: Timestamp) -> Option<u64> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Longer than u64 seconds is "forever"; the retry policy's time to live caps it.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(secs.saturating_mul(1000));
    }
    let at = parse_http_date(value)?;
    let base = headers
        .get(DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(parse_http_date)
        .unwrap_or(now);
    Some(u64::try_from(at.as_millis().saturating_sub(base.as_millis())).unwrap_or(0))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Parses an HTTP date: `Sun, 06 Nov 1994 08:49:37 GMT` (IMF-fixdate),
/// `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850) or `Sun Nov  6 08:49:37 1994` (asctime).
pub fn parse_http_date(s: &str) -> Option<Timestamp> {
    let t: Vec<&str> = s
        .split(|c: char| c.is_ascii_whitespace() || c == ',' || c == '-')
        .filter(|p| !p.is_empty())
        .collect();
    let (day, month, year, time) = match t.as_slice() {
        // IMF-fixdate and RFC 850.
        [wd, day, month, year, time, "GMT"] if DAYS.contains(wd) || LONG_DAYS.contains(wd) => {
            let year = match year.len() {
                4 => year.parse::<u32>().ok()?,
                // RFC 850's two-digit year: 70–99 is the 1900s, the rest the 2000s.
                2 => {
                    let yy = year.parse::<u32>().ok()?;
                    if yy >= 70 { 1900 + yy } else { 2000 + yy }
                }
                _ => return None,
            };
            (*day, *month, year, *time)
        }
        // asctime.
        [wd, month, day, time, year] if DAYS.contains(wd) && year.len() == 4 => {
            (*day, *month, year.parse::<u32>().ok()?, *time)
        }
        _ => return None,
    };
    if day.is_empty() || day.len() > 2 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let day: u32 = day.parse().ok()?;
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let b = time.as_bytes();
    if b.len() != 8
        || b[2] != b':'
        || b[5] != b':'
        || !time
            .bytes()
            .filter(|c| *c != b':')
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Timestamp::parse_rfc3339(&format!("{year:04}-{month:02}-{day:02}T{time}Z"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    // 1994-11-06T08:49:37Z
    const SUNDAY: Timestamp = Timestamp(784_111_777_000);

    #[test]
    fn the_three_http_date_forms_parse_to_the_same_instant() {
        for s in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(s), Some(SUNDAY), "{s}");
        }
        for bad in [
            "",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "2026-11-29T20:07:08Z",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date_relative_to_date_or_now() {
        let now = SUNDAY;
        assert_eq!(retry_after_ms(&headers(&[]), now), None);
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "120")]), now),
            Some(120_000)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "soon")]), now),
            None
        );
        // No Date header: relative to now.
        assert_eq!(
            retry_after_ms(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:50:37 GMT")]),
                now
            ),
            Some(60_000)
        );
        // A Date header wins over our clock, whatever our clock says.
        assert_eq!(
            retry_after_ms(
                &headers(&[
                    ("retry-after", "Sun, 06 Nov 1994 08:50:37 GMT"),
                    ("date", "Sun, 06 Nov 1994 08:50:07 GMT"),
                ]),
                Timestamp(0)
            ),
            Some(30_000)
        );
        // A date in the past: retry now.
        assert_eq!(
            retry_after_ms(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
                now
            ),
            Some(0)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "99999999999999999999999")]), now),
            Some(u64::MAX)
        );
    }
}
