//! The complete dead-letter flow of Pulsar's dead-letter-policy document, on redrive: the
//! numbers 1 to 6 are published to the topic `numbers`; the subscription `billing`
//! processes even numbers and rejects odd ones, so after three deliveries each odd number
//! is diverted to `numbers-billing-DLQ`, where a second processor reads it back.
//!
//! Against a local server (`redrive serve`, or `REDRIVE_URL`; a token in `REDRIVE_TOKEN`
//! when it authenticates):
//!
//! ```sh
//! cargo run -p redrive-client --example odds_evens
//! ```
//!
//! prints, and exits once every odd number is parked:
//!
//! ```text
//! processed 2
//! processed 4
//! processed 6
//! parked 1 from numbers (<origin message id>)
//! parked 3 from numbers (<origin message id>)
//! parked 5 from numbers (<origin message id>)
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use redrive_client::processor::{ORIGIN_MESSAGE_ID, REAL_TOPIC};
use redrive_client::{
    AdminError, Client, CloudEvent, DeadLetterPolicy, Entity, ErrorKind, HandlerError,
    InvalidMessage, ProcessorOptions, QueuePolicy,
};
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("odds_evens: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Creating what exists already is fine: the example can run again.
fn exists_ok<T>(r: Result<T, AdminError>) -> Result<(), AdminError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Conflict => Ok(()),
        Err(e) => Err(e),
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDRIVE_URL").unwrap_or_else(|_| "http://127.0.0.1:7474".into());
    let mut builder = Client::builder(url);
    if let Ok(token) = std::env::var("REDRIVE_TOKEN") {
        builder = builder.token(token);
    }
    let client = builder.build()?;
    let admin = client.admin();
    exists_ok(admin.create_topic("numbers", Default::default()).await)?;
    // The subscription's own max delivery count stays above the policy's three
    // redeliveries, so the consumer's policy decides, not the broker.
    exists_ok(
        admin
            .create_pull_subscription("numbers", "billing", Some(10))
            .await,
    )?;
    // Creating the dead-letter queue first means the divert never races for it.
    exists_ok(
        admin
            .create_queue("numbers-billing-DLQ", QueuePolicy::default())
            .await,
    )?;

    // This run's events, told apart from an earlier run's.
    let run = format!("{:x}", std::process::id());
    let (tx, mut rx) = mpsc::unbounded_channel::<Outcome>();

    let parked = client
        .processor_builder(Entity::queue("numbers-billing-DLQ"))
        .options(ProcessorOptions::new().receive_wait(Duration::from_secs(1)))
        .decode(number)
        .build({
            let tx = tx.clone();
            move |d| {
                let tx = tx.clone();
                async move {
                    let m = d.message();
                    let origin = m.property(ORIGIN_MESSAGE_ID).unwrap_or_default();
                    let _ = tx.send(Outcome::Parked {
                        n: *d.value(),
                        topic: m.property(REAL_TOPIC).unwrap_or_default(),
                        origin,
                    });
                    Ok(())
                }
            }
        })?
        .start();

    let options = ProcessorOptions::new()
        .redelivery_interval(Duration::from_millis(500))
        .dead_letter_policy(DeadLetterPolicy::new(3))
        .receive_wait(Duration::from_secs(1));
    let orders = client
        .processor_builder(Entity::subscription("numbers", "billing"))
        .options(options)
        .decode(number)
        .build(move |d| {
            let tx = tx.clone();
            async move {
                let n = *d.value();
                if n.is_multiple_of(2) {
                    let _ = tx.send(Outcome::Processed(n));
                    Ok(())
                } else {
                    Err(HandlerError::transient(format!("odd: {n}")))
                }
            }
        })?
        .start();

    let publisher = client.publisher("numbers");
    for n in 1..=6u64 {
        let event = CloudEvent::from_json(serde_json::json!({
            "specversion": "1.0",
            "id": format!("{run}-{n}"),
            "source": "/examples/odds_evens",
            "type": "number",
            "data": n,
        }))?;
        publisher.publish(&event).await?;
    }

    let mut processed = BTreeSet::new();
    let mut parked_odds = BTreeSet::new();
    let done = async {
        while processed.len() < 3 || parked_odds.len() < 3 {
            match rx.recv().await {
                Some(Outcome::Processed(n)) => {
                    println!("processed {n}");
                    processed.insert(n);
                }
                Some(Outcome::Parked { n, topic, origin }) => {
                    // A dead letter of an earlier run is read, and not counted.
                    if origin.starts_with(&format!("{run}-")) {
                        println!("parked {n} from {topic} ({origin})");
                        parked_odds.insert(n);
                    }
                }
                None => break,
            }
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(60), done).await;
    orders.shutdown(Duration::from_secs(5)).await?;
    parked.shutdown(Duration::from_secs(5)).await?;
    finished.map_err(|_| "not every odd number was parked within 60 s")?;
    Ok(())
}

enum Outcome {
    Processed(u64),
    Parked {
        n: u64,
        topic: String,
        origin: String,
    },
}

/// The number an event carries in its `data`.
fn number(m: &redrive_client::ReceivedMessage) -> Result<u64, InvalidMessage> {
    let event: serde_json::Value =
        serde_json::from_slice(m.body()).map_err(|e| InvalidMessage::new(e.to_string()))?;
    event["data"]
        .as_u64()
        .ok_or_else(|| InvalidMessage::new("data is not a number"))
}
