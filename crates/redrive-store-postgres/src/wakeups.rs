//! Wake-ups across nodes: LISTEN/NOTIFY.
//!
//! After every write that made something receivable on a queue commits (a send, an
//! abandon, a released lock, a forwarded dead letter, a resubmission, a policy change, a
//! released session), its connection runs `pg_notify(channel, queue name)` as a statement
//! of its own with `synchronous_commit` off (see the crate docs for why not inside the
//! write's transaction). The channel is per schema, so deployments sharing a database do
//! not wake each other.
//!
//! [`Wakeups::subscribe`] starts, on first use, one task with a dedicated connection that
//! `LISTEN`s on the channel and hands each queue name to a broadcast channel (the store's
//! `remote_wakeups`). Once it listens, it announces every queue once: whatever became
//! receivable before (while it was connecting, or between a lost connection and its
//! replacement) is then looked at again by the long polls, so no wake-up is lost. If the
//! connection fails, the task reconnects with a growing delay. A node also hears its own
//! notifications: a harmless second wake-up.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::pool::quote_ident;

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1); a longer channel name would be
/// truncated by `LISTEN` but refused by `pg_notify`.
const MAX_CHANNEL_LEN: usize = 63;
/// Queue names buffered per subscriber before it lags (and then wakes every long poll).
const BUFFER: usize = 1024;
/// First and longest delay between reconnection attempts of the listener.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The NOTIFY channel of a schema.
pub(crate) fn channel_for(schema: &str) -> String {
    let plain = format!("redrive_wakeups_{schema}");
    if plain.len() <= MAX_CHANNEL_LEN {
        return plain;
    }
    // FNV-1a: stable across builds and platforms, so every node derives the same name.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in schema.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("redrive_wakeups_{h:016x}")
}

/// Notifies the other nodes that something became receivable on `queues`: one statement
/// in its own implicit transaction, whose commit need not wait for a flush (a wake-up is
/// a hint, and the global lock a notifying commit holds is then held only briefly).
/// The notification statement: `$1` the channel, `$2` the queue names.
pub(crate) const NOTIFY: &str = "SELECT set_config('synchronous_commit', 'off', true), \
     pg_notify($1, q) FROM unnest($2::text[]) AS q";

/// The listening side, shared by every subscriber of one store.
pub(crate) struct Wakeups {
    config: tokio_postgres::Config,
    /// Statements run on the listening connection before `LISTEN` (search path).
    on_connect: String,
    channel: String,
    sender: broadcast::Sender<String>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Wakeups {
    pub(crate) fn new(config: tokio_postgres::Config, on_connect: String, channel: String) -> Self {
        Wakeups {
            config,
            on_connect,
            channel,
            sender: broadcast::channel(BUFFER).0,
            task: Mutex::new(None),
        }
    }

    /// The channel notifications go to.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// A receiver of queue names woken by any node; starts the listener on first use.
    /// `None` outside a Tokio runtime (nothing could listen).
    pub(crate) fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_none() {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::warn!("remote wake-ups need a Tokio runtime; not listening");
                return None;
            };
            *task = Some(runtime.spawn(listen(
                self.config.clone(),
                self.on_connect.clone(),
                self.channel.clone(),
                self.sender.clone(),
            )));
        }
        Some(self.sender.subscribe())
    }

    /// Stops listening (subscribers then see the channel closed once the store is gone).
    pub(crate) fn stop(&self) {
        if let Some(task) = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Listens until aborted, reconnecting after failures.
async fn listen(
    config: tokio_postgres::Config,
    on_connect: String,
    channel: String,
    sender: broadcast::Sender<String>,
) {
    let mut delay = RETRY_FIRST;
    loop {
        let mut listened = false;
        match listen_once(&config, &on_connect, &channel, &sender, &mut listened).await {
            Ok(()) => tracing::warn!("the wake-up connection closed; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "the wake-up connection failed; reconnecting"),
        }
        if listened {
            delay = RETRY_FIRST;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// One listening connection, until it ends. Once listening, announces every queue.
async fn listen_once(
    config: &tokio_postgres::Config,
    on_connect: &str,
    channel: &str,
    sender: &broadcast::Sender<String>,
    listened: &mut bool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (found, mut heard) = tokio::sync::mpsc::unbounded_channel();
    // Drives the connection (queries make progress only while it is polled) and passes
    // notifications on; ends with the connection.
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if found.send(n.payload().to_owned()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(on_connect).await?;
    client
        .batch_execute(&format!("LISTEN {}", quote_ident(channel)))
        .await?;
    *listened = true;
    // Whatever was notified while no connection listened is lost: wake every queue.
    for row in client.query("SELECT name FROM queues", &[]).await? {
        let _ = sender.send(row.try_get(0usize)?);
    }
    while let Some(queue) = heard.recv().await {
        // No subscriber at the moment is fine: nobody waits.
        let _ = sender.send(queue);
    }
    drop(client);
    match driver.await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_an_identifier_and_differ_by_schema() {
        assert_eq!(channel_for("public"), "redrive_wakeups_public");
        let long = "s".repeat(100);
        let c = channel_for(&long);
        assert!(c.len() <= MAX_CHANNEL_LEN);
        assert_eq!(c, channel_for(&long), "stable");
        assert_ne!(c, channel_for(&"t".repeat(100)));
    }
}
