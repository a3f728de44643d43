//! AWS Signature Version 4. Without authentication (no access keys configured and the
//! broker's authentication off) any signature (or none) is accepted and the access key id,
//! when the request names one, is the sender id. Otherwise every request must carry an
//! `Authorization: AWS4-HMAC-SHA256 …` header whose signature verifies against the named
//! key's secret (a configured key's, or the SQS credentials of an API token), and the
//! signature binds the request as AWS does:
//!
//! - the payload hash in the canonical request is always the SHA-256 of the body received;
//!   an `x-amz-content-sha256` header must be signed and equal it (`UNSIGNED-PAYLOAD` is an
//!   S3 feature and is refused, as SQS does not take it);
//! - `X-Amz-Date` must be within 15 minutes of the broker's clock, either way, and its day
//!   must be the credential scope's;
//! - signatures are compared in constant time.
//!
//! As on AWS, an identical request replayed within the 15-minute window is accepted: the
//! window is the only replay bound.

use axum::http::{HeaderMap, Method, Uri};
use hmac::{Hmac, KeyInit, Mac};
use redrive_core::Timestamp;
use sha2::{Digest, Sha256};

use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::{MAX_PARAMETERS, form_bytes, hex_digit};

type HmacSha256 = Hmac<Sha256>;

/// How far `X-Amz-Date` may be from the broker's clock, either way (AWS: 15 minutes).
pub(crate) const MAX_SKEW_MS: i64 = 15 * 60 * 1_000;

/// The parts of an `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
struct AuthHeader<'a> {
    access_key: &'a str,
    scope: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse(value: &str) -> Option<AuthHeader<'_>> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256")?.trim_start();
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let (access_key, scope) = credential?.split_once('/')?;
    Some(AuthHeader {
        access_key,
        scope,
        signed_headers: signed?.split(';').collect(),
        signature: signature?,
    })
}

fn mismatch(message: impl Into<String>) -> SqsError {
    SqsError::new(ErrorKind::SignatureDoesNotMatch, message)
}

/// The access key id the request's `Authorization` header names, if it has a SigV4 one.
pub(crate) fn access_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(parse)
        .map(|a| a.access_key.to_owned())
}

/// Verifies the request's signature at `now` (the broker's clock) with `secret`, the
/// secret access key of the key id it names (see [`access_key`]).
pub(crate) fn verify(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    now: Timestamp,
    secret: &str,
) -> SqsResult<()> {
    let Some(auth) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(parse)
    else {
        return Err(SqsError::new(
            ErrorKind::InvalidClientTokenId,
            "The request must be signed with AWS Signature Version 4 (Authorization header).",
        ));
    };
    let payload_hash = hex(&Sha256::digest(body));
    if let Some(claimed) = headers.get("x-amz-content-sha256") {
        if !auth.signed_headers.contains(&"x-amz-content-sha256") {
            return Err(mismatch(
                "The x-amz-content-sha256 header must be among the SignedHeaders.",
            ));
        }
        let claimed = claimed.to_str().unwrap_or_default();
        if claimed == "UNSIGNED-PAYLOAD" {
            return Err(mismatch(
                "UNSIGNED-PAYLOAD is not accepted: the payload must be signed.",
            ));
        }
        if !claimed.eq_ignore_ascii_case(&payload_hash) {
            return Err(mismatch(
                "The provided x-amz-content-sha256 header does not match what was computed.",
            ));
        }
    }
    let amz_date = headers
        .get("x-amz-date")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let Some(signed_at) = parse_amz_date(amz_date) else {
        return Err(mismatch(
            "The request must carry an X-Amz-Date header of the form YYYYMMDDTHHMMSSZ.",
        ));
    };
    let mut scope = auth.scope.split('/');
    let (Some(date), Some(region), Some(service), Some("aws4_request"), None) = (
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
        scope.next(),
    ) else {
        return Err(mismatch(
            "The credential scope must be <date>/<region>/<service>/aws4_request.",
        ));
    };
    if !amz_date.starts_with(date) || date.len() != 8 {
        return Err(mismatch(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{date}' != '{}'",
            amz_date.get(..8).unwrap_or_default()
        )));
    }
    let canonical = canonical_request(method, uri, headers, &auth, &payload_hash)?;
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
        auth.scope,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let provided = unhex(auth.signature).unwrap_or_default();
    let mut mac =
        HmacSha256::new_from_slice(&k_signing).expect("HMAC takes keys of any length (RFC 2104)");
    mac.update(to_sign.as_bytes());
    if mac.verify_slice(&provided).is_err() {
        return Err(mismatch(
            "The request signature we calculated does not match the signature you provided.",
        ));
    }
    let skew = signed_at - now.as_millis();
    if skew < -MAX_SKEW_MS {
        return Err(mismatch(format!(
            "Signature expired: {amz_date} is now earlier than {} ({} - 15 min.)",
            format_amz_date(now.as_millis() - MAX_SKEW_MS),
            format_amz_date(now.as_millis())
        )));
    }
    if skew > MAX_SKEW_MS {
        return Err(mismatch(format!(
            "Signature not yet current: {amz_date} is still later than {} ({} + 15 min.)",
            format_amz_date(now.as_millis() + MAX_SKEW_MS),
            format_amz_date(now.as_millis())
        )));
    }
    Ok(())
}

