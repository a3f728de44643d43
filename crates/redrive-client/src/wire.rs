//! The native API's queue operations at the wire: each request and answer is the
//! `redrive-api` type itself (a send's whole [`SendRequest`], a receive's
//! [`MessageList`]), for tools that print what the server answered — the operator CLI —
//! and any request by path ([`Wire::request`]). Applications use [`Sender`](crate::Sender)
//! and [`Receiver`](crate::Receiver).
//!
//! Retries follow [`crate::retry`]: a send only when every message has an id, receives,
//! peeks and a session's accept after any transient failure, settlements and changes only
//! when nothing happened.

use redrive_api::message::{
    AcceptSession, MessageList, ReceiveDeferred, ReceiveRequest, SendRequest, SendResponse,
    SessionLock, SessionTokenRequest, Settle, SettleRequest, SettleResponse, SettleResult,
};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::{Client, Req, Retry};
use crate::error::{AdminError, Failure, ReceiveError, SendError, SessionError, SettleError};

/// Wire-level calls; see [`Client::wire`].
#[derive(Debug, Clone)]
pub struct Wire {
    client: Client,
}

impl Client {
    /// The queue operations with `redrive-api`'s request and answer types, and any request
    /// by path.
    pub fn wire(&self) -> Wire {
        Wire {
            client: self.clone(),
        }
    }
}

impl Wire {
    /// `POST /v1/queues/{name}/messages`.
    pub async fn send(&self, queue: &str, req: &SendRequest) -> Result<SendResponse, SendError> {
        let url = self.client.endpoint(&["v1", "queues", queue, "messages"]);
        // A message without an id cannot be told from a new one when repeated.
        let with_ids = match req {
            SendRequest::One(m) => m.message_id.is_some(),
            SendRequest::Batch { messages } => messages.iter().all(|m| m.message_id.is_some()),
        };
        let retry = if with_ids {
            Retry::Always
        } else {
            Retry::Never
        };
        let what = format!("POST {}", url.path());
        self.client
            .call_with(Method::POST, url, Some(req), retry)
            .await?
            .ok_or_else(|| Failure::unexpected(&what, "empty response body").into())
    }

