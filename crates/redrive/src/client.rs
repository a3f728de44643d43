//! A small HTTP client for redrive's native API (`/v1/...`), typed with `redrive-api`.
//! Error responses are decoded from RFC 9457 problem documents into [`ClientError`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::fmt;
use std::time::Duration;

use redrive_api::Problem;
use redrive_api::access::{
    AuditPage, AuditVerification, CreateToken, CreatedToken, Token, TokenList,
};
use redrive_api::case::{
    CancelIntent, Case, CaseCounts, CaseGroup, CaseGroupList, CasePage, CasePayload, ClaimCase,
    CloseCase, CorrectCase, CreateCaseGroup, DiagnoseCase, EffectAuthority, EffectAuthorityList,
    Intent, NoteCase, ReviewCase, SetEffectAuthority, SupersedeIntent, TestCase, TransformCase,
};
use redrive_api::dead_letter::{
    DeadLetter, DeadLetterPage, ImportDeadLetters, ImportResult, MoveDeadLetter, RestoreDeadLetter,
    RestoreResult,
};
use redrive_api::message::{
    AcceptSession, MessageList, ReceiveDeferred, ReceiveRequest, SendRequest, SendResponse,
    SendResult, SessionLock, SessionTokenRequest, Settle, SettleRequest, SettleResponse,
    SettleResult,
};
use redrive_api::queue::{CreateQueue, PurgeResult, QueueInfo, QueueList, UpdateQueue};
use redrive_api::replay::{
    CreatePlan, PlanItemList, ReplayPlan, ReplayPlanList, ReplayStatus, ReplayStatusList,
};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A request that did not succeed.
#[derive(Debug)]
pub enum ClientError {
    /// The server refused or failed the request and said why.
    Problem(Box<Problem>),
    /// The server answered an error status without a problem document.
    Status {
        /// HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The server could not be reached (connection refused, reset, timed out).
    Unreachable {
        /// The URL asked for.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// Any other transport failure.
    Transport(reqwest::Error),
    /// The answer was not the expected shape.
    Decode {
        /// What was being read.
        what: String,
        /// The cause.
        source: serde_json::Error,
    },
}

impl ClientError {
    /// Whether the server could not be reached at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Unreachable { .. })
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Problem(p) => Some(p.status),
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Problem(p) => {
                write!(f, "{}", p.title)?;
                if let Some(d) = &p.detail {
                    write!(f, ": {d}")?;
                }
                write!(f, " ({}", p.code)?;
                if let Some(field) = p.extra.get("field").and_then(|v| v.as_str()) {
                    write!(f, ", field {field}")?;
                }
                // A case's or plan's conflict reason is a stable code the detail does not
                // repeat.
                if (p.code == "case_conflict" || p.code == "plan_conflict")
                    && let Some(reason) = p.extra.get("reason").and_then(|v| v.as_str())
                {
                    write!(f, ", {reason}")?;
                }
                write!(f, ")")
            }
            ClientError::Status { status, body } if body.is_empty() => {
                write!(f, "server answered HTTP {status}")
            }
            ClientError::Status { status, body } => {
                write!(f, "server answered HTTP {status}: {body}")
            }
            ClientError::Unreachable { url, source } => {
                write!(f, "cannot reach the server at {url}: {}", cause(source))
            }
            ClientError::Transport(e) => write!(f, "request failed: {}", cause(e)),
            ClientError::Decode { what, source } => {
                write!(f, "unexpected answer from the server ({what}): {source}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// Why a request got no answer: what is wrong with the TLS when that is it (an untrusted
/// certificate, a wrong name), otherwise the innermost cause.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(tls) = redrive_tls::tls_failure(e) {
        return tls.to_string();
    }
    root_cause(e)
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Query of `GET /v1/queues/{name}/dead-letters`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeadLetterQuery {
    /// `live`, `archived` or `quarantine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<String>,
    /// Reason code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// RFC 3339 lower bound of `dead_lettered_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// RFC 3339 upper bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Page cursor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A page of `GET /v1/queues/{name}/dead-letters` with each record as the server sent it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RawDeadLetterPage {
    /// The records, oldest first.
    pub dead_letters: Vec<Map<String, Value>>,
    /// Records of the page whose stored row the server cannot read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecodable: Vec<redrive_api::dead_letter::UndecodableDeadLetter>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Query of `GET /v1/audit`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditQuery {
    /// Token id of the actor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Queue or topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Action (`dead_letter.read`, `token.revoke`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// RFC 3339 lower bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// RFC 3339 upper bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Page cursor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Search of `GET /v1/cases` and `GET /v1/cases/counts`; every filter is optional and
/// they combine with AND.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaseQuery {
    /// The queue (a subscription's is `<topic>.<subscription>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Dead-letter reason code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Message type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// The event's or message's `source`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The event's or message's `subject`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// States, comma-separated (`diagnosis_proposed,correction_identified`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only open cases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open: Option<bool>,
    /// The claim's owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Only open cases past their review deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overdue: Option<bool>,
    /// RFC 3339 lower bound of the opening.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// RFC 3339 upper bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Evidence quality (`exact`, `approximate`, `incomplete`, `unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_quality: Option<String>,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// Intent id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// Page cursor (listing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size (listing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl CaseQuery {
    /// The query's `(name, value)` pairs, in the order the fields are declared.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let flag = |b: Option<bool>| b.map(|b| b.to_string());
        [
            ("queue", self.queue.clone()),
            ("reason", self.reason.clone()),
            ("type", self.message_type.clone()),
            ("source", self.source.clone()),
            ("subject", self.subject.clone()),
            ("state", self.state.clone()),
            ("open", flag(self.open)),
            ("owner", self.owner.clone()),
            ("overdue", flag(self.overdue)),
            ("from", self.from.clone()),
            ("to", self.to.clone()),
            ("evidence_quality", self.evidence_quality.clone()),
            ("q", self.q.clone()),
            ("intent", self.intent.clone()),
            ("cursor", self.cursor.clone()),
            ("limit", self.limit.map(|l| l.to_string())),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }
}

/// Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// Sent as `Authorization: Bearer …` with every request.
    token: Option<String>,
    /// Set once a server answered that it did not read the token (it runs without
    /// authentication): see [`Client::token_unchecked`].
    token_unchecked: Arc<AtomicBool>,
}

impl Client {
    /// A client for the server at `base` (`http://127.0.0.1:7474`), with a request
    /// timeout (long-polls wait up to 20 s, so keep it above that); an `https://` server
    /// must present a certificate the platform's roots trust.
    pub fn new(base: &str, timeout: Duration) -> anyhow::Result<Client> {
        Client::trusting(base, timeout, &redrive_tls::Trust::platform())
    }

    /// [`Client::new`] whose `https://` requests trust `trust` (the platform's roots plus
    /// an extra CA bundle, `--ca-file`).
    pub fn trusting(
        base: &str,
        timeout: Duration,
        trust: &redrive_tls::Trust,
    ) -> anyhow::Result<Client> {
        let base: Url = base
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid server URL {base:?}: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            anyhow::bail!("invalid server URL {base}: expected http://HOST:PORT");
        }
        let http = trust
            .client_builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .pool_max_idle_per_host(512)
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?;
        Ok(Client {
            http,
            base,
            token: None,
            token_unchecked: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The same client sending `token` (an API token, `rdt_…`) with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.trim().is_empty());
        self
    }

    /// Whether a server answered a request that carried this client's token saying it
    /// did not check it (`redrive-authentication: off`: it runs without authentication).
    pub fn token_unchecked(&self) -> bool {
        self.token_unchecked.load(Ordering::Relaxed)
    }

    /// The token this client sends.
    pub fn token(&self) -> Option<String> {
        self.token.clone()
    }

    /// The server's base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The HTTP client (its timeouts and trust), for requests this type has no method for.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The URL of `segments` under the base, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // `new` refused cannot-be-a-base URLs, so path_segments_mut succeeds.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    // ---- tokens and the audit log ----------------------------------------------------

    /// `POST /v1/tokens`.
    pub async fn create_token(&self, req: &CreateToken) -> Result<CreatedToken, ClientError> {
        self.must(Method::POST, self.url(&["v1", "tokens"]), Some(req))
            .await
    }

    /// `GET /v1/tokens`.
    pub async fn list_tokens(&self) -> Result<TokenList, ClientError> {
        self.must(Method::GET, self.url(&["v1", "tokens"]), None::<&()>)
            .await
    }

    /// `POST /v1/tokens/{id}/revoke`.
    pub async fn revoke_token(&self, id: &str) -> Result<Token, ClientError> {
        let url = self.url(&["v1", "tokens", id, "revoke"]);
        self.must(Method::POST, url, None::<&()>).await
    }

    /// `GET /v1/register?...`: one page.
    pub async fn list_register(
        &self,
        cursor: Option<&str>,
    ) -> Result<redrive_api::register::RegisterPage, ClientError> {
        let mut url = self.url(&["v1", "register"]);
        if let Some(c) = cursor {
            url.query_pairs_mut().append_pair("cursor", c);
        }
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `PUT /v1/register/{key}`.
    pub async fn set_register_entry(
        &self,
        key: &str,
        req: &redrive_api::register::SetRegisterEntry,
    ) -> Result<redrive_api::register::RegisterSet, ClientError> {
        let url = self.url(&["v1", "register", key]);
        self.must(Method::PUT, url, Some(req)).await
    }

    /// `DELETE /v1/register/{key}`.
    pub async fn delete_register_entry(
        &self,
        key: &str,
    ) -> Result<redrive_api::register::RegisterEntry, ClientError> {
        let url = self.url(&["v1", "register", key]);
        self.must(Method::DELETE, url, None::<&()>).await
    }

    /// `GET /v1/audit?...`.
    pub async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, ClientError> {
        let mut url = self.url(&["v1", "audit"]);
        {
            let mut q = url.query_pairs_mut();
            let pairs = [
                ("actor", query.actor.clone()),
                ("entity", query.entity.clone()),
                ("action", query.action.clone()),
                ("from", query.from.clone()),
                ("to", query.to.clone()),
                ("cursor", query.cursor.clone()),
                ("limit", query.limit.map(|l| l.to_string())),
            ];
            for (k, v) in pairs {
                if let Some(v) = v {
                    q.append_pair(k, &v);
                }
            }
        }
        strip_empty_query(&mut url);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/audit/verify`.
    pub async fn verify_audit(&self) -> Result<AuditVerification, ClientError> {
        let url = self.url(&["v1", "audit", "verify"]);
        self.must(Method::POST, url, None::<&()>).await
    }

    // ---- queues ---------------------------------------------------------------------

    /// `POST /v1/queues`.
    pub async fn create_queue(&self, req: &CreateQueue) -> Result<QueueInfo, ClientError> {
        self.must(Method::POST, self.url(&["v1", "queues"]), Some(req))
            .await
    }

    /// `GET /v1/queues`.
    pub async fn list_queues(&self) -> Result<QueueList, ClientError> {
        self.must(Method::GET, self.url(&["v1", "queues"]), None::<&()>)
            .await
    }

    /// `GET /v1/queues/{name}`.
    pub async fn get_queue(&self, name: &str) -> Result<QueueInfo, ClientError> {
        self.must(Method::GET, self.url(&["v1", "queues", name]), None::<&()>)
            .await
    }

    /// `PATCH /v1/queues/{name}`.
    pub async fn update_queue(
        &self,
        name: &str,
        req: &UpdateQueue,
    ) -> Result<QueueInfo, ClientError> {
        self.must(Method::PATCH, self.url(&["v1", "queues", name]), Some(req))
            .await
    }

    /// `DELETE /v1/queues/{name}[?force=true]`.
    pub async fn delete_queue(&self, name: &str, force: bool) -> Result<(), ClientError> {
        let mut url = self.url(&["v1", "queues", name]);
        if force {
            url.query_pairs_mut().append_pair("force", "true");
        }
        self.call::<serde_json::Value>(Method::DELETE, url, None::<&()>)
            .await?;
        Ok(())
    }

    /// `POST /v1/queues/{name}/purge`: removes every message, locked ones too.
    pub async fn purge_queue(&self, name: &str) -> Result<PurgeResult, ClientError> {
        let url = self.url(&["v1", "queues", name, "purge"]);
        self.must(Method::POST, url, None::<&()>).await
    }

    // ---- messages -------------------------------------------------------------------

    /// `POST /v1/queues/{name}/messages`.
    pub async fn send(&self, queue: &str, req: &SendRequest) -> Result<SendResponse, ClientError> {
        let url = self.url(&["v1", "queues", queue, "messages"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `DELETE /v1/queues/{name}/messages/scheduled/{seq}`.
    pub async fn cancel_scheduled(&self, queue: &str, seq: i64) -> Result<(), ClientError> {
        let seq = seq.to_string();
        let url = self.url(&["v1", "queues", queue, "messages", "scheduled", &seq]);
        self.call::<serde_json::Value>(Method::DELETE, url, None::<&()>)
            .await?;
        Ok(())
    }

    /// `GET /v1/queues/{name}/messages?from_sequence=&limit=` (browse without locking).
    pub async fn peek(
        &self,
        queue: &str,
        from_sequence: Option<i64>,
        limit: Option<u32>,
    ) -> Result<MessageList, ClientError> {
        let mut url = self.url(&["v1", "queues", queue, "messages"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(f) = from_sequence {
                q.append_pair("from_sequence", &f.to_string());
            }
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
        }
        strip_empty_query(&mut url);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/receive`.
    pub async fn receive(
        &self,
        queue: &str,
        req: &ReceiveRequest,
    ) -> Result<MessageList, ClientError> {
        let url = self.url(&["v1", "queues", queue, "receive"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `POST /v1/queues/{name}/messages/deferred/receive`.
    pub async fn receive_deferred(
        &self,
        queue: &str,
        req: &ReceiveDeferred,
    ) -> Result<MessageList, ClientError> {
        let url = self.url(&["v1", "queues", queue, "messages", "deferred", "receive"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `POST /v1/queues/{name}/settle` with one settlement.
    pub async fn settle(&self, queue: &str, settle: Settle) -> Result<SettleResult, ClientError> {
        let url = self.url(&["v1", "queues", queue, "settle"]);
        self.must(Method::POST, url, Some(&SettleRequest::One(settle)))
            .await
    }

    /// `POST /v1/queues/{name}/settle` with many; each item succeeds or fails on its own.
    pub async fn settle_batch(
        &self,
        queue: &str,
        settlements: Vec<Settle>,
    ) -> Result<SettleResponse, ClientError> {
        let url = self.url(&["v1", "queues", queue, "settle"]);
        let req = SettleRequest::Batch { settlements };
        self.must(Method::POST, url, Some(&req)).await
    }

    /// `POST /v1/queues/{name}/sessions/accept`; `None` when no session is available.
    pub async fn accept_session(
        &self,
        queue: &str,
        req: &AcceptSession,
    ) -> Result<Option<SessionLock>, ClientError> {
        let url = self.url(&["v1", "queues", queue, "sessions", "accept"]);
        self.call(Method::POST, url, Some(req)).await
    }

    /// `POST /v1/queues/{name}/sessions/{id}/release`.
    pub async fn release_session(
        &self,
        queue: &str,
        session: &str,
        lock_token: &str,
    ) -> Result<(), ClientError> {
        let url = self.url(&["v1", "queues", queue, "sessions", session, "release"]);
        let req = SessionTokenRequest {
            lock_token: lock_token.to_owned(),
            lock_duration_ms: None,
        };
        self.call::<serde_json::Value>(Method::POST, url, Some(&req))
            .await?;
        Ok(())
    }

    // ---- dead letters ---------------------------------------------------------------

    /// `GET /v1/queues/{name}/dead-letters?...`.
    pub async fn dead_letters(
        &self,
        queue: &str,
        query: &DeadLetterQuery,
    ) -> Result<DeadLetterPage, ClientError> {
        let url = dead_letters_url(self.url(&["v1", "queues", queue, "dead-letters"]), query);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/queues/{name}/dead-letters/{id}`.
    pub async fn dead_letter(&self, queue: &str, id: &str) -> Result<DeadLetter, ClientError> {
        let url = self.url(&["v1", "queues", queue, "dead-letters", id]);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/resubmit`.
    pub async fn resubmit(&self, queue: &str, id: &str) -> Result<SendResult, ClientError> {
        let url = self.url(&["v1", "queues", queue, "dead-letters", id, "resubmit"]);
        self.must(Method::POST, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/move`.
    pub async fn move_dead_letter(
        &self,
        queue: &str,
        id: &str,
        area: &str,
    ) -> Result<(), ClientError> {
        let url = self.url(&["v1", "queues", queue, "dead-letters", id, "move"]);
        let req = MoveDeadLetter {
            area: area.to_owned(),
        };
        self.call::<serde_json::Value>(Method::POST, url, Some(&req))
            .await?;
        Ok(())
    }

    /// `GET /v1/queues/{name}/dead-letters?...` as the server sent it: every field of each
    /// record kept, including those this client has no type for (what an export writes).
    pub async fn dead_letters_raw(
        &self,
        queue: &str,
        query: &DeadLetterQuery,
    ) -> Result<RawDeadLetterPage, ClientError> {
        let url = dead_letters_url(self.url(&["v1", "queues", queue, "dead-letters"]), query);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/restore`: a quarantined record back to
    /// the live area, or with `dry_run` only what the next judgement would do with it.
    pub async fn restore_dead_letter(
        &self,
        queue: &str,
        id: &str,
        dry_run: bool,
    ) -> Result<RestoreResult, ClientError> {
        let url = self.url(&["v1", "queues", queue, "dead-letters", id, "restore"]);
        self.must(Method::POST, url, Some(&RestoreDeadLetter { dry_run }))
            .await
    }

    /// `POST /v1/queues/{name}/dead-letters/import`: `content` read as `format`
    /// (`eventgrid`, `sqs` or `json`); all records are stored, or none.
    pub async fn import_dead_letters(
        &self,
        queue: &str,
        format: &str,
        content: String,
    ) -> Result<ImportResult, ClientError> {
        let url = self.url(&["v1", "queues", queue, "dead-letters", "import"]);
        let req = ImportDeadLetters {
            format: format.to_owned(),
            content,
        };
        self.must(Method::POST, url, Some(&req)).await
    }

    // ---- replay ---------------------------------------------------------------------

    /// `GET /v1/replay`: the replay counts of every queue with dead letters.
    pub async fn replay_statuses(&self) -> Result<ReplayStatusList, ClientError> {
        self.must(Method::GET, self.url(&["v1", "replay"]), None::<&()>)
            .await
    }

    /// `GET /v1/replay/{queue}`: the replay counts of one queue.
    pub async fn replay_status(&self, queue: &str) -> Result<ReplayStatus, ClientError> {
        self.must(Method::GET, self.url(&["v1", "replay", queue]), None::<&()>)
            .await
    }

    /// `POST /v1/replay/plans/preview`: the dry run of a replay plan.
    pub async fn preview_plan(
        &self,
        spec: &redrive_api::replay::PlanSpec,
    ) -> Result<redrive_api::replay::PlanPreview, ClientError> {
        self.must(
            Method::POST,
            self.url(&["v1", "replay", "plans", "preview"]),
            Some(spec),
        )
        .await
    }

    /// `POST /v1/replay/plans`: creates a replay plan owned by the caller.
    pub async fn create_plan(&self, req: &CreatePlan) -> Result<ReplayPlan, ClientError> {
        self.must(
            Method::POST,
            self.url(&["v1", "replay", "plans"]),
            Some(req),
        )
        .await
    }

    /// `GET /v1/replay/plans?...`: a page of plans (`pairs`: `status`, `queue`, `after`,
    /// `limit`).
    pub async fn list_plans(
        &self,
        pairs: &[(&str, String)],
    ) -> Result<ReplayPlanList, ClientError> {
        let url = with_pairs(self.url(&["v1", "replay", "plans"]), pairs);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/replay/plans/{id}`.
    pub async fn get_plan(&self, id: &str) -> Result<ReplayPlan, ClientError> {
        let url = self.url(&["v1", "replay", "plans", id]);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/replay/plans/{id}/items?...` (`pairs`: `state`, `after`, `limit`).
    pub async fn plan_items(
        &self,
        id: &str,
        pairs: &[(&str, String)],
    ) -> Result<PlanItemList, ClientError> {
        let url = with_pairs(self.url(&["v1", "replay", "plans", id, "items"]), pairs);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/replay/plans/{id}/{action}` (`start`, `pause`, `resume`, `cancel`).
    pub async fn change_plan(&self, id: &str, action: &str) -> Result<ReplayPlan, ClientError> {
        let url = self.url(&["v1", "replay", "plans", id, action]);
        self.must(Method::POST, url, None::<&()>).await
    }

    // ---- recovery cases -------------------------------------------------------------

    /// `GET /v1/cases?...`: one page of cases, metadata only.
    pub async fn list_cases(&self, query: &CaseQuery) -> Result<CasePage, ClientError> {
        let url = with_pairs(self.url(&["v1", "cases"]), &query.pairs());
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/cases/counts?...` (`cursor` and `limit` are not sent).
    pub async fn case_counts(&self, query: &CaseQuery) -> Result<CaseCounts, ClientError> {
        let pairs: Vec<_> = query
            .pairs()
            .into_iter()
            .filter(|(k, _)| !matches!(*k, "cursor" | "limit"))
            .collect();
        let url = with_pairs(self.url(&["v1", "cases", "counts"]), &pairs);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/cases/{id}`: the case, its record and its timeline.
    pub async fn get_case(&self, id: &str) -> Result<Case, ClientError> {
        self.must(Method::GET, self.url(&["v1", "cases", id]), None::<&()>)
            .await
    }

    /// `GET /v1/cases/{id}/payload[?digest=]`: the exact bytes, or the transformation
    /// with that digest (role `payload-reader`; audited).
    pub async fn case_payload(
        &self,
        id: &str,
        digest: Option<&str>,
    ) -> Result<CasePayload, ClientError> {
        let mut url = self.url(&["v1", "cases", id, "payload"]);
        if let Some(d) = digest {
            url.query_pairs_mut().append_pair("digest", d);
        }
        self.must(Method::GET, url, None::<&()>).await
    }

    /// A `POST /v1/cases/{id}/{action}` answered with the case as it is now.
    async fn case_change(
        &self,
        id: &str,
        action: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Case, ClientError> {
        let url = self.url(&["v1", "cases", id, action]);
        self.must(Method::POST, url, body).await
    }

    /// `POST /v1/cases/{id}/claim`: claim (or renew) for `lease_ms` (the node's default
    /// when `None`).
    pub async fn claim_case(&self, id: &str, lease_ms: Option<u64>) -> Result<Case, ClientError> {
        self.case_change(id, "claim", Some(&ClaimCase { lease_ms }))
            .await
    }

    /// `POST /v1/cases/{id}/release`.
    pub async fn release_case(&self, id: &str) -> Result<Case, ClientError> {
        self.case_change(id, "release", None::<&()>).await
    }

    /// `POST /v1/cases/{id}/notes`.
    pub async fn note_case(&self, id: &str, req: &NoteCase) -> Result<Case, ClientError> {
        self.case_change(id, "notes", Some(req)).await
    }

    /// `POST /v1/cases/{id}/diagnosis`.
    pub async fn diagnose_case(&self, id: &str, req: &DiagnoseCase) -> Result<Case, ClientError> {
        self.case_change(id, "diagnosis", Some(req)).await
    }

    /// `POST /v1/cases/{id}/corrections`.
    pub async fn correct_case(&self, id: &str, req: &CorrectCase) -> Result<Case, ClientError> {
        self.case_change(id, "corrections", Some(req)).await
    }

    /// `POST /v1/cases/{id}/transformations`.
    pub async fn transform_case(&self, id: &str, req: &TransformCase) -> Result<Case, ClientError> {
        self.case_change(id, "transformations", Some(req)).await
    }

    /// `POST /v1/cases/{id}/tests`.
    pub async fn test_case(&self, id: &str, req: &TestCase) -> Result<Case, ClientError> {
        self.case_change(id, "tests", Some(req)).await
    }

    /// `POST /v1/cases/{id}/reconcile`: ask the effect authority now.
    pub async fn reconcile_case(&self, id: &str) -> Result<Case, ClientError> {
        self.case_change(id, "reconcile", None::<&()>).await
    }

    /// `POST /v1/cases/{id}/close`.
    pub async fn close_case(&self, id: &str, req: &CloseCase) -> Result<Case, ClientError> {
        self.case_change(id, "close", Some(req)).await
    }

    /// `POST /v1/cases/{id}/review`.
    pub async fn review_case(&self, id: &str, req: &ReviewCase) -> Result<Case, ClientError> {
        self.case_change(id, "review", Some(req)).await
    }

    /// `POST /v1/cases/{id}/replay` (role `replayer`).
    pub async fn replay_case(&self, id: &str) -> Result<Case, ClientError> {
        self.case_change(id, "replay", None::<&()>).await
    }

    // ---- case groups -----------------------------------------------------------------

    /// `POST /v1/case-groups`: a group of the open cases the selection matches now.
    pub async fn create_case_group(&self, req: &CreateCaseGroup) -> Result<CaseGroup, ClientError> {
        let url = self.url(&["v1", "case-groups"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `GET /v1/case-groups[?queue=&cursor=&limit=]`.
    pub async fn list_case_groups(
        &self,
        queue: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<CaseGroupList, ClientError> {
        let mut url = self.url(&["v1", "case-groups"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(v) = queue {
                q.append_pair("queue", v);
            }
            if let Some(v) = cursor {
                q.append_pair("cursor", v);
            }
            if let Some(v) = limit {
                q.append_pair("limit", &v.to_string());
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/case-groups/{id}`: the group, its decisions and its members now.
    pub async fn get_case_group(&self, id: &str) -> Result<CaseGroup, ClientError> {
        let url = self.url(&["v1", "case-groups", id]);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// A `POST /v1/case-groups/{id}/{action}`: one decision on every member, answered
    /// with the group and each member's outcome.
    pub async fn decide_case_group(
        &self,
        id: &str,
        action: &str,
        body: Option<&impl Serialize>,
    ) -> Result<CaseGroup, ClientError> {
        let url = self.url(&["v1", "case-groups", id, action]);
        self.must(Method::POST, url, body).await
    }

    // ---- intents and effect authorities ---------------------------------------------

    /// `GET /v1/intents/{id}`.
    pub async fn get_intent(&self, id: &str) -> Result<Intent, ClientError> {
        self.must(Method::GET, self.url(&["v1", "intents", id]), None::<&()>)
            .await
    }

    /// `POST /v1/intents/{id}/cancel`: closes the intent's open cases.
    pub async fn cancel_intent(&self, id: &str, req: &CancelIntent) -> Result<Intent, ClientError> {
        let url = self.url(&["v1", "intents", id, "cancel"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `POST /v1/intents/{id}/supersede`: closes the intent's open cases.
    pub async fn supersede_intent(
        &self,
        id: &str,
        req: &SupersedeIntent,
    ) -> Result<Intent, ClientError> {
        let url = self.url(&["v1", "intents", id, "supersede"]);
        self.must(Method::POST, url, Some(req)).await
    }

    /// `GET /v1/effect-authorities`.
    pub async fn list_effect_authorities(&self) -> Result<EffectAuthorityList, ClientError> {
        let url = self.url(&["v1", "effect-authorities"]);
        self.must(Method::GET, url, None::<&()>).await
    }

    /// `PUT /v1/effect-authorities/{type}`.
    pub async fn set_effect_authority(
        &self,
        message_type: &str,
        req: &SetEffectAuthority,
    ) -> Result<EffectAuthority, ClientError> {
        let url = self.url(&["v1", "effect-authorities", message_type]);
        self.must(Method::PUT, url, Some(req)).await
    }

    /// `DELETE /v1/effect-authorities/{type}`.
    pub async fn delete_effect_authority(&self, message_type: &str) -> Result<(), ClientError> {
        let url = self.url(&["v1", "effect-authorities", message_type]);
        self.call::<serde_json::Value>(Method::DELETE, url, None::<&()>)
            .await?;
        Ok(())
    }

    // ---- operations -----------------------------------------------------------------

    /// `GET /healthz`: Ok when the server answers 2xx.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        let url = self.url(&["healthz"]);
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| transport(&url, e))?;
        check_status(resp).await.map(|_| ())
    }

    // ---- plumbing -------------------------------------------------------------------

    /// A call whose success must carry a body of type `T`.
    async fn must<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let what = format!("{method} {}", url.path());
        match self.call(method, url, body).await? {
            Some(v) => Ok(v),
            None => Err(ClientError::Decode {
                what,
                source: <serde_json::Error as serde::de::Error>::custom("empty response body"),
            }),
        }
    }

    /// Sends `body` as JSON; `None` for an empty success (204).
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
    ) -> Result<Option<T>, ClientError> {
        let what = format!("{method} {}", url.path());
        let mut req = self.http.request(method, url.clone());
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            let bytes = serde_json::to_vec(b).map_err(|source| ClientError::Decode {
                what: what.clone(),
                source,
            })?;
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let resp = req.send().await.map_err(|e| transport(&url, e))?;
        if self.token.is_some()
            && resp
                .headers()
                .get(redrive_api::access::AUTHENTICATION_HEADER)
                .is_some_and(|v| v == "off")
        {
            self.token_unchecked.store(true, Ordering::Relaxed);
        }
        let resp = check_status(resp).await?;
        if resp.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let bytes = resp.bytes().await.map_err(|e| transport(&url, e))?;
        if bytes.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| ClientError::Decode { what, source })
    }
}

/// `url` with the dead-letter list's query.
fn dead_letters_url(mut url: Url, query: &DeadLetterQuery) -> Url {
    {
        let mut q = url.query_pairs_mut();
        let pairs = [
            ("area", query.area.clone()),
            ("reason", query.reason.clone()),
            ("from", query.from.clone()),
            ("to", query.to.clone()),
            ("cursor", query.cursor.clone()),
            ("limit", query.limit.map(|l| l.to_string())),
        ];
        for (k, v) in pairs {
            if let Some(v) = v {
                q.append_pair(k, &v);
            }
        }
    }
    strip_empty_query(&mut url);
    url
}

/// `url` with `pairs` as its query (none when empty).
fn with_pairs(mut url: Url, pairs: &[(&str, String)]) -> Url {
    if !pairs.is_empty() {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
    }
    url
}

fn strip_empty_query(url: &mut Url) {
    if url.query() == Some("") {
        url.set_query(None);
    }
}

fn transport(url: &Url, e: reqwest::Error) -> ClientError {
    if e.is_connect() || e.is_timeout() {
        ClientError::Unreachable {
            url: url.to_string(),
            source: e,
        }
    } else if e.is_request() && e.status().is_none() && !e.is_body() && !e.is_decode() {
        // Resets and closed connections surface as request errors.
        ClientError::Unreachable {
            url: url.to_string(),
            source: e,
        }
    } else {
        ClientError::Transport(e)
    }
}

/// Turns an error status into [`ClientError`], decoding a problem document when present.
async fn check_status(resp: reqwest::Response) -> Result<reqwest::Response, ClientError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let url = resp.url().clone();
    let bytes = resp.bytes().await.map_err(|e| transport(&url, e))?;
    if let Ok(problem) = serde_json::from_slice::<Problem>(&bytes) {
        return Err(ClientError::Problem(Box::new(problem)));
    }
    let text = String::from_utf8_lossy(&bytes);
    let body: String = text.trim().chars().take(200).collect();
    Err(ClientError::Status {
        status: status.as_u16(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redrive_api::ErrorCode;

    #[test]
    fn urls_encode_segments_and_keep_a_base_path() {
        let c = Client::new("http://127.0.0.1:7474", Duration::from_secs(1)).unwrap();
        assert_eq!(
            c.url(&["v1", "queues", "a b/c"]).as_str(),
            "http://127.0.0.1:7474/v1/queues/a%20b%2Fc"
        );
        let c = Client::new("http://h:1/prefix/", Duration::from_secs(1)).unwrap();
        assert_eq!(c.url(&["healthz"]).as_str(), "http://h:1/prefix/healthz");
    }

    #[test]
    fn bad_urls_are_refused() {
        assert!(Client::new("not a url", Duration::from_secs(1)).is_err());
        assert!(Client::new("ftp://x", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn problems_read_as_one_line() {
        let p = Problem::new(ErrorCode::QueueNotFound, "queue \"nope\" does not exist");
        let e = ClientError::Problem(Box::new(p));
        assert_eq!(
            e.to_string(),
            "Queue not found: queue \"nope\" does not exist (queue_not_found)"
        );
        assert_eq!(e.status(), Some(404));
        let p = Problem::new(ErrorCode::InvalidPolicy, "must be between 1 and 10000")
            .with("field", "max_delivery_count");
        assert_eq!(
            ClientError::Problem(Box::new(p)).to_string(),
            "Invalid queue policy: must be between 1 and 10000 (invalid_policy, field max_delivery_count)"
        );
    }
}