fn canonical_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    auth: &AuthHeader<'_>,
    payload_hash: &str,
) -> SqsResult<String> {
    let mut canonical_headers = String::new();
    for name in &auth.signed_headers {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        canonical_headers.push_str(name);
        canonical_headers.push(':');
        canonical_headers.push_str(&values.join(","));
        canonical_headers.push('\n');
    }
    Ok(format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        method.as_str(),
        canonical_uri(uri.path()),
        canonical_query(uri.query().unwrap_or_default())?,
        canonical_headers,
        auth.signed_headers.join(";"),
        payload_hash
    ))
}

/// Milliseconds since the epoch of an `X-Amz-Date` (`20240101T000000Z`).
fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, sec) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let ms = (days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + sec) * 1_000;
    // 31 February and the like do not survive the round trip.
    (format_amz_date(ms) == s).then_some(ms)
}

/// An `X-Amz-Date` for milliseconds since the epoch (rounded down to the second).
fn format_amz_date(ms: i64) -> String {
    let secs = ms.div_euclid(1_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// An HTTP `Date` (IMF-fixdate, RFC 9110) for milliseconds since the epoch.
pub(crate) fn http_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms.div_euclid(1_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month = MONTHS[usize::try_from(m - 1).unwrap_or(0)];
    format!(
        "{weekday}, {d:02} {month} {y:04} {:02}:{:02}:{:02} GMT",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    // The SDKs encode the (already encoded) path once more for every service but S3.
    path.split('/')
        .map(|seg| uri_encode(seg.as_bytes(), true))
        .collect::<Vec<_>>()
        .join("/")
}

/// The canonical query string: pairs percent-decoded as bytes (nothing is replaced),
/// encoded again the SigV4 way, sorted.
fn canonical_query(query: &str) -> SqsResult<String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in query.as_bytes().split(|b| *b == b'&') {
        if part.is_empty() {
            continue;
        }
        if pairs.len() >= MAX_PARAMETERS {
            return Err(SqsError::new(
                ErrorKind::MalformedRequest,
                format!("The request has more than {MAX_PARAMETERS} parameters."),
            ));
        }
        let (k, v) = match part.iter().position(|b| *b == b'=') {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => (part, &[][..]),
        };
        pairs.push((
            uri_encode(&form_bytes(k), true),
            uri_encode(&form_bytes(v), true),
        ));
    }
    pairs.sort();
    Ok(pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&"))
}

fn uri_encode(s: &[u8], encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (b == b'/' && !encode_slash)
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(hex_digit(p[0])? << 4 | hex_digit(p[1])?))
        .collect()
}

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut mac =
        HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length (RFC 2104)");
    mac.update(msg);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn authorization_headers_parse() {
        let a = parse(
            "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/sqs/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=abc",
        )
        .unwrap();
        assert_eq!(a.access_key, "AKID");
        assert_eq!(a.scope, "20240101/us-east-1/sqs/aws4_request");
        assert_eq!(a.signed_headers, vec!["host", "x-amz-date"]);
        assert_eq!(a.signature, "abc");
    }

    #[test]
    fn amz_dates_parse_and_format() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        let t = 1_800_000_000_000;
        assert_eq!(format_amz_date(t), "20270115T080000Z");
        assert_eq!(parse_amz_date("20270115T080000Z"), Some(t));
        assert_eq!(
            parse_amz_date("20240229T235959Z")
                .map(format_amz_date)
                .as_deref(),
            Some("20240229T235959Z")
        );
        for bad in [
            "20230229T000000Z",
            "20240101T240000Z",
            "2024-01-01T00:00:00Z",
            "",
            "+0240101T000000Z",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn http_dates_are_imf_fixdates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            http_date(1_800_000_000_000),
            "Fri, 15 Jan 2027 08:00:00 GMT"
        );
    }

    #[test]
    fn canonical_queries_decode_bytes_and_sort() {
        assert_eq!(
            canonical_query("b=%ff+x&a=1&Action=ListQueues").unwrap(),
            "Action=ListQueues&a=1&b=%FF%20x"
        );
    }
}
