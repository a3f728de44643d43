//! Access: API tokens, authentication, authorization, per-token rate limits, revocation
//! that takes effect at once, and the audit log.
//!
//! Every request is authenticated against the store (a token revoked on any node is
//! refused by every node from the next request on). Work that outlives a request — a long
//! poll, a message move task — holds a [`CancellationToken`] from
//! [`Broker::revocation_guard`]: revoking the token on this node cancels it at once, and
//! the per-node [`RevocationWatch`] cancels it within one interval when another node
//! revoked the token.
//!
//! Authorization is [`redrive_core::access::permits`]; a refusal is audited. The audit log
//! is appended through the store (which chains the entries); payload reads are audited
//! *before* the payload is returned, so a read that cannot be recorded does not happen.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redrive_core::Timestamp;
use redrive_core::access::{Grant, Operation, Role, permits};
use redrive_core::audit::{
    AuditFields, ChainError, ChainHead, ChainSummary, ChainedEntry, PRUNED_ACTION,
};
use redrive_store::{
    AuditEntry, AuditQuery, MAX_AUDIT_PAGE, NewToken, SqsCredentials, StoreError, TokenRecord,
};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::{Broker, BrokerError, BrokerResult};

/// The prefix of every API token's secret.
pub const TOKEN_PREFIX: &str = "rdt_";
/// Length of a token secret: the prefix and 64 hex digits (256 random bits).
pub const TOKEN_LEN: usize = TOKEN_PREFIX.len() + 64;
/// Longest token name.
pub const MAX_TOKEN_NAME: usize = 64;
/// Most grants on one token.
pub const MAX_GRANTS: usize = 64;
/// Longest filter value (actor, entity, action) of an audit query.
pub const MAX_AUDIT_FILTER_LEN: usize = 260;
/// Default retention of audit entries.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 400;

/// How the broker admits callers (`[auth]` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSettings {
    /// Whether requests must carry a token. Off: every caller acts as `anonymous` with
    /// every right (only for servers that listen on loopback).
    pub enabled: bool,
    /// Requests per second each token may make (0: unlimited).
    pub rate_limit_per_s: u32,
    /// Requests a token may make in a burst above the rate (at least 1 when limited).
    pub rate_limit_burst: u32,
    /// Audit entries older than this many days are removed by the sweep (with a record).
    pub audit_retention_days: u32,
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            enabled: false,
            rate_limit_per_s: 0,
            rate_limit_burst: 0,
            audit_retention_days: DEFAULT_AUDIT_RETENTION_DAYS,
        }
    }
}

/// Who performs an operation: a token's holder, `anonymous` when authentication is off,
/// or the broker itself (`system`). Recorded in the audit log with every act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Token id (`tok_…`), `anonymous` or `system`.
    pub id: String,
    /// The token's name, or who the system actor is (`dispatcher`, `sweeper`).
    pub name: String,
    /// What it may do.
    pub grants: Vec<Grant>,
    /// The client's address, when the act came over the network.
    pub client: Option<String>,
}

impl Actor {
    /// The caller of a server without authentication: may do everything.
    pub fn anonymous() -> Self {
        Actor {
            id: "anonymous".to_owned(),
            name: "anonymous".to_owned(),
            grants: vec![Grant::all(Role::Admin)],
            client: None,
        }
    }

    /// The broker's own work (`name` says which part).
    pub fn system(name: &str) -> Self {
        Actor {
            id: "system".to_owned(),
            name: name.to_owned(),
            grants: vec![Grant::all(Role::Admin)],
            client: None,
        }
    }

    /// The same actor seen from `client`.
    pub fn with_client(mut self, client: Option<String>) -> Self {
        self.client = client;
        self
    }

    /// Whether this actor is a token's holder (so its rights can be revoked).
    pub fn is_token(&self) -> bool {
        self.id.starts_with("tok_")
    }

    /// Whether the actor's grants permit `op` on `entity`.
    pub fn permits(&self, op: Operation, entity: Option<&str>) -> bool {
        permits(&self.grants, op, entity)
    }
}

/// A token just created: the only time its secret is seen.
#[derive(Debug, Clone)]
pub struct CreatedToken {
    /// What is stored.
    pub record: TokenRecord,
    /// The secret (`rdt_…`).
    pub secret: String,
}

/// What creating a token asks for.
#[derive(Debug, Clone, Default)]
pub struct TokenSpec {
    /// A name for people.
    pub name: String,
    /// Its grants (at least one).
    pub grants: Vec<Grant>,
    /// When it stops working.
    pub expires_at: Option<Timestamp>,
    /// Whether to make SQS credentials for it.
    pub sqs: bool,
}

