//! Who may call which route: the one table of the native API's permissions, and the
//! middleware that authenticates every request and checks it against the table.
//!
//! Every route of the router has a row in [`ROUTES`]: the operations that permit it (any
//! of them) and the path parameter that names its entity. A route without a row is
//! refused (fail closed); a test holds the table and the router to each other. Handlers
//! that need more than the row — creating an entity named in the body, listing only what
//! the caller may see, including payloads only for `payload-reader` — take the
//! [`Actor`] from the request's extensions and ask the broker.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use redrive_broker::{Actor, BrokerError};
use redrive_core::access::Operation;

use crate::AppState;
use crate::error::ApiError;

/// One route's permission: method, path pattern as routed, the operations that permit it
/// (any of them), and the path parameter naming the entity (`None`: no single entity;
/// the handler checks or filters).
pub type RouteRule = (
    Method,
    &'static str,
    &'static [Operation],
    Option<&'static str>,
);

/// Routes anyone may call: health checks and the API description. A `HEAD` request has
/// the row of its `GET` route, here and in [`ROUTES`] (see [`rule`]).
pub const PUBLIC: &[(Method, &str)] = &[(Method::GET, "/healthz"), (Method::GET, "/openapi.json")];

/// The web console's routes, public too: its page and static files, which hold no data
/// (the console reads everything through the API with the caller's token). Not part of
/// the API, so not in its OpenAPI document; absent from the router with `--console off`.
pub const CONSOLE: &[(Method, &str)] = &[(Method::GET, "/"), (Method::GET, "/console/{*path}")];

/// Routes any authenticated caller may call, whatever its grants (a token without any
/// role on an entity too): who the caller is. They need a valid token where
/// authentication is on, and no row in [`ROUTES`].
pub const AUTHENTICATED: &[(Method, &str)] = &[(Method::GET, "/v1/whoami")];

