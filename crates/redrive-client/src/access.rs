//! Access: API tokens, the audit log and the idempotency register (role `admin`, the
//! register's reads role `operator`). Each call answers with the `redrive-api` type the
//! server sent.
//!
//! Reads are retried after any transient failure; changes only after a failure that
//! proves nothing happened (see [`crate::retry`]): a token created twice is two tokens.

use redrive_api::access::{
    AuditPage, AuditVerification, CreateToken, CreatedToken, Token, TokenList,
};
use reqwest::Method;
use serde::Serialize;

use crate::client::Client;
use crate::error::AccessError;
use crate::recovery::strip_empty_query;

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
/// Access calls; see [`Client::access`].
#[derive(Debug, Clone)]
pub struct Access {
    client: Client,
}

impl Client {
    /// Tokens, the audit log and the register.
    pub fn access(&self) -> Access {
        Access {
            client: self.clone(),
        }
    }
}

impl Access {
    /// `POST /v1/tokens`.
    pub async fn create_token(&self, req: &CreateToken) -> Result<CreatedToken, AccessError> {
        self.client
            .must(
                Method::POST,
                self.client.endpoint(&["v1", "tokens"]),
                Some(req),
            )
            .await
    }

    /// `GET /v1/tokens`.
    pub async fn list_tokens(&self) -> Result<TokenList, AccessError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "tokens"]),
                None::<&()>,
            )
            .await
    }

    /// `POST /v1/tokens/{id}/revoke`.
    pub async fn revoke_token(&self, id: &str) -> Result<Token, AccessError> {
        let url = self.client.endpoint(&["v1", "tokens", id, "revoke"]);
        self.client.must(Method::POST, url, None::<&()>).await
    }

    /// `GET /v1/register?...`: one page.
    pub async fn list_register(
        &self,
        cursor: Option<&str>,
    ) -> Result<redrive_api::register::RegisterPage, AccessError> {
        let mut url = self.client.endpoint(&["v1", "register"]);
        if let Some(c) = cursor {
            url.query_pairs_mut().append_pair("cursor", c);
        }
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `PUT /v1/register/{key}`.
    pub async fn set_register_entry(
        &self,
        key: &str,
        req: &redrive_api::register::SetRegisterEntry,
    ) -> Result<redrive_api::register::RegisterSet, AccessError> {
        let url = self.client.endpoint(&["v1", "register", key]);
        self.client.must(Method::PUT, url, Some(req)).await
    }

    /// `DELETE /v1/register/{key}`.
    pub async fn delete_register_entry(
        &self,
        key: &str,
    ) -> Result<redrive_api::register::RegisterEntry, AccessError> {
        let url = self.client.endpoint(&["v1", "register", key]);
        self.client.must(Method::DELETE, url, None::<&()>).await
    }

    /// `GET /v1/audit?...`.
    pub async fn list_audit(&self, query: &AuditQuery) -> Result<AuditPage, AccessError> {
        let mut url = self.client.endpoint(&["v1", "audit"]);
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
        self.client.must(Method::GET, url, None::<&()>).await
    }

    /// `POST /v1/audit/verify`.
    pub async fn verify_audit(&self) -> Result<AuditVerification, AccessError> {
        let url = self.client.endpoint(&["v1", "audit", "verify"]);
        self.client.must(Method::POST, url, None::<&()>).await
    }
}