/// Per-token state of this node: rate-limit buckets and revocation guards.
#[derive(Default)]
pub(crate) struct AccessState {
    buckets: Mutex<HashMap<String, Bucket>>,
    guards: Mutex<HashMap<String, CancellationToken>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

/// SHA-256 of a token secret, lowercase hex: what the store keeps.
pub fn secret_hash(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn random_bytes<const N: usize>() -> BrokerResult<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| {
        BrokerError::Store(StoreError::backend(std::io::Error::other(format!(
            "no operating-system randomness for a token: {e}"
        ))))
    })?;
    Ok(b)
}

/// Whether `s` has the shape of a token secret (checked before any hashing or lookup).
pub fn looks_like_token(s: &str) -> bool {
    s.len() == TOKEN_LEN
        && s.starts_with(TOKEN_PREFIX)
        && s[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn new_secret() -> BrokerResult<String> {
    Ok(format!("{TOKEN_PREFIX}{}", hex(&random_bytes::<32>()?)))
}

fn new_sqs_credentials() -> BrokerResult<SqsCredentials> {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const MIXED: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let id = random_bytes::<17>()?;
    let secret = random_bytes::<40>()?;
    Ok(SqsCredentials {
        access_key_id: format!(
            "RDK{}",
            id.iter()
                .map(|b| UPPER[usize::from(*b) % UPPER.len()] as char)
                .collect::<String>()
        ),
        // 62 symbols from bytes: a small bias, well above 230 bits either way.
        secret_access_key: secret
            .iter()
            .map(|b| MIXED[usize::from(*b) % MIXED.len()] as char)
            .collect(),
    })
}

pub(crate) fn actor_of(record: &TokenRecord) -> Actor {
    Actor {
        id: record.token.id.clone(),
        name: record.token.name.clone(),
        grants: record.token.grants.clone(),
        client: None,
    }
}

impl Broker {
    /// Whether requests must carry a token.
    pub fn auth_enabled(&self) -> bool {
        self.inner.access_settings.enabled
    }

    /// The actor behind a request's bearer token (`None`: no `Authorization` header). With
    /// authentication off every caller is [`Actor::anonymous`]. Refused: no token, a
    /// malformed one, an unknown, revoked or expired one (`Unauthenticated`), or one over
    /// its rate limit (`RateLimited`).
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn authenticate(
        &self,
        bearer: Option<&str>,
        client: Option<String>,
    ) -> BrokerResult<Actor> {
        if !self.auth_enabled() {
            return Ok(Actor::anonymous().with_client(client));
        }
        let r = self.authenticate_token(bearer, client).await;
        match &r {
            Err(BrokerError::Unauthenticated(_)) => self.inner.metrics.unauthenticated.inc(),
            Err(BrokerError::RateLimited { .. }) => self.inner.metrics.rate_limited.inc(),
            _ => {}
        }
        r
    }

    async fn authenticate_token(
        &self,
        bearer: Option<&str>,
        client: Option<String>,
    ) -> BrokerResult<Actor> {
        let Some(secret) = bearer else {
            return Err(BrokerError::Unauthenticated(
                "this server requires an API token: send `Authorization: Bearer rdt_…`".into(),
            ));
        };
        if !looks_like_token(secret) {
            return Err(BrokerError::Unauthenticated(
                "the bearer token is not an API token (rdt_ and 64 hex digits)".into(),
            ));
        }
        let found = self.inner.store.find_token(&secret_hash(secret)).await?;
        let record = match found {
            Some(r) if r.is_active(self.now()) => r,
            _ => {
                return Err(BrokerError::Unauthenticated(
                    "the token is unknown, revoked or expired".into(),
                ));
            }
        };
        self.check_rate(&record.token.id)?;
        Ok(actor_of(&record).with_client(client))
    }

    /// The actor and SQS secret key bound to an SQS access key id, if an active token has
    /// it (rate-limited like any request of the token).
    pub async fn authenticate_sqs_key(
        &self,
        access_key_id: &str,
        client: Option<String>,
    ) -> BrokerResult<Option<(Actor, String)>> {
        if access_key_id.is_empty() || access_key_id.len() > 128 {
            return Ok(None);
        }
        let Some(r) = self
            .inner
            .store
            .find_token_by_sqs_key(access_key_id)
            .await?
        else {
            return Ok(None);
        };
        if !r.is_active(self.now()) {
            return Ok(None);
        }
        let Some(sqs) = r.token.sqs.clone() else {
            return Ok(None);
        };
        self.check_rate(&r.token.id)?;
        Ok(Some((
            actor_of(&r).with_client(client),
            sqs.secret_access_key,
        )))
    }

    fn check_rate(&self, token_id: &str) -> BrokerResult<()> {
        let s = &self.inner.access_settings;
        if s.rate_limit_per_s == 0 {
            return Ok(());
        }
        let rate = f64::from(s.rate_limit_per_s);
        let burst = f64::from(s.rate_limit_burst.max(1));
        let now = self.now();
        let mut buckets = self
            .inner
            .access
            .buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(token_id.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait_ms = ((1.0 - b.tokens) / rate * 1000.0).ceil() as u64;
            Err(BrokerError::RateLimited {
                retry_after_ms: wait_ms.max(1),
            })
        }
    }

    /// Refuses `op` on `entity` unless the actor's grants permit it; a refusal is audited
    /// (action `denied:<operation>`).
    #[tracing::instrument(level = "debug", skip_all, fields(operation = ?op, entity))]
    pub async fn authorize(
        &self,
        actor: &Actor,
        op: Operation,
        entity: Option<&str>,
    ) -> BrokerResult<()> {
        if actor.permits(op, entity) {
            return Ok(());
        }
        self.inner.metrics.forbidden.inc();
        let need: Vec<&str> = op.requires().iter().map(|r| r.as_str()).collect();
        let action = format!("denied:{op:?}");
        if let Err(e) = self
            .audit(actor, &action, entity, Vec::new(), "denied")
            .await
        {
            tracing::warn!(error = %e, "could not audit a refused request");
        }
        Err(BrokerError::Forbidden {
            operation: format!("{op:?}"),
            needs: need.join(if op.needs_any() { " or " } else { " and " }),
            entity: entity.map(str::to_owned),
        })
    }

    /// Refuses `actor` an act that a rule other than the permission table decides (for
    /// example, only a plan's owner may move it): audited as `denied:<operation>` on
    /// `entity` and counted, as [`Broker::authorize`] does.
    pub(crate) async fn refuse(
        &self,
        actor: &Actor,
        operation: &str,
        needs: &str,
        entity: Option<&str>,
    ) -> BrokerError {
        self.inner.metrics.forbidden.inc();
        let action = format!("denied:{operation}");
        if let Err(e) = self
            .audit(actor, &action, entity, Vec::new(), "denied")
            .await
        {
            tracing::warn!(error = %e, "could not audit a refused request");
        }
        BrokerError::Forbidden {
            operation: operation.to_owned(),
            needs: needs.to_owned(),
            entity: entity.map(str::to_owned),
        }
    }

    /// A cancellation token that fires when the actor's token is revoked (never, for an
    /// actor that is not a token). Long polls and move tasks hold one.
    pub fn revocation_guard(&self, actor: &Actor) -> CancellationToken {
        if !actor.is_token() {
            return CancellationToken::new();
        }
        let mut g = self
            .inner
            .access
            .guards
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        g.entry(actor.id.clone()).or_default().child_token()
    }

    fn fire_revocation(&self, token_id: &str) {
        let parent = self
            .inner
            .access
            .guards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token_id);
        if let Some(p) = parent {
            p.cancel();
        }
        self.inner
            .access
            .buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token_id);
    }

    /// Token ids this node holds guards for.
    fn guarded_tokens(&self) -> Vec<String> {
        self.inner
            .access
            .guards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Creates a token (audited). The secret is returned once and never stored.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn create_token(&self, actor: &Actor, spec: TokenSpec) -> BrokerResult<CreatedToken> {
        let name = spec.name.trim();
        if name.is_empty()
            || name.len() > MAX_TOKEN_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(BrokerError::invalid(
                "name",
                format!("1 to {MAX_TOKEN_NAME} letters, digits, '-', '_' or '.'"),
            ));
        }
        if spec.grants.is_empty() || spec.grants.len() > MAX_GRANTS {
            return Err(BrokerError::invalid(
                "grants",
                format!("1 to {MAX_GRANTS} grants, such as producer:orders or admin"),
            ));
        }
        let now = self.now();
        if spec.expires_at.is_some_and(|t| t <= now) {
            return Err(BrokerError::invalid("expires_at", "must be in the future"));
        }
        let secret = new_secret()?;
        let new = NewToken {
            id: format!("tok_{}", hex(&random_bytes::<8>()?)),
            name: name.to_owned(),
            secret_hash: secret_hash(&secret),
            grants: spec.grants,
            created_by: actor.id.clone(),
            expires_at: spec.expires_at,
            sqs: if spec.sqs {
                Some(new_sqs_credentials()?)
            } else {
                None
            },
        };
        let result = self.inner.store.create_token(&new, now).await;
        let outcome = outcome_of(&result);
        self.audit(
            actor,
            "token.create",
            None,
            vec![new.id.clone(), format!("name={}", new.name)],
            &outcome,
        )
        .await?;
        let record = result?;
        tracing::info!(token = %record.token.id, name = %record.token.name,
            actor = %actor.id, "token created");
        Ok(CreatedToken { record, secret })
    }

    /// Every token (secrets are not stored; SQS secret keys are left out by the
    /// interfaces).
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_tokens(&self) -> BrokerResult<Vec<TokenRecord>> {
        Ok(self.inner.store.list_tokens().await?)
    }

    /// Revokes a token (audited): refused from the next request on, on every node; long
    /// polls and move tasks of this node that it started end at once.
    #[tracing::instrument(level = "debug", skip_all, fields(token_id = %id))]
    pub async fn revoke_token(&self, actor: &Actor, id: &str) -> BrokerResult<TokenRecord> {
        if id.len() > 64 {
            return Err(BrokerError::invalid("id", "not a token id"));
        }
        let result = self.inner.store.revoke_token(id, self.now()).await;
        let outcome = outcome_of(&result);
        self.audit(actor, "token.revoke", None, vec![id.to_owned()], &outcome)
            .await?;
        let record = result?;
        self.fire_revocation(id);
        tracing::info!(token = %id, actor = %actor.id, "token revoked");
        Ok(record)
    }

    /// At start with authentication on: makes sure an admin token exists. With a
    /// configured secret, stores it (once) as the `bootstrap-admin` token; without one, and
    /// with no active admin token in the store, creates one and returns its secret for the
    /// caller to print once.
    pub async fn bootstrap_admin(&self, configured: Option<&str>) -> BrokerResult<Option<String>> {
        let now = self.now();
        let tokens = self.inner.store.list_tokens().await?;
        let admin_exists = tokens
            .iter()
            .any(|t| t.is_active(now) && t.token.grants.iter().any(|g| g.role == Role::Admin));
        let secret = match configured {
            Some(s) => {
                if !looks_like_token(s) {
                    return Err(BrokerError::invalid(
                        "bootstrap_token",
                        "must be rdt_ followed by 64 lowercase hex digits",
                    ));
                }
                if tokens.iter().any(|t| t.token.secret_hash == secret_hash(s)) {
                    return Ok(None);
                }
                s.to_owned()
            }
            None if admin_exists => return Ok(None),
            None => new_secret()?,
        };
        let new = NewToken {
            id: format!("tok_{}", hex(&random_bytes::<8>()?)),
            name: format!("bootstrap-admin-{}", now.as_millis()),
            secret_hash: secret_hash(&secret),
            grants: vec![Grant::all(Role::Admin)],
            created_by: "bootstrap".to_owned(),
            expires_at: None,
            sqs: None,
        };
        let record = self.inner.store.create_token(&new, now).await?;
        self.audit(
            &Actor::system("bootstrap"),
            "token.create",
            None,
            vec![
                record.token.id.clone(),
                format!("name={}", record.token.name),
            ],
            "ok",
        )
        .await?;
        Ok(configured.is_none().then_some(secret))
    }

    /// Appends one audit entry.
    pub async fn audit(
        &self,
        actor: &Actor,
        action: &str,
        entity: Option<&str>,
        targets: Vec<String>,
        outcome: &str,
    ) -> BrokerResult<()> {
        self.inner
            .ctx
            .audit(actor, action, entity, targets, outcome)
            .await
    }

    /// Audits the outcome of an operation and passes its result on ([`Context::audited`]).
    ///
    /// [`Context::audited`]: crate::context::Context::audited
    pub(crate) async fn audited<T>(
        &self,
        actor: &Actor,
        action: &str,
        entity: Option<&str>,
        targets: Vec<String>,
        result: BrokerResult<T>,
    ) -> BrokerResult<T> {
        self.inner
            .ctx
            .audited(actor, action, entity, targets, result)
            .await
    }

    /// A page of the audit log: at most `limit` (1 to [`MAX_AUDIT_PAGE`]) entries, each
    /// filter value at most [`MAX_AUDIT_FILTER_LEN`] bytes.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_audit(&self, query: &AuditQuery) -> BrokerResult<Vec<AuditEntry>> {
        if query.limit == 0 || query.limit > MAX_AUDIT_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("must be between 1 and {MAX_AUDIT_PAGE}"),
            ));
        }
        for (field, v) in [
            ("actor", &query.actor_id),
            ("entity", &query.entity),
            ("action", &query.action),
        ] {
            if v.as_ref().is_some_and(|v| v.len() > MAX_AUDIT_FILTER_LEN) {
                return Err(BrokerError::invalid(
                    field,
                    format!("must be at most {MAX_AUDIT_FILTER_LEN} characters"),
                ));
            }
        }
        Ok(self.inner.store.list_audit(query).await?)
    }

    /// Reads the chain's head, then the whole log, and checks the chain against the head
    /// (entries appended after the head was read are checked as links only). Answers the
    /// head too (`None`: its record is gone), which is also logged, for a copy kept
    /// outside the store.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn verify_audit(
        &self,
    ) -> BrokerResult<(Option<ChainHead>, Result<ChainSummary, ChainError>)> {
        let head = self.inner.store.audit_head().await?;
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .inner
                .store
                .list_audit(&AuditQuery {
                    after_seq: after,
                    limit: MAX_AUDIT_PAGE,
                    ..AuditQuery::default()
                })
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(last.seq);
            let full = page.len() as u32 == MAX_AUDIT_PAGE;
            all.extend(page.into_iter().map(ChainedEntry::from));
            if !full {
                break;
            }
        }
        let result = redrive_core::audit::verify(&all, head.as_ref());
        match (&head, &result) {
            (Some(h), Ok(_)) => {
                tracing::info!(head_seq = h.seq, head_hash = %h.hash, "audit chain verified");
            }
            (h, Err(e)) => tracing::error!(
                head_seq = h.as_ref().map(|h| h.seq),
                head_hash = h.as_ref().map(|h| h.hash.as_str()),
                error = %e,
                "the audit log's chain is broken"
            ),
            (None, Ok(_)) => {}
        }
        Ok((head, result))
    }

    /// The chain's head as the store records it (`None`: its record is gone).
    pub async fn audit_head(&self) -> BrokerResult<Option<ChainHead>> {
        Ok(self.inner.store.audit_head().await?)
    }

    /// Removes audit entries past their retention (run by the sweep, under its lease),
    /// leaving a record of the removal in the chain.
    pub(crate) async fn prune_audit(&self) -> BrokerResult<u64> {
        let days = self.inner.access_settings.audit_retention_days;
        if days == 0 {
            return Ok(0);
        }
        let now = self.now();
        let before = now.plus_millis(-(i64::from(days) * 86_400_000));
        let fields = AuditFields {
            at: now,
            actor_id: "system".into(),
            actor_name: "retention".into(),
            action: PRUNED_ACTION.into(),
            entity: None,
            targets: vec![format!("retention_days={days}")],
            outcome: "ok".into(),
            client: None,
        };
        let n = self.inner.store.prune_audit(before, &fields).await?;
        if n > 0 {
            tracing::info!(
                removed = n,
                retention_days = days,
                "audit entries past retention removed"
            );
        }
        Ok(n)
    }
}