/// The permission of every authenticated route.
pub const ROUTES: &[RouteRule] = {
    use Operation::*;
    const Q: Option<&str> = Some("name");
    const T: Option<&str> = Some("topic");
    &[
        (Method::GET, "/v1/queues", &[ReadMetadata], None),
        (Method::POST, "/v1/queues", &[CreateEntity], None),
        (Method::GET, "/v1/queues/{name}", &[ReadMetadata], Q),
        (Method::GET, "/v1/queues/{name}/series", &[ReadMetadata], Q),
        (
            Method::GET,
            "/v1/queues/{name}/policy/versions",
            &[ReadMetadata],
            Q,
        ),
        // Lists only what the caller may see (the broker filters each entity).
        (Method::GET, "/v1/overview", &[ReadMetadata], None),
        (Method::PATCH, "/v1/queues/{name}", &[UpdatePolicy], Q),
        (Method::DELETE, "/v1/queues/{name}", &[DeleteEntity], Q),
        (Method::POST, "/v1/queues/{name}/purge", &[Purge], Q),
        (Method::GET, "/v1/queues/{name}/messages", &[Peek], Q),
        (Method::POST, "/v1/queues/{name}/messages", &[Send], Q),
        (
            Method::DELETE,
            "/v1/queues/{name}/messages/scheduled/{seq}",
            &[CancelScheduled],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/messages/deferred/receive",
            &[Receive],
            Q,
        ),
        (Method::POST, "/v1/queues/{name}/receive", &[Receive], Q),
        (Method::POST, "/v1/queues/{name}/settle", &[Settle], Q),
        // Each operation's queue is in the body: the broker checks each one's role on it.
        (
            Method::POST,
            "/v1/transactions",
            &[Send, Settle, CancelScheduled],
            None,
        ),
        (
            Method::GET,
            "/v1/queues/{name}/sessions",
            &[ReadMetadata],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/sessions/accept",
            &[Session],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/sessions/{session}/renew",
            &[Session],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/sessions/{session}/release",
            &[Session],
            Q,
        ),
        // Lists only the queues whose dead letters the caller may read.
        (
            Method::GET,
            "/v1/failures",
            &[ReadDeadLetterMetadata, ReadDeadLetterPayload],
            None,
        ),
        (
            Method::GET,
            "/v1/queues/{name}/dead-letters",
            &[ReadDeadLetterMetadata, ReadDeadLetterPayload],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/receive",
            &[ConsumeDeadLetters],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/settle",
            &[ConsumeDeadLetters],
            Q,
        ),
        (
            Method::GET,
            "/v1/queues/{name}/dead-letters/{id}",
            &[ReadDeadLetterMetadata, ReadDeadLetterPayload],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/{id}/resubmit",
            &[Replay],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/{id}/move",
            &[MoveDeadLetter],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/{id}/restore",
            &[MoveDeadLetter],
            Q,
        ),
        (
            Method::POST,
            "/v1/queues/{name}/dead-letters/import",
            &[ImportDeadLetters],
            Q,
        ),
        (Method::GET, "/v1/replay", &[ReadReplays], None),
        // A case's entity is its queue: the handlers check the role on it.
        (Method::GET, "/v1/cases", &[ReadCases], None),
        (Method::GET, "/v1/cases/counts", &[ReadCases], None),
        (Method::GET, "/v1/cases/{id}", &[ReadCases], None),
        (
            Method::GET,
            "/v1/cases/{id}/payload",
            &[ReadCasePayload],
            None,
        ),
        (Method::POST, "/v1/cases/{id}/claim", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/release", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/notes", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/diagnosis", &[WorkCases], None),
        (
            Method::POST,
            "/v1/cases/{id}/corrections",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/cases/{id}/transformations",
            &[WorkCases],
            None,
        ),
        (Method::POST, "/v1/cases/{id}/tests", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/reconcile", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/close", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/review", &[WorkCases], None),
        (Method::POST, "/v1/cases/{id}/replay", &[ReplayCase], None),
        // A case group's entity is its queue: the broker checks the role on it.
        (Method::GET, "/v1/case-groups", &[ReadCases], None),
        (Method::POST, "/v1/case-groups", &[WorkCases], None),
        (Method::GET, "/v1/case-groups/{id}", &[ReadCases], None),
        (
            Method::POST,
            "/v1/case-groups/{id}/claim",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/case-groups/{id}/release",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/case-groups/{id}/diagnosis",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/case-groups/{id}/corrections",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/case-groups/{id}/tests",
            &[WorkCases],
            None,
        ),
        (
            Method::POST,
            "/v1/case-groups/{id}/close",
            &[WorkCases],
            None,
        ),
        (Method::GET, "/v1/intents/{id}", &[ReadCases], None),
        (
            Method::POST,
            "/v1/intents/{id}/cancel",
            &[UpdateIntent],
            None,
        ),
        (
            Method::POST,
            "/v1/intents/{id}/supersede",
            &[UpdateIntent],
            None,
        ),
        (Method::GET, "/v1/effect-authorities", &[ReadRegister], None),
        (
            Method::PUT,
            "/v1/effect-authorities/{type}",
            &[ManageRegister],
            None,
        ),
        (
            Method::DELETE,
            "/v1/effect-authorities/{type}",
            &[ManageRegister],
            None,
        ),
        (Method::GET, "/v1/replay/{name}", &[ReadReplays], Q),
        // The selection's queue is in the body: the handler checks the role on it.
        (
            Method::POST,
            "/v1/replay/plans/preview",
            &[ReplayCase],
            None,
        ),
        // A plan's entity is its queue: the handlers check the role on it once the plan
        // (or, for a creation, the body) is read.
        (Method::POST, "/v1/replay/plans", &[ReplayCase], None),
        (Method::GET, "/v1/replay/plans", &[ReadCases], None),
        (Method::GET, "/v1/replay/plans/{id}", &[ReadCases], None),
        (
            Method::GET,
            "/v1/replay/plans/{id}/items",
            &[ReadCases],
            None,
        ),
        (
            Method::POST,
            "/v1/replay/plans/{id}/start",
            &[ReplayCase],
            None,
        ),
        (
            Method::POST,
            "/v1/replay/plans/{id}/pause",
            &[ReplayCase],
            None,
        ),
        (
            Method::POST,
            "/v1/replay/plans/{id}/resume",
            &[ReplayCase],
            None,
        ),
        (
            Method::POST,
            "/v1/replay/plans/{id}/cancel",
            &[ReplayCase],
            None,
        ),
        (Method::GET, "/metrics", &[ReadMetrics], None),
        (Method::GET, "/v1/topics", &[ReadMetadata], None),
        (Method::POST, "/v1/topics", &[CreateEntity], None),
        (Method::GET, "/v1/topics/{topic}", &[ReadMetadata], T),
        (Method::DELETE, "/v1/topics/{topic}", &[DeleteEntity], T),
        (
            Method::GET,
            "/v1/topics/{topic}/subscriptions",
            &[ReadMetadata],
            T,
        ),
        (
            Method::POST,
            "/v1/topics/{topic}/subscriptions",
            &[CreateSubscription],
            T,
        ),
        (
            Method::GET,
            "/v1/topics/{topic}/subscriptions/{sub}",
            &[ReadMetadata],
            T,
        ),
        (
            Method::PATCH,
            "/v1/topics/{topic}/subscriptions/{sub}",
            &[UpdatePolicy],
            T,
        ),
        (
            Method::DELETE,
            "/v1/topics/{topic}/subscriptions/{sub}",
            &[DeleteEntity],
            T,
        ),
        (Method::POST, "/v1/topics/{topic}/events", &[Publish], T),
        (Method::POST, "/v1/tokens", &[ManageTokens], None),
        (Method::GET, "/v1/tokens", &[ManageTokens], None),
        (
            Method::POST,
            "/v1/tokens/{id}/revoke",
            &[ManageTokens],
            None,
        ),
        (Method::GET, "/v1/audit", &[ReadAudit], None),
        (Method::POST, "/v1/audit/verify", &[ReadAudit], None),
        (Method::GET, "/v1/register", &[ReadRegister], None),
        (Method::PUT, "/v1/register/{key}", &[ManageRegister], None),
        (
            Method::DELETE,
            "/v1/register/{key}",
            &[ManageRegister],
            None,
        ),
    ]
};

/// The method a request is judged as: `HEAD` is `GET` without the body (the router
/// answers it on every `GET` route), so it needs what `GET` needs, no more and no less.
fn judged_as(method: &Method) -> &Method {
    if method == Method::HEAD {
        &Method::GET
    } else {
        method
    }
}

/// The row of a routed request (a `HEAD` has its `GET` route's row).
pub fn rule(method: &Method, path: &str) -> Option<&'static RouteRule> {
    let method = judged_as(method);
    ROUTES.iter().find(|(m, p, _, _)| m == method && *p == path)
}

/// Whether anyone may call the route (a `HEAD` as its `GET` route).
pub fn is_public(method: &Method, path: &str) -> bool {
    let method = judged_as(method);
    PUBLIC
        .iter()
        .chain(CONSOLE)
        .any(|(m, p)| m == method && *p == path)
}

/// Whether any authenticated caller may call the route (a `HEAD` as its `GET` route).
pub fn is_authenticated_only(method: &Method, path: &str) -> bool {
    let method = judged_as(method);
    AUTHENTICATED.iter().any(|(m, p)| m == method && *p == path)
}

/// Longest `Authorization` header looked at (a token is 68 characters).
const MAX_AUTHORIZATION_LEN: usize = 256;

/// The bearer token of a request: `Some(Ok(token))`, `None` without the header, and an
/// error for a header that is not `Bearer <token>`.
fn bearer(req: &Request) -> Result<Option<&str>, ApiError> {
    let Some(v) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::from(BrokerError::Unauthenticated(
            "the Authorization header must be `Bearer rdt_…`".into(),
        ))
    };
    if v.len() > MAX_AUTHORIZATION_LEN {
        return Err(bad());
    }
    let v = v.to_str().map_err(|_| bad())?;
    match v.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Ok(Some(token.trim())),
        _ => Err(bad()),
    }
}

