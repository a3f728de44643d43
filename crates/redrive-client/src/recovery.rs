//! Recovery: dead letters (list, show, resubmit, move, restore, import), automatic
//! replay's standing, replay plans, recovery cases, case groups, intents and effect
//! authorities. Each call answers with the `redrive-api` type the server sent.
//!
//! Reads (`GET`, and the dry runs: a plan's preview) are retried after any transient
//! failure; every change only after a failure that proves nothing happened (see
//! [`crate::retry`]): a repeated claim, resubmit or decision that was applied would
//! answer a conflict although it succeeded.

use redrive_api::case::{
    CancelIntent, Case, CaseCounts, CaseGroup, CaseGroupList, CasePage, CasePayload, ClaimCase,
    CloseCase, CorrectCase, CreateCaseGroup, DiagnoseCase, EffectAuthority, EffectAuthorityList,
    Intent, NoteCase, ReviewCase, SetEffectAuthority, SupersedeIntent, TestCase, TransformCase,
};
use redrive_api::dead_letter::{
    DeadLetter, DeadLetterPage, ImportDeadLetters, ImportResult, MoveDeadLetter, RestoreDeadLetter,
    RestoreResult,
};
use redrive_api::failure::FailurePage;
use redrive_api::message::SendResult;
use redrive_api::replay::{
    CreatePlan, PlanItemList, ReplayPlan, ReplayPlanList, ReplayStatus, ReplayStatusList,
};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::client::{Client, Req, Retry};
use crate::error::{Failure, RecoveryError};

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
    /// Message type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// The message's source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Delivery-count quality (`exact`, `approximate`, `incomplete`, `unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<String>,
    /// Text in the description (ASCII letters without case; at most 200 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A failure signature's id (from [`Recovery::failures`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `Some(false)`: no payload bodies, even for a payload reader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<bool>,
}

/// Query of `GET /v1/failures`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailureQuery {
    /// Only this queue's signatures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// `live` (the server's default), `archived` or `quarantine`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<String>,
    /// RFC 3339: only signatures last seen at or after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// RFC 3339: only signatures first seen before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Page cursor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size (1 to 500).
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
/// Recovery calls; see [`Client::recovery`].
#[derive(Debug, Clone)]
pub struct Recovery {
    client: Client,
}

impl Recovery {
    pub(crate) fn new(client: Client) -> Recovery {
        Recovery { client }
    }

