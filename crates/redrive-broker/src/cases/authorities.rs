//! Effect authorities: the service per message type that says whether an intent's effect
//! exists.

use redrive_store::EffectAuthority;

use super::effect;
use crate::{Actor, BrokerError, BrokerResult, Cases};

impl Cases {
    /// Registers (or replaces) the effect authority of a message type.
    #[tracing::instrument(level = "debug", skip_all, fields(message_type = %message_type))]
    pub async fn put_effect_authority(
        &self,
        message_type: &str,
        url: &str,
        timeout_ms: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<EffectAuthority> {
        redrive_core::register::check_type(message_type)
            .map_err(|e| BrokerError::invalid("message_type", e.to_string()))?;
        let timeout_ms = timeout_ms.unwrap_or(effect::DEFAULT_TIMEOUT_MS);
        effect::check(url, timeout_ms)?;
        // The push network policy applies to authorities too: refused now, not at every
        // lookup.
        self.broker
            .push_network()
            .check_url(url)
            .await
            .map_err(|f| BrokerError::EndpointForbidden {
                endpoint: url.to_owned(),
                why: f.to_string(),
            })?;
        let a = EffectAuthority {
            message_type: message_type.to_owned(),
            url: url.to_owned(),
            timeout_ms,
            updated_at: self.now(),
        };
        let r = self
            .ctx
            .store
            .put_effect_authority(&a)
            .await
            .map(|()| a.clone());
        self.ctx
            .audited(
                actor,
                "effect_authority.put",
                None,
                vec![message_type.to_owned(), format!("url={url}")],
                r.map_err(Into::into),
            )
            .await
    }

    /// Removes the effect authority of a message type; whether there was one.
    #[tracing::instrument(level = "debug", skip_all, fields(message_type = %message_type))]
    pub async fn delete_effect_authority(
        &self,
        message_type: &str,
        actor: &Actor,
    ) -> BrokerResult<bool> {
        let r = self.ctx.store.delete_effect_authority(message_type).await;
        self.ctx
            .audited(
                actor,
                "effect_authority.delete",
                None,
                vec![message_type.to_owned()],
                r.map_err(Into::into),
            )
            .await
    }

    /// Every effect authority.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_effect_authorities(&self) -> BrokerResult<Vec<EffectAuthority>> {
        Ok(self.ctx.store.list_effect_authorities().await?)
    }

    /// Registers the authorities of the configuration (at start); returns how many.
    pub async fn apply_effect_authorities(
        &self,
        list: &[(String, String, Option<u64>)],
    ) -> BrokerResult<usize> {
        let actor = Actor::system("config");
        for (t, url, timeout) in list {
            self.put_effect_authority(t, url, *timeout, &actor).await?;
        }
        Ok(list.len())
    }
}
