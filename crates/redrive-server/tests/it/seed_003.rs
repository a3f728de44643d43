//! The dead-letter flow of the Pulsar dead-letter-policy document, as a test: numbers 1 to
//! 6 are sent; odd ones always fail. With a max delivery count of 3, each odd number is
//! delivered three times and then dead-lettered with `MaxDeliveryCountExceeded`; the evens
//! are completed.

use std::collections::BTreeMap;

use serde_json::json;

use redrive_testkit::TestServer;

#[tokio::test]
async fn odd_numbers_are_dead_lettered_after_exactly_three_deliveries() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 3})).await;
    let bodies: Vec<String> = (1..=6).map(|n| n.to_string()).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    s.send("numbers", &refs).await;

    let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
    let mut processed = Vec::new();
    loop {
        let got = s.receive("numbers", 10).await;
        if got.is_empty() {
            break;
        }
        for m in got {
            let n: u32 = m["body"].as_str().unwrap().parse().unwrap();
            *seen.entry(n).or_default() += 1;
            assert_eq!(
                m["delivery_count"], seen[&n],
                "delivery count matches what the handler saw"
            );
            let action = if n.is_multiple_of(2) {
                "complete"
            } else {
                "abandon"
            };
            let (st, v) = s
                .settle(
                    "numbers",
                    m["lock_token"].as_str().unwrap(),
                    action,
                    json!({}),
                )
                .await;
            assert_eq!(st, 200, "{v}");
            if n.is_multiple_of(2) {
                processed.push(n);
            }
        }
    }
    assert_eq!(processed, vec![2, 4, 6]);
    assert_eq!(
        seen,
        BTreeMap::from([(1, 3), (2, 1), (3, 3), (4, 1), (5, 3), (6, 1)])
    );

    let (_, page) = s.get("/v1/queues/numbers/dead-letters").await;
    let parked: Vec<(String, String, u64)> = page["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["body"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
                r["delivery_count"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, String, u64)> = ["1", "3", "5"]
        .iter()
        .map(|b| (b.to_string(), "MaxDeliveryCountExceeded".to_owned(), 3))
        .collect();
    assert_eq!(parked, expected);
    let counts = s.counts("numbers").await;
    assert_eq!(counts["active"], 0);
    assert_eq!(counts["dead_lettered"], 3);
    s.stop().await;
}