    /// `GET /v1/queues/{name}/dead-letters?...`.
    pub async fn dead_letters(
        &self,
        queue: &str,
        query: &DeadLetterQuery,
    ) -> Result<DeadLetterPage, RecoveryError> {
        let url = dead_letters_url(
            self.client
                .endpoint(&["v1", "queues", queue, "dead-letters"]),
            query,
        );
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/failures?...`: dead letters across the queues the token may read,
    /// grouped by failure signature, newest `last_seen` first.
    pub async fn failures(&self, query: &FailureQuery) -> Result<FailurePage, RecoveryError> {
        let url = failures_url(self.client.endpoint(&["v1", "failures"]), query);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/queues/{name}/dead-letters/{id}`.
    pub async fn dead_letter(&self, queue: &str, id: &str) -> Result<DeadLetter, RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "dead-letters", id]);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/resubmit`.
    pub async fn resubmit(&self, queue: &str, id: &str) -> Result<SendResult, RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "dead-letters", id, "resubmit"]);
        self.client.must(Method::POST, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/move`.
    pub async fn move_dead_letter(
        &self,
        queue: &str,
        id: &str,
        area: &str,
    ) -> Result<(), RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "dead-letters", id, "move"]);
        let req = MoveDeadLetter {
            area: area.to_owned(),
        };
        self.client
            .call::<serde_json::Value>(Method::POST, url, Some(&req))
            .await?;
        Ok(())
    }

    /// `GET /v1/queues/{name}/dead-letters?...` as the server sent it: every field of each
    /// record kept, including those this client has no type for (what an export writes).
    pub async fn dead_letters_raw(
        &self,
        queue: &str,
        query: &DeadLetterQuery,
    ) -> Result<RawDeadLetterPage, RecoveryError> {
        let url = dead_letters_url(
            self.client
                .endpoint(&["v1", "queues", queue, "dead-letters"]),
            query,
        );
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/dead-letters/{id}/restore`: a quarantined record back to
    /// the live area, or with `dry_run` only what the next judgement would do with it.
    pub async fn restore_dead_letter(
        &self,
        queue: &str,
        id: &str,
        dry_run: bool,
    ) -> Result<RestoreResult, RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "dead-letters", id, "restore"]);
        self.client
            .must(Method::POST, url, Some(&RestoreDeadLetter { dry_run }))
            .await
    }

    /// `POST /v1/queues/{name}/dead-letters/import`: `content` read as `format`
    /// (`eventgrid`, `sqs` or `json`); all records are stored, or none.
    pub async fn import_dead_letters(
        &self,
        queue: &str,
        format: &str,
        content: String,
    ) -> Result<ImportResult, RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "dead-letters", "import"]);
        let req = ImportDeadLetters {
            format: format.to_owned(),
            content,
        };
        self.client.must(Method::POST, url, Some(&req)).await
    }

    // ---- replay ---------------------------------------------------------------------

    /// `GET /v1/replay`: the replay counts of every queue with dead letters.
    pub async fn replay_statuses(&self) -> Result<ReplayStatusList, RecoveryError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "replay"]),
                None::<&()>,
            )
            .await
    }

    /// `GET /v1/replay/{queue}`: the replay counts of one queue.
    pub async fn replay_status(&self, queue: &str) -> Result<ReplayStatus, RecoveryError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "replay", queue]),
                None::<&()>,
            )
            .await
    }

    /// `POST /v1/replay/plans/preview`: the dry run of a replay plan.
    pub async fn preview_plan(
        &self,
        spec: &redrive_api::replay::PlanSpec,
    ) -> Result<redrive_api::replay::PlanPreview, RecoveryError> {
        // A dry run changes nothing: retried as a read.
        let url = self.client.endpoint(&["v1", "replay", "plans", "preview"]);
        let what = format!("POST {}", url.path());
        self.client
            .call_with(Method::POST, url, Some(spec), Retry::Always)
            .await?
            .ok_or_else(|| Failure::unexpected(&what, "empty response body").into())
    }

    /// `POST /v1/replay/plans`: creates a replay plan owned by the caller.
    pub async fn create_plan(&self, req: &CreatePlan) -> Result<ReplayPlan, RecoveryError> {
        self.client
            .must(
                Method::POST,
                self.client.endpoint(&["v1", "replay", "plans"]),
                Some(req),
            )
            .await
    }

    /// `GET /v1/replay/plans?...`: a page of plans (`pairs`: `status`, `queue`, `after`,
    /// `limit`).
    pub async fn list_plans(
        &self,
        pairs: &[(&str, String)],
    ) -> Result<ReplayPlanList, RecoveryError> {
        let url = with_pairs(self.client.endpoint(&["v1", "replay", "plans"]), pairs);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/replay/plans/{id}`.
    pub async fn get_plan(&self, id: &str) -> Result<ReplayPlan, RecoveryError> {
        let url = self.client.endpoint(&["v1", "replay", "plans", id]);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/replay/plans/{id}/items?...` (`pairs`: `state`, `after`, `limit`).
    pub async fn plan_items(
        &self,
        id: &str,
        pairs: &[(&str, String)],
    ) -> Result<PlanItemList, RecoveryError> {
        let url = with_pairs(
            self.client
                .endpoint(&["v1", "replay", "plans", id, "items"]),
            pairs,
        );
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/replay/plans/{id}/{action}` (`start`, `pause`, `resume`, `cancel`).
    pub async fn change_plan(&self, id: &str, action: &str) -> Result<ReplayPlan, RecoveryError> {
        let url = self.client.endpoint(&["v1", "replay", "plans", id, action]);
        self.client.must(Method::POST, url, None::<&()>).await
    }

    // ---- recovery cases -------------------------------------------------------------

    /// `GET /v1/cases?...`: one page of cases, metadata only.
    pub async fn list_cases(&self, query: &CaseQuery) -> Result<CasePage, RecoveryError> {
        let url = with_pairs(self.client.endpoint(&["v1", "cases"]), &query.pairs());
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/cases/counts?...` (`cursor` and `limit` are not sent).
    pub async fn case_counts(&self, query: &CaseQuery) -> Result<CaseCounts, RecoveryError> {
        let pairs: Vec<_> = query
            .pairs()
            .into_iter()
            .filter(|(k, _)| !matches!(*k, "cursor" | "limit"))
            .collect();
        let url = with_pairs(self.client.endpoint(&["v1", "cases", "counts"]), &pairs);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/cases/{id}`: the case, its record and its timeline.
    pub async fn get_case(&self, id: &str) -> Result<Case, RecoveryError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "cases", id]),
                None::<&()>,
            )
            .await
    }

    /// `GET /v1/cases/{id}/payload[?digest=]`: the exact bytes, or the transformation
    /// with that digest (role `payload-reader`; audited).
    pub async fn case_payload(
        &self,
        id: &str,
        digest: Option<&str>,
    ) -> Result<CasePayload, RecoveryError> {
        let mut url = self.client.endpoint(&["v1", "cases", id, "payload"]);
        if let Some(d) = digest {
            url.query_pairs_mut().append_pair("digest", d);
        }
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// A `POST /v1/cases/{id}/{action}` answered with the case as it is now.
    async fn case_change(
        &self,
        id: &str,
        action: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Case, RecoveryError> {
        let url = self.client.endpoint(&["v1", "cases", id, action]);
        self.client.must(Method::POST, url, body).await
    }

    /// `POST /v1/cases/{id}/claim`: claim (or renew) for `lease_ms` (the node's default
    /// when `None`).
    pub async fn claim_case(&self, id: &str, lease_ms: Option<u64>) -> Result<Case, RecoveryError> {
        self.case_change(id, "claim", Some(&ClaimCase { lease_ms }))
            .await
    }

    /// `POST /v1/cases/{id}/release`.
    pub async fn release_case(&self, id: &str) -> Result<Case, RecoveryError> {
        self.case_change(id, "release", None::<&()>).await
    }

    /// `POST /v1/cases/{id}/notes`.
    pub async fn note_case(&self, id: &str, req: &NoteCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "notes", Some(req)).await
    }

    /// `POST /v1/cases/{id}/diagnosis`.
    pub async fn diagnose_case(&self, id: &str, req: &DiagnoseCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "diagnosis", Some(req)).await
    }

    /// `POST /v1/cases/{id}/corrections`.
    pub async fn correct_case(&self, id: &str, req: &CorrectCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "corrections", Some(req)).await
    }

    /// `POST /v1/cases/{id}/transformations`.
    pub async fn transform_case(
        &self,
        id: &str,
        req: &TransformCase,
    ) -> Result<Case, RecoveryError> {
        self.case_change(id, "transformations", Some(req)).await
    }

    /// `POST /v1/cases/{id}/tests`.
    pub async fn test_case(&self, id: &str, req: &TestCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "tests", Some(req)).await
    }

    /// `POST /v1/cases/{id}/reconcile`: ask the effect authority now.
    pub async fn reconcile_case(&self, id: &str) -> Result<Case, RecoveryError> {
        self.case_change(id, "reconcile", None::<&()>).await
    }

    /// `POST /v1/cases/{id}/close`.
    pub async fn close_case(&self, id: &str, req: &CloseCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "close", Some(req)).await
    }

    /// `POST /v1/cases/{id}/review`.
    pub async fn review_case(&self, id: &str, req: &ReviewCase) -> Result<Case, RecoveryError> {
        self.case_change(id, "review", Some(req)).await
    }

    /// `POST /v1/cases/{id}/replay` (role `replayer`).
    pub async fn replay_case(&self, id: &str) -> Result<Case, RecoveryError> {
        self.case_change(id, "replay", None::<&()>).await
    }

    // ---- case groups -----------------------------------------------------------------

    /// `POST /v1/case-groups`: a group of the open cases the selection matches now.
    pub async fn create_case_group(
        &self,
        req: &CreateCaseGroup,
    ) -> Result<CaseGroup, RecoveryError> {
        let url = self.client.endpoint(&["v1", "case-groups"]);
        self.client.must(Method::POST, url, Some(req)).await
    }

    /// `GET /v1/case-groups[?queue=&cursor=&limit=]`.
    pub async fn list_case_groups(
        &self,
        queue: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<CaseGroupList, RecoveryError> {
        let mut url = self.client.endpoint(&["v1", "case-groups"]);
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
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `GET /v1/case-groups/{id}`: the group, its decisions and its members now.
    pub async fn get_case_group(&self, id: &str) -> Result<CaseGroup, RecoveryError> {
        let url = self.client.endpoint(&["v1", "case-groups", id]);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// A `POST /v1/case-groups/{id}/{action}`: one decision on every member, answered
    /// with the group and each member's outcome.
    pub async fn decide_case_group(
        &self,
        id: &str,
        action: &str,
        body: Option<&impl Serialize>,
    ) -> Result<CaseGroup, RecoveryError> {
        let url = self.client.endpoint(&["v1", "case-groups", id, action]);
        self.client.must(Method::POST, url, body).await
    }

    // ---- intents and effect authorities ---------------------------------------------

    /// `GET /v1/intents/{id}`.
    pub async fn get_intent(&self, id: &str) -> Result<Intent, RecoveryError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "intents", id]),
                None::<&()>,
            )
            .await
    }

    /// `POST /v1/intents/{id}/cancel`: closes the intent's open cases.
    pub async fn cancel_intent(
        &self,
        id: &str,
        req: &CancelIntent,
    ) -> Result<Intent, RecoveryError> {
        let url = self.client.endpoint(&["v1", "intents", id, "cancel"]);
        self.client.must(Method::POST, url, Some(req)).await
    }

    /// `POST /v1/intents/{id}/supersede`: closes the intent's open cases.
    pub async fn supersede_intent(
        &self,
        id: &str,
        req: &SupersedeIntent,
    ) -> Result<Intent, RecoveryError> {
        let url = self.client.endpoint(&["v1", "intents", id, "supersede"]);
        self.client.must(Method::POST, url, Some(req)).await
    }

    /// `GET /v1/effect-authorities`.
    pub async fn list_effect_authorities(&self) -> Result<EffectAuthorityList, RecoveryError> {
        let url = self.client.endpoint(&["v1", "effect-authorities"]);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `PUT /v1/effect-authorities/{type}`.
    pub async fn set_effect_authority(
        &self,
        message_type: &str,
        req: &SetEffectAuthority,
    ) -> Result<EffectAuthority, RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "effect-authorities", message_type]);
        self.client.must(Method::PUT, url, Some(req)).await
    }

    /// `DELETE /v1/effect-authorities/{type}`.
    pub async fn delete_effect_authority(&self, message_type: &str) -> Result<(), RecoveryError> {
        let url = self
            .client
            .endpoint(&["v1", "effect-authorities", message_type]);
        self.client
            .call::<serde_json::Value>(Method::DELETE, url, None::<&()>)
            .await?;
        Ok(())
    }
}

