//! Management of the entities a client sends to and receives from: queues, topics and
//! pull subscriptions, and the listing of a queue's sessions (role `operator`). Reads are retried after any transient failure;
//! changes only after a failure that proves nothing happened.

use redrive_api::message::SessionPage;
use redrive_api::queue::{
    CreateQueue, PolicyVersionList, PurgeResult, QueueInfo, QueueList, QueuePolicy, UpdateQueue,
};
use redrive_api::topic::{CreateTopic, SubscriptionInfo, TopicInfo, TopicPolicy};
use reqwest::Method;
use serde_json::json;

use crate::client::{Client, Req, Retry};
use crate::error::AdminError;
use crate::sender::check_name;

/// Management calls; see [`Client::admin`].
#[derive(Debug, Clone)]
pub struct Admin {
    client: Client,
}

impl Admin {
    pub(crate) fn new(client: Client) -> Admin {
        Admin { client }
    }

    /// Creates a queue (`POST /v1/queues`).
    pub async fn create_queue(
        &self,
        name: &str,
        policy: QueuePolicy,
    ) -> Result<QueueInfo, AdminError> {
        check_name(&format!("create queue {name}"), name)?;
        let body = CreateQueue {
            name: name.to_owned(),
            policy,
        };
        let url = self.client.endpoint(&["v1", "queues"]);
        Ok(self
            .client
            .json(Req::new(Method::POST, url).json(&body), Retry::IfUnchanged)
            .await?)
    }

    /// A queue with its policy and counts (`GET /v1/queues/{name}`).
    pub async fn get_queue(&self, name: &str) -> Result<QueueInfo, AdminError> {
        check_name(&format!("show queue {name}"), name)?;
        let url = self.client.endpoint(&["v1", "queues", name]);
        Ok(self
            .client
            .json(Req::new(Method::GET, url), Retry::Always)
            .await?)
    }

    /// Deletes a queue; without `force`, a queue with messages is refused (`conflict`).
    pub async fn delete_queue(&self, name: &str, force: bool) -> Result<(), AdminError> {
        check_name(&format!("delete queue {name}"), name)?;
        let mut url = self.client.endpoint(&["v1", "queues", name]);
        if force {
            url.query_pairs_mut().append_pair("force", "true");
        }
        self.client
            .execute(Req::new(Method::DELETE, url), Retry::IfUnchanged)
            .await?;
        Ok(())
    }

    /// Creates a topic (`POST /v1/topics`).
    pub async fn create_topic(
        &self,
        name: &str,
        policy: TopicPolicy,
    ) -> Result<TopicInfo, AdminError> {
        check_name(&format!("create topic {name}"), name)?;
        let body = CreateTopic {
            name: name.to_owned(),
            policy,
        };
        let url = self.client.endpoint(&["v1", "topics"]);
        Ok(self
            .client
            .json(Req::new(Method::POST, url).json(&body), Retry::IfUnchanged)
            .await?)
    }

    /// Creates a pull subscription of `topic` taking every event, with this max delivery
    /// count (default 10); its queue is `<topic>.<name>`.
    pub async fn create_pull_subscription(
        &self,
        topic: &str,
        name: &str,
        max_delivery_count: Option<u32>,
    ) -> Result<SubscriptionInfo, AdminError> {
        let what = format!("create subscription {name} of {topic}");
        check_name(&what, topic)?;
        check_name(&what, name)?;
        let mut body = json!({"name": name, "type": "pull"});
        if let Some(n) = max_delivery_count {
            body["max_delivery_count"] = json!(n);
        }
        let url = self
            .client
            .endpoint(&["v1", "topics", topic, "subscriptions"]);
        Ok(self
            .client
            .json(Req::new(Method::POST, url).json(&body), Retry::IfUnchanged)
            .await?)
    }

    /// `GET /v1/queues`.
    pub async fn list_queues(&self) -> Result<QueueList, AdminError> {
        self.client
            .must(
                Method::GET,
                self.client.endpoint(&["v1", "queues"]),
                None::<&()>,
            )
            .await
    }

    /// `PATCH /v1/queues/{name}`.
    pub async fn update_queue(
        &self,
        name: &str,
        req: &UpdateQueue,
    ) -> Result<QueueInfo, AdminError> {
        self.client
            .must(
                Method::PATCH,
                self.client.endpoint(&["v1", "queues", name]),
                Some(req),
            )
            .await
    }

    /// `POST /v1/queues/{name}/purge`: removes every message, locked ones too.
    pub async fn purge_queue(&self, name: &str) -> Result<PurgeResult, AdminError> {
        let url = self.client.endpoint(&["v1", "queues", name, "purge"]);
        self.client.must(Method::POST, url, None::<&()>).await
    }

    /// `GET /v1/queues/{name}/policy/versions`: a page of the queue's policy history,
    /// newest version first; `before` is the previous page's `next`, `limit` 1 to 100
    /// (the server's default, 20, when `None`).
    pub async fn policy_versions(
        &self,
        queue: &str,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<PolicyVersionList, AdminError> {
        check_name(&format!("list the policy versions of queue {queue}"), queue)?;
        let mut url = self
            .client
            .endpoint(&["v1", "queues", queue, "policy", "versions"]);
        {
            let mut pairs = url.query_pairs_mut();
            if let Some(b) = before {
                pairs.append_pair("before", &b.to_string());
            }
            if let Some(l) = limit {
                pairs.append_pair("limit", &l.to_string());
            }
        }
        Ok(self
            .client
            .json(Req::new(Method::GET, url), Retry::Always)
            .await?)
    }

    /// A page of a queue's sessions by id, as they stand now
    /// (`GET /v1/queues/{name}/sessions`): those after `after` (the `next` of the page
    /// before), at most `limit` (1 to 100; the server's default 50). Each has its
    /// messages by state and, while a receiver holds it, when its lock runs out.
    pub async fn list_sessions(
        &self,
        name: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<SessionPage, AdminError> {
        check_name(&format!("list sessions of {name}"), name)?;
        let mut url = self.client.endpoint(&["v1", "queues", name, "sessions"]);
        if after.is_some() || limit.is_some() {
            let mut q = url.query_pairs_mut();
            if let Some(a) = after {
                q.append_pair("after", a);
            }
            if let Some(n) = limit {
                q.append_pair("limit", &n.to_string());
            }
        }
        Ok(self
            .client
            .json(Req::new(Method::GET, url), Retry::Always)
            .await?)
    }
}
