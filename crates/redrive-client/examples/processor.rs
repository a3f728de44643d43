//! A processor with Service Bus's semantics: four handlers at once, locks renewed while
//! they run, a malformed order dead-lettered at once (a permanent failure), a flaky
//! dependency retried after a delay (a transient one), every error reported to a
//! callback, and a graceful shutdown.
//!
//! Against a local server (`redrive serve`, or `REDRIVE_URL`; a token in `REDRIVE_TOKEN`):
//!
//! ```sh
//! cargo run -p redrive-client --example processor
//! ```

use std::process::ExitCode;
use std::time::Duration;

use redrive_client::{Client, ErrorKind, HandlerError, Message, ProcessorOptions, QueuePolicy};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("processor: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDRIVE_URL").unwrap_or_else(|_| "http://127.0.0.1:7474".into());
    let mut builder = Client::builder(url);
    if let Ok(token) = std::env::var("REDRIVE_TOKEN") {
        builder = builder.token(token);
    }
    let client = builder.build()?;
    match client
        .admin()
        .create_queue("example-orders", QueuePolicy::default())
        .await
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Conflict => {}
        Err(e) => return Err(e.into()),
    }
    let run = format!("{:x}", std::process::id());
    let orders: Vec<Message> = (1..=8)
        .map(|n| {
            let body = if n == 5 {
                "{}".to_owned()
            } else {
                format!("{{\"amount\": {n}}}")
            };
            Message::new(body)
                .with_id(format!("{run}-{n}"))
                .with_content_type("application/json")
        })
        .collect();
    client.sender("example-orders").send_batch(orders).await?;

    let options = ProcessorOptions::new()
        .max_concurrent_calls(4)
        .receive_wait(Duration::from_secs(1))
        .redelivery_interval(Duration::from_secs(1))
        .consumer("example")
        .on_error(|e| {
            eprintln!(
                "error from {:?} on {} ({}): {}",
                e.source,
                e.entity,
                e.message_id.as_deref().unwrap_or("-"),
                e.error
            );
        });
    let handle = client
        .processor("example-orders", options, move |d| async move {
            let m = d.message();
            let order: serde_json::Value = serde_json::from_slice(m.body())
                .map_err(|e| HandlerError::permanent("MalformedOrder", e))?;
            let Some(amount) = order["amount"].as_u64() else {
                return Err(HandlerError::permanent("ValidationFailed", "no amount"));
            };
            // The ledger fails each order's first attempt: retried after a second.
            if m.delivery_count() == 1 && amount % 3 == 0 {
                return Err(HandlerError::transient("ledger timed out"));
            }
            println!("charged {amount} for {}", m.message_id());
            Ok(())
        })?
        .start();

    // Seven orders charged (two after a retry) and one dead-lettered.
    let mut stats = handle.watch_stats();
    tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.completed >= 7 && s.dead_lettered >= 1),
    )
    .await
    .map_err(|_| "the orders were not all handled within 60 s")??;
    let s = handle.stats();
    println!(
        "completed {}, dead-lettered {}, retried {}",
        s.completed, s.dead_lettered, s.redelivery_requested
    );
    handle.shutdown(Duration::from_secs(10)).await?;
    Ok(())
}