impl Client {
    /// Dead letters, replay, plans, cases, case groups, intents and effect authorities.
    pub fn recovery(&self) -> Recovery {
        Recovery::new(self.clone())
    }

    /// A call whose success must carry a body of type `T`.
    pub(crate) async fn must<T: DeserializeOwned, E: From<Failure>>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
    ) -> Result<T, E> {
        let what = format!("{method} {}", url.path());
        match self.call::<T>(method, url, body).await? {
            Some(v) => Ok(v),
            None => Err(Failure::unexpected(&what, "empty response body").into()),
        }
    }

    /// Sends `body` as JSON; `None` for an empty success (204). A `GET` is retried after
    /// any transient failure, anything else only when nothing happened.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
    ) -> Result<Option<T>, Failure> {
        let retry = if method == Method::GET {
            Retry::Always
        } else {
            Retry::IfUnchanged
        };
        self.call_with(method, url, body, retry).await
    }

    /// [`Client::call`] with the retry rule given.
    pub(crate) async fn call_with<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&impl Serialize>,
        retry: Retry,
    ) -> Result<Option<T>, Failure> {
        let what = format!("{method} {}", url.path());
        let mut req = Req::new(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let answer = self.execute(req, retry).await?;
        if answer.status == StatusCode::NO_CONTENT || answer.body.is_empty() {
            return Ok(None);
        }
        Ok(Some(answer.decode(&what)?))
    }
}