/// Authenticates the request and checks its route's row; the [`Actor`] goes into the
/// request's extensions for the handler. Applied as a route layer (so the matched path is
/// known); unmatched paths fall through to the router's 404.
pub async fn guard(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let method = req.method().clone();
    if is_public(&method, &path) {
        return next.run(req).await;
    }
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    // Without authentication the header means nothing and is not read; a caller who sent
    // one is told so (AUTHENTICATION_OFF), so that a token meant for a protected server
    // is not silently taken as working.
    if !s.broker.auth_enabled() && req.headers().contains_key(header::AUTHORIZATION) {
        let mut resp = guarded(s, req, next, client, path, method, None).await;
        resp.headers_mut().insert(
            redrive_api::access::AUTHENTICATION_HEADER,
            header::HeaderValue::from_static("off"),
        );
        return resp;
    }
    let token = if s.broker.auth_enabled() {
        match bearer(&req) {
            Ok(t) => t.map(str::to_owned),
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    guarded(s, req, next, client, path, method, token).await
}

/// [`guard`] once the caller's token (if read) is known: authenticates, checks the
/// permission row, and runs the handler.
async fn guarded(
    s: AppState,
    req: Request,
    next: Next,
    client: Option<String>,
    path: String,
    method: Method,
    token: Option<String>,
) -> Response {
    let actor = match s.broker.authenticate(token.as_deref(), client).await {
        Ok(a) => a,
        Err(e) => return ApiError::from(e).into_response(),
    };
    if is_authenticated_only(&method, &path) {
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(actor);
        return next.run(Request::from_parts(parts, body)).await;
    }
    let Some((_, _, ops, param)) = rule(&method, &path) else {
        tracing::error!(%method, path, "route without a permission row: refused");
        return ApiError::from(BrokerError::Forbidden {
            operation: format!("{method} {path}"),
            needs: "a permission row".into(),
            entity: None,
        })
        .into_response();
    };
    let (mut parts, body) = req.into_parts();
    let entity = match param {
        None => None,
        Some(name) => match RawPathParams::from_request_parts(&mut parts, &()).await {
            Ok(params) => params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_owned()),
            Err(e) => return e.into_response(),
        },
    };
    if !ops.iter().any(|op| actor.permits(*op, entity.as_deref()))
        && let Err(e) = s.broker.authorize(&actor, ops[0], entity.as_deref()).await
    {
        return ApiError::from(e).into_response();
    }
    parts.extensions.insert(actor);
    next.run(Request::from_parts(parts, body)).await
}

/// The caller of a handler, as the guard authenticated it.
pub struct Caller(pub Actor);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        match parts.extensions.get::<Actor>() {
            Some(a) => Ok(Caller(a.clone())),
            // Every routed request passes the guard, which sets the actor.
            None => Err(ApiError::from(BrokerError::Unauthenticated(
                "the request was not authenticated".into(),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_unique_and_names_an_operation() {
        for (i, (m, p, ops, _)) in ROUTES.iter().enumerate() {
            assert!(!ops.is_empty(), "{m} {p}");
            assert!(
                ROUTES[i + 1..]
                    .iter()
                    .all(|(m2, p2, _, _)| m2 != m || p2 != p),
                "{m} {p} twice"
            );
        }
    }

    #[test]
    fn routes_for_any_authenticated_caller_have_no_row_and_are_not_public() {
        for (m, p) in AUTHENTICATED {
            assert!(rule(m, p).is_none(), "{m} {p} also has a permission row");
            assert!(!is_public(m, p), "{m} {p} is also public");
            assert!(is_authenticated_only(m, p));
        }
        assert!(is_authenticated_only(&Method::HEAD, "/v1/whoami"));
        assert!(!is_authenticated_only(&Method::GET, "/v1/queues"));
        assert!(!is_authenticated_only(&Method::POST, "/v1/whoami"));
    }

    #[test]
    fn entity_parameters_appear_in_their_paths() {
        for (m, p, _, param) in ROUTES {
            if let Some(name) = param {
                assert!(
                    p.contains(&format!("{{{name}}}")),
                    "{m} {p} has no {{{name}}}"
                );
            }
        }
    }
}
