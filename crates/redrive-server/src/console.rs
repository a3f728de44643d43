//! The web console: plain ES modules, one stylesheet and `index.html`, embedded in the
//! binary by `build.rs` and served at `/` (the page) and `/console/…` (its files) on the
//! API's port. The routes are public (static files, no data; the `PUBLIC` rows of
//! [`crate::access`]); everything the console shows it reads through the API with the
//! token the operator signs in with, under the same roles as the CLI.
//!
//! Every answer carries a strict Content Security Policy (scripts, styles and requests to
//! this origin only, no inline code, no framing), `nosniff`, `no-referrer`, and an entity
//! tag with `Cache-Control: no-cache`: a browser revalidates and gets a 304 while the
//! binary is the same.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use redrive_api::ErrorCode;

use crate::AppState;
use crate::error::ApiError;

/// One embedded file.
pub(crate) struct Asset {
    /// Path under `console/`, `/`-separated.
    pub path: &'static str,
    /// `Content-Type` it is served with.
    pub content_type: &'static str,
    /// Its entity tag, quoted (a hash of the bytes and their length).
    pub etag: &'static str,
    /// The bytes.
    pub body: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// The Content Security Policy of every console answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
frame-ancestors 'none'";

/// Where the console's files are served (`/console/js/app.js`…).
pub const ASSET_PREFIX: &str = "/console/";

/// Longest asset path looked up.
const MAX_ASSET_PATH: usize = 256;

fn find(path: &str) -> Option<&'static Asset> {
    if path.len() > MAX_ASSET_PATH {
        return None;
    }
    ASSETS
        .binary_search_by(|a| a.path.cmp(path))
        .ok()
        .map(|i| &ASSETS[i])
}

/// The headers every console answer carries, problem documents included.
fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// Whether `If-None-Match` names `etag` (or is `*`); weak tags compare by their opaque part.
pub(crate) fn matches(headers: &HeaderMap, etag: &str) -> bool {
    let Some(v) = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    // A header longer than any list a browser sends is not looked at.
    if v.len() > 4096 {
        return false;
    }
    let bare = etag.trim_start_matches("W/");
    v.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == bare)
}

fn serve(asset: &'static Asset, req: &HeaderMap) -> Response {
    let mut resp = if matches(req, asset.etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = asset.body.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    harden(h);
    resp
}

async fn index(headers: HeaderMap) -> Response {
    match find("index.html") {
        Some(a) => serve(a, &headers),
        None => not_found(),
    }
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    // `index.html` is the page at `/`, not a file under the prefix.
    match find(&path).filter(|a| a.path != "index.html") {
        Some(a) => serve(a, &headers),
        None => not_found(),
    }
}

fn not_found() -> Response {
    let mut resp =
        ApiError::new(ErrorCode::NotFound, "no such file in the console").into_response();
    harden(resp.headers_mut());
    resp
}

/// The console's routes (public rows of [`crate::access::PUBLIC`]).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/console/{*path}", get(asset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_holds_the_shell() {
        assert!(ASSETS.windows(2).all(|w| w[0].path < w[1].path));
        for p in [
            "index.html",
            "app.css",
            "js/app.js",
            "js/routes.js",
            "js/api.js",
            "js/ui.js",
        ] {
            assert!(find(p).is_some(), "{p} is not embedded");
        }
        assert!(find("js/nope.js").is_none());
        assert!(find("../Cargo.toml").is_none());
    }

    #[test]
    fn if_none_match_compares_tags_weakly_and_accepts_lists() {
        let mut h = HeaderMap::new();
        assert!(!matches(&h, "\"a\""));
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"b\", W/\"a\""),
        );
        assert!(matches(&h, "\"a\""));
        assert!(!matches(&h, "\"c\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(matches(&h, "\"c\""));
    }

    #[test]
    fn no_page_carries_inline_script_or_style() {
        for a in ASSETS {
            let text = String::from_utf8_lossy(a.body);
            if a.path.ends_with(".html") {
                assert!(!text.contains("<style"), "{}: inline <style>", a.path);
                assert!(!text.contains("style="), "{}: a style attribute", a.path);
                for (i, _) in text.match_indices("<script") {
                    let tag = &text[i..text[i..].find('>').map_or(text.len(), |e| i + e)];
                    assert!(tag.contains("src="), "{}: an inline script", a.path);
                }
            }
            if a.path.ends_with(".js") {
                assert!(!text.contains(".innerHTML"), "{}: innerHTML", a.path);
                assert!(!text.contains("eval("), "{}: eval", a.path);
            }
        }
    }
}
