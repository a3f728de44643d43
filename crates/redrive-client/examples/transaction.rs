//! A transaction: receive orders from `orders`, and for each one send its payment request
//! to `payments` and complete the order in one call — both happen, or neither does, so a
//! crash between them cannot lose the order or charge it twice. A second group shows a
//! refusal: completing an order already completed fails the whole group, naming the
//! operation, and its send is not applied.
//!
//! Against a local server (`redrive serve`, or `REDRIVE_URL`; a token in `REDRIVE_TOKEN`):
//!
//! ```sh
//! cargo run -p redrive-client --example transaction
//! ```

use std::process::ExitCode;
use std::time::Duration;

use redrive_client::{Client, ErrorKind, Message, QueuePolicy};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("transaction: {e}");
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
    for queue in ["orders", "payments"] {
        match client
            .admin()
            .create_queue(queue, QueuePolicy::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            Err(e) => return Err(e.into()),
        }
    }
    let run = format!("{:x}", std::process::id());
    let orders: Vec<Message> = (1..=3)
        .map(|n| Message::new(format!("order {n}")).with_id(format!("{run}-order-{n}")))
        .collect();
    client.sender("orders").send_batch(orders).await?;

    let receiver = client.receiver("orders");
    let mut done = 0;
    let mut last = None;
    while done < 3 {
        for order in receiver.receive(10, Duration::from_secs(5)).await? {
            let body = order.body_str().unwrap_or("<binary>").to_owned();
            let outcome = client
                .transaction()
                .send(
                    "payments",
                    Message::new(format!("charge for {body}"))
                        // The payment's id derives from the order's: a retried group is
                        // a duplicate, not a second charge.
                        .with_id(format!("pay-{}", order.message_id())),
                )
                .complete("orders", &order)
                .commit()
                .await?;
            println!(
                "{body}: payment sent and order completed in {}",
                outcome.transaction_id
            );
            done += 1;
            last = Some(order);
        }
    }

    // The last order is completed already: a group completing it again is refused whole.
    if let Some(order) = last {
        let err = client
            .transaction()
            .send("payments", Message::new("a charge that must not happen"))
            .complete("orders", &order)
            .commit()
            .await
            .err()
            .ok_or("a second completion was applied")?;
        let (index, kind) = err.operation().ok_or("the refusal names no operation")?;
        println!(
            "refused: operation {index} ({}) {}; nothing of the group was applied",
            kind.as_str(),
            err.kind()
        );
    }
    Ok(())
}
