//! Session locks: one receiver holds a session at a time; the listing of a queue's
//! sessions.

use std::pin::pin;

use redrive_core::EntityName;
use redrive_core::id::{LockToken, Named, given};
pub use redrive_store::{MAX_SESSION_PAGE, SessionSummary};
use redrive_store::{SessionLock, StoreError};

use crate::messages::{MAX_ID_LEN, check_lock_ms};
use crate::{Broker, BrokerError, BrokerResult, MAX_WAIT_MS};

/// The page size of a listing of sessions when none is asked for.
pub const DEFAULT_SESSION_PAGE: u32 = 50;

/// A page of a queue's sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPage {
    /// The sessions, by id.
    pub sessions: Vec<SessionSummary>,
    /// What to ask for as `after` for the next page: the last id of a full page, `None`
    /// after a shorter one (the last). A full last page is followed by an empty one.
    pub next: Option<String>,
}

impl Broker {
    /// A page of the queue's sessions as they stand now, by id, those after `after`:
    /// each with its messages by state and, while a receiver holds it, when its lock
    /// runs out (never the token). `limit` is 1 to [`MAX_SESSION_PAGE`] (default
    /// [`DEFAULT_SESSION_PAGE`]); `after` a session id (1 to 128 bytes). A queue without
    /// sessions answers an empty page.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue))]
    pub async fn list_sessions(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> BrokerResult<SessionPage> {
        let name: EntityName = queue.parse()?;
        let limit = limit.unwrap_or(DEFAULT_SESSION_PAGE);
        if limit == 0 || limit > MAX_SESSION_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("must be between 1 and {MAX_SESSION_PAGE}"),
            ));
        }
        if let Some(a) = after
            && (a.is_empty() || a.len() > MAX_ID_LEN)
        {
            return Err(BrokerError::invalid(
                "after",
                format!("must be a session id of 1 to {MAX_ID_LEN} bytes"),
            ));
        }
        let sessions = self
            .inner
            .store
            .list_sessions(&name, after, limit, self.now())
            .await?;
        let full = sessions.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
        let next = full
            .then(|| sessions.last().map(|s| s.session_id.clone()))
            .flatten();
        Ok(SessionPage { sessions, next })
    }

    /// Locks a session: the named one, or the next with a visible message. Waits up to
    /// `wait_ms` for one to become available; `None` when none did.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, session_id))]
    pub async fn accept_session(
        &self,
        queue: &str,
        session_id: Option<&str>,
        lock_ms: Option<u64>,
        wait_ms: u64,
    ) -> BrokerResult<Option<SessionLock>> {
        let name: EntityName = queue.parse()?;
        if wait_ms > MAX_WAIT_MS {
            return Err(BrokerError::invalid("wait_ms", "must be at most 20000"));
        }
        let record = self.inner.store.get_queue(&name).await?;
        if !record.policy.requires_session {
            return Err(redrive_store::StoreError::SessionNotAllowed {
                queue: name.to_string(),
            }
            .into());
        }
        let lock_ms = match lock_ms {
            Some(l) => check_lock_ms(l)?,
            None => record.policy.lock_duration_ms,
        };
        let deadline = self.now().plus_millis(i64::try_from(wait_ms).unwrap_or(0));
        let notify = self.inner.waiters.get(name.as_str());
        loop {
            let mut notified = pin!(notify.notified());
            notified.as_mut().enable();
            let now = self.now();
            if let Some(lock) = self
                .inner
                .store
                .accept_session(&name, session_id, lock_ms, now)
                .await?
            {
                tracing::debug!(queue = %name, session_id = %lock.session_id, "session accepted");
                return Ok(Some(lock));
            }
            if now >= deadline || self.inner.shutdown.is_cancelled() {
                return Ok(None);
            }
            let wake = match self.inner.store.next_wake(&name, now).await? {
                Some(t) => t.min(deadline),
                None => deadline,
            };
            tokio::select! {
                () = &mut notified => {}
                () = self.inner.clock.sleep_until(wake) => {}
                () = self.inner.shutdown.cancelled() => return Ok(None),
            }
        }
    }

    /// Extends a session lock.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue,
        session_id = %session_id, lock_token = crate::trace::token_prefix(given(lock_token))))]
    pub async fn renew_session(
        &self,
        queue: &str,
        session_id: &str,
        lock_token: &Named<LockToken>,
        lock_ms: Option<u64>,
    ) -> BrokerResult<SessionLock> {
        let name: EntityName = queue.parse()?;
        let lock_ms = self.lock_ms_for(&name, lock_ms).await?;
        let Ok(lock_token) = lock_token else {
            return Err(self.unheld_session(&name).await);
        };
        Ok(self
            .inner
            .store
            .renew_session(&name, session_id, lock_token.as_str(), lock_ms, self.now())
            .await?)
    }

    /// Releases a session lock so another receiver can take the session.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue,
        session_id = %session_id, lock_token = crate::trace::token_prefix(given(lock_token))))]
    pub async fn release_session(
        &self,
        queue: &str,
        session_id: &str,
        lock_token: &Named<LockToken>,
    ) -> BrokerResult<()> {
        let name: EntityName = queue.parse()?;
        let Ok(lock_token) = lock_token else {
            return Err(self.unheld_session(&name).await);
        };
        self.inner
            .store
            .release_session(&name, session_id, lock_token.as_str(), self.now())
            .await?;
        self.inner.waiters.wake(name.as_str());
        Ok(())
    }

    /// What the store answers for a session lock token it does not hold, given instead
    /// for a string that cannot be one (which never reaches it): the queue's refusals
    /// first (unknown, or without sessions), then `SessionLockLost`.
    pub(crate) async fn unheld_session(&self, name: &EntityName) -> BrokerError {
        match self.inner.store.get_queue(name).await {
            Err(e) => e.into(),
            Ok(q) if !q.policy.requires_session => StoreError::SessionNotAllowed {
                queue: name.to_string(),
            }
            .into(),
            Ok(_) => StoreError::SessionLockLost.into(),
        }
    }
}
