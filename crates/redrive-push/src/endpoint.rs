//! Push endpoint URLs: what a subscription may point at, and the `host:port` key that
//! per-endpoint concurrency is counted under.

use reqwest::Url;

/// Why a URL cannot be a push endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not a URL at all.
    #[error("not a valid URL: {0}")]
    Parse(String),
    /// A scheme other than `http` or `https`.
    #[error("scheme `{0}` is not allowed: use http or https")]
    Scheme(String),
    /// No host (or an empty one).
    #[error("the URL has no host")]
    NoHost,
    /// A user name or password in the URL: credentials belong in headers, and a URL is
    /// logged and shown to operators.
    #[error("the URL must not carry a user name or password")]
    UserInfo,
}

/// Parses and checks a push endpoint URL: `http` or `https`, a host, no userinfo.
pub fn check_url(url: &str) -> Result<Url, UrlError> {
    let parsed = Url::parse(url).map_err(|e| UrlError::Parse(e.to_string()))?;
    match parsed.scheme() {
        "http" | "https" => {}
        other => return Err(UrlError::Scheme(other.to_owned())),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlError::UserInfo);
    }
    Ok(parsed)
}

/// The endpoint key of a URL, `host:port` with the scheme's default port filled in and
/// the host lower-cased (IPv6 hosts keep their brackets): the unit of per-endpoint
/// concurrency.
pub fn endpoint_key(url: &str) -> Result<String, UrlError> {
    let parsed = check_url(url)?;
    let host = parsed
        .host_str()
        .ok_or(UrlError::NoHost)?
        .to_ascii_lowercase();
    let port = parsed.port_or_known_default().unwrap_or(80);
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_and_no_credentials_pass() {
        assert!(check_url("http://example.com/hook").is_ok());
        assert!(check_url("https://127.0.0.1:8443/x?y=1").is_ok());
        assert!(matches!(check_url("not a url"), Err(UrlError::Parse(_))));
        assert_eq!(
            check_url("ftp://example.com/"),
            Err(UrlError::Scheme("ftp".into()))
        );
        assert!(matches!(
            check_url("file:///etc/passwd"),
            Err(UrlError::Scheme(_))
        ));
        assert_eq!(
            check_url("http://user:pw@example.com/"),
            Err(UrlError::UserInfo)
        );
        assert_eq!(
            check_url("http://user@example.com/"),
            Err(UrlError::UserInfo)
        );
    }

    #[test]
    fn endpoint_keys_fill_in_default_ports() {
        assert_eq!(
            endpoint_key("http://Example.com/a").unwrap(),
            "example.com:80"
        );
        assert_eq!(
            endpoint_key("https://example.com/a").unwrap(),
            "example.com:443"
        );
        assert_eq!(endpoint_key("http://[::1]:9000/").unwrap(), "[::1]:9000");
    }
}