/// `url` with the dead-letter list's query.
pub(crate) fn dead_letters_url(mut url: Url, query: &DeadLetterQuery) -> Url {
    {
        let mut q = url.query_pairs_mut();
        let pairs = [
            ("area", query.area.clone()),
            ("reason", query.reason.clone()),
            ("from", query.from.clone()),
            ("to", query.to.clone()),
            ("cursor", query.cursor.clone()),
            ("limit", query.limit.map(|l| l.to_string())),
            ("type", query.message_type.clone()),
            ("source", query.source.clone()),
            ("quality", query.quality.clone()),
            ("text", query.text.clone()),
            ("signature", query.signature.clone()),
            ("payload", query.payload.map(|p| p.to_string())),
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

/// The URL of `GET /v1/failures` with `query`.
pub(crate) fn failures_url(mut url: Url, query: &FailureQuery) -> Url {
    {
        let mut q = url.query_pairs_mut();
        let pairs = [
            ("queue", query.queue.clone()),
            ("area", query.area.clone()),
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
pub(crate) fn with_pairs(mut url: Url, pairs: &[(&str, String)]) -> Url {
    if !pairs.is_empty() {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
    }
    url
}

pub(crate) fn strip_empty_query(url: &mut Url) {
    if url.query() == Some("") {
        url.set_query(None);
    }
}