fn outcome_of<T>(r: &Result<T, StoreError>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("error:{:?}", e.kind()).to_lowercase(),
    }
}

/// Ends this node's long polls and move tasks of tokens that another node revoked: every
/// `interval` of the broker's clock, looks up the tokens that hold guards here.
pub struct RevocationWatch {
    broker: Broker,
    interval: Duration,
}

impl RevocationWatch {
    /// A watch looking every `interval`.
    pub fn new(broker: Broker, interval: Duration) -> Self {
        RevocationWatch { broker, interval }
    }

    /// One look: cancels the guards of tokens no longer active. Returns how many.
    pub async fn check_once(&self) -> BrokerResult<usize> {
        let held = self.broker.guarded_tokens();
        if held.is_empty() {
            return Ok(0);
        }
        let now = self.broker.now();
        let tokens = self.broker.inner.store.list_tokens().await?;
        let mut n = 0;
        for id in held {
            let active = tokens.iter().any(|t| t.token.id == id && t.is_active(now));
            if !active {
                self.broker.fire_revocation(&id);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Looks until `cancel` fires (only while authentication is on).
    pub async fn run(self, cancel: CancellationToken) {
        if !self.broker.auth_enabled() {
            return;
        }
        loop {
            if let Err(e) = self.check_once().await {
                tracing::warn!(error = %e, "revocation look failed; retrying");
            }
            let next = self.broker.now().plus(self.interval);
            tokio::select! {
                () = self.broker.inner.clock.sleep_until(next) => {}
                () = cancel.cancelled() => return,
            }
        }
    }
}