    /// `DELETE /v1/queues/{name}/messages/scheduled/{seq}`.
    pub async fn cancel_scheduled(&self, queue: &str, seq: i64) -> Result<(), SendError> {
        let seq = seq.to_string();
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "messages", "scheduled", &seq]);
        self.client
            .call::<serde_json::Value>(Method::DELETE, url, None::<&()>)
            .await?;
        Ok(())
    }

    /// `GET /v1/queues/{name}/messages?from_sequence=&limit=` (browse without locking).
    pub async fn peek(
        &self,
        queue: &str,
        from_sequence: Option<i64>,
        limit: Option<u32>,
    ) -> Result<MessageList, ReceiveError> {
        let mut url = self.client.endpoint(&["v1", "queues", queue, "messages"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(f) = from_sequence {
                q.append_pair("from_sequence", &f.to_string());
            }
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
        }
        crate::recovery::strip_empty_query(&mut url);
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/queues/{name}/receive`.
    pub async fn receive(
        &self,
        queue: &str,
        req: &ReceiveRequest,
    ) -> Result<MessageList, ReceiveError> {
        let url = self.client.endpoint(&["v1", "queues", queue, "receive"]);
        let wait = std::time::Duration::from_millis(req.wait_ms.unwrap_or(0));
        self.read(url, req, wait).await
    }

    /// `POST /v1/queues/{name}/messages/deferred/receive`.
    pub async fn receive_deferred(
        &self,
        queue: &str,
        req: &ReceiveDeferred,
    ) -> Result<MessageList, ReceiveError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "messages", "deferred", "receive"]);
        self.read(url, req, std::time::Duration::ZERO).await
    }

    /// `POST /v1/queues/{name}/settle` with one settlement.
    pub async fn settle(&self, queue: &str, settle: Settle) -> Result<SettleResult, SettleError> {
        let url = self.client.endpoint(&["v1", "queues", queue, "settle"]);
        self.client
            .must(Method::POST, url, Some(&SettleRequest::One(settle)))
            .await
    }

    /// `POST /v1/queues/{name}/settle` with many; each item succeeds or fails on its own.
    pub async fn settle_batch(
        &self,
        queue: &str,
        settlements: Vec<Settle>,
    ) -> Result<SettleResponse, SettleError> {
        let url = self.client.endpoint(&["v1", "queues", queue, "settle"]);
        let req = SettleRequest::Batch { settlements };
        self.client.must(Method::POST, url, Some(&req)).await
    }

    /// `POST /v1/queues/{name}/sessions/accept`; `None` when no session is available.
    pub async fn accept_session(
        &self,
        queue: &str,
        req: &AcceptSession,
    ) -> Result<Option<SessionLock>, SessionError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "sessions", "accept"]);
        // A repeat locks nothing the first did not (see the retry table); the server may
        // hold the request for its wait.
        let wait = std::time::Duration::from_millis(req.wait_ms.unwrap_or(0));
        let what = format!("POST {}", url.path());
        let req = Req::new(Method::POST, url).json(req).wait(wait);
        let answer = self.client.execute(req, Retry::Always).await?;
        if answer.body.is_empty() {
            return Ok(None);
        }
        Ok(Some(answer.decode(&what)?))
    }

    /// `POST /v1/queues/{name}/sessions/{id}/release`.
    pub async fn release_session(
        &self,
        queue: &str,
        session: &str,
        lock_token: &str,
    ) -> Result<(), SessionError> {
        let url = self
            .client
            .endpoint(&["v1", "queues", queue, "sessions", session, "release"]);
        let req = SessionTokenRequest {
            lock_token: lock_token.to_owned(),
            lock_duration_ms: None,
        };
        self.client
            .call::<serde_json::Value>(Method::POST, url, Some(&req))
            .await?;
        Ok(())
    }

    /// `GET /healthz`: `Ok` when the server answers 2xx.
    pub async fn healthz(&self) -> Result<(), AdminError> {
        let url = self.client.endpoint(&["healthz"]);
        self.client
            .execute(Req::new(Method::GET, url), Retry::Always)
            .await?;
        Ok(())
    }

    /// Any request by path: `segments` under the base URL (each percent-encoded), an
    /// optional query pair, an optional JSON body sent as `content_type`; the answer's
    /// JSON, or `None` for an empty success. A `GET` is retried after any transient
    /// failure, anything else only when nothing happened.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: Option<(&str, &str)>,
        body: Option<(&'static str, &impl Serialize)>,
    ) -> Result<Option<T>, AdminError> {
        let mut url = self.client.endpoint(segments);
        if let Some((k, v)) = query {
            url.query_pairs_mut().append_pair(k, v);
        }
        let what = format!("{method} {}", url.path());
        let retry = if method == Method::GET {
            Retry::Always
        } else {
            Retry::IfUnchanged
        };
        let mut req = Req::new(method, url);
        if let Some((content_type, b)) = body {
            let bytes = serde_json::to_vec(b)
                .map_err(|e| Failure::invalid(what.clone(), format!("unencodable body: {e}")))?;
            req = req.body(content_type, bytes);
        }
        let answer = self.client.execute(req, retry).await?;
        if answer.body.is_empty() {
            return Ok(None);
        }
        Ok(Some(answer.decode(&what)?))
    }

    /// A receive: a repeat after a lost answer leaves the first's messages locked until
    /// their lock expires (see the retry table), so it is retried as a read.
    async fn read<B: Serialize>(
        &self,
        url: Url,
        body: &B,
        wait: std::time::Duration,
    ) -> Result<MessageList, ReceiveError> {
        let what = format!("POST {}", url.path());
        let req = Req::new(Method::POST, url).json(body).wait(wait);
        let answer = self.client.execute(req, Retry::Always).await?;
        Ok(answer.decode(&what)?)
    }
}
