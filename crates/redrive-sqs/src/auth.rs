//! AWS Signature Version 4. With no access keys configured any signature (or none) is
//! accepted and the access key id, when the request names one, is the sender id. With keys
//! configured, every request must carry an `Authorization: AWS4-HMAC-SHA256 …` header
//! whose signature verifies against the named key's secret.

use axum::http::{HeaderMap, Method, Uri};
use sha2::{Digest, Sha256};

use crate::SqsConfig;
use crate::error::{ErrorKind, SqsError, SqsResult};

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

/// Checks the request's signature; returns the access key id it names, if any.
pub(crate) fn check(
    config: &SqsConfig,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> SqsResult<Option<String>> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok());
    let parsed = header.and_then(parse);
    if config.access_keys.is_empty() {
        return Ok(parsed.map(|a| a.access_key.to_owned()));
    }
    let Some(auth) = parsed else {
        return Err(SqsError::new(
            ErrorKind::InvalidClientTokenId,
            "The request must be signed with AWS Signature Version 4 (Authorization header).",
        ));
    };
    let Some((_, secret)) = config
        .access_keys
        .iter()
        .find(|(k, _)| k == auth.access_key)
    else {
        return Err(SqsError::new(
            ErrorKind::InvalidClientTokenId,
            "The security token included in the request is invalid.",
        ));
    };
    let expected = signature(secret, method, uri, headers, body, &auth);
    if expected.as_deref() != Some(auth.signature) {
        return Err(SqsError::new(
            ErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided.",
        ));
    }
    Ok(Some(auth.access_key.to_owned()))
}

fn signature(
    secret: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    auth: &AuthHeader<'_>,
) -> Option<String> {
    let amz_date = headers.get("x-amz-date")?.to_str().ok()?;
    let mut scope = auth.scope.split('/');
    let (date, region, service) = (scope.next()?, scope.next()?, scope.next()?);
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
    let payload_hash = match headers
        .get("x-amz-content-sha256")
        .and_then(|h| h.to_str().ok())
    {
        Some(h) => h.to_owned(),
        None => hex(&Sha256::digest(body)),
    };
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        method.as_str(),
        canonical_uri(uri.path()),
        canonical_query(uri.query().unwrap_or_default()),
        canonical_headers,
        auth.signed_headers.join(";"),
        payload_hash
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
        auth.scope,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    Some(hex(&hmac(&k_signing, to_sign.as_bytes())))
}

fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    // The SDKs encode the (already encoded) path once more for every service but S3.
    path.split('/')
        .map(|seg| uri_encode(seg, true))
        .collect::<Vec<_>>()
        .join("/")
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (uri_encode(&k, true), uri_encode(&v, true)))
            .collect();
    pairs.sort();
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn uri_encode(s: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
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

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut k = if key.len() > BLOCK {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(BLOCK, 0);
    let mut inner = Sha256::new();
    inner.update(k.iter().map(|b| b ^ 0x36).collect::<Vec<u8>>());
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.iter().map(|b| b ^ 0x5c).collect::<Vec<u8>>());
    outer.update(inner);
    outer.finalize().to_vec()
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
}
