//! Message move tasks: redrive from a dead-letter queue back to each message's source or
//! to a chosen queue, at a rate timed by the manual clock; listing, cancelling, the
//! refusals, and a task that survives a restart of the server.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::ListMessageMoveTasksResultEntry;

use crate::support::{SqsServer, code};

/// A dead-letter queue `dlq` and sources `names` that redrive to it after one receive.
async fn setup(s: &SqsServer, names: &[&str]) -> (String, String, Vec<String>) {
    let dlq = s.sqs_queue("dlq", &[]).await;
    let dlq_arn = s.attr(&dlq, "QueueArn").await.unwrap();
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let mut urls = Vec::new();
    for n in names {
        urls.push(s.sqs_queue(n, &[("RedrivePolicy", &policy)]).await);
    }
    (dlq, dlq_arn, urls)
}

/// Sends `body` to `url` and receives it twice with a visibility timeout of 0: the second
/// receive moves it to the dead-letter queue.
async fn dead_letter(s: &SqsServer, url: &str, body: &str) {
    s.sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        s.sqs
            .receive_message()
            .queue_url(url)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
}

async fn latest(s: &SqsServer, arn: &str) -> ListMessageMoveTasksResultEntry {
    let out = s
        .sqs
        .list_message_move_tasks()
        .source_arn(arn)
        .send()
        .await
        .unwrap();
    out.results.unwrap().into_iter().next().unwrap()
}

/// Waits until the latest task satisfies `ok`: it lists the tasks, and until one does
/// waits for the next write of a move task's runner on the server (a heartbeat with its
/// progress, or its end: `Broker::move_changes`). A signal, not time; bounded by the test
/// kit's guard.
async fn until(s: &SqsServer, arn: &str, ok: impl Fn(&ListMessageMoveTasksResultEntry) -> bool) {
    let mut changes = s.broker.move_changes();
    redrive_testkit::within("the move task in the expected state", async {
        loop {
            // Marked seen before the listing: a write after it wakes the wait below.
            changes.borrow_and_update();
            if ok(&latest(s, arn).await) {
                return;
            }
            changes
                .changed()
                .await
                .expect("the broker outlives the test");
        }
    })
    .await;
}

async fn bodies(s: &SqsServer, url: &str) -> Vec<String> {
    let mut out: Vec<String> = s
        .sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.body.unwrap())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn without_a_destination_each_message_returns_to_its_source_queue() {
    let s = SqsServer::start().await;
    let (dlq, dlq_arn, urls) = setup(&s, &["orders", "billing"]).await;
    dead_letter(&s, &urls[0], "order-1").await;
    dead_letter(&s, &urls[1], "bill-1").await;
    assert_eq!(
        s.attr(&dlq, "ApproximateNumberOfMessages").await.as_deref(),
        Some("2")
    );
    let started = s
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await
        .unwrap();
    let handle = started.task_handle.unwrap();
    assert!(!handle.is_empty());
    until(&s, &dlq_arn, |t| t.status() == Some("COMPLETED")).await;
    let t = latest(&s, &dlq_arn).await;
    assert_eq!(t.approximate_number_of_messages_moved, 2);
    assert_eq!(t.approximate_number_of_messages_to_move, Some(2));
    assert_eq!(t.source_arn.as_deref(), Some(dlq_arn.as_str()));
    assert_eq!(t.destination_arn, None);
    assert_eq!(t.max_number_of_messages_per_second, None);
    assert_eq!(t.task_handle, None, "only a running task shows its handle");
    assert_eq!(t.started_timestamp, redrive_testkit::T0.as_millis());
    assert_eq!(bodies(&s, &urls[0]).await, ["order-1"]);
    assert_eq!(bodies(&s, &urls[1]).await, ["bill-1"]);
    assert!(bodies(&s, &dlq).await.is_empty());
    // A finished task cannot be cancelled.
    let e = s
        .sqs
        .cancel_message_move_task()
        .task_handle(handle)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "ResourceNotFoundException");
    s.stop().await;
}

#[tokio::test]
async fn the_rate_is_kept_on_the_clock_and_cancel_stops_the_task() {
    let s = SqsServer::start().await;
    let (dlq, dlq_arn, urls) = setup(&s, &["work"]).await;
    let other = s.sqs_queue("elsewhere", &[]).await;
    let other_arn = s.attr(&other, "QueueArn").await.unwrap();
    for i in 0..4 {
        dead_letter(&s, &urls[0], &format!("m{i}")).await;
    }
    let before = s.clock().sleepers();
    let handle = s
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&other_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap()
        .task_handle
        .unwrap();
    until(&s, &dlq_arn, |t| {
        t.approximate_number_of_messages_moved == 1
    })
    .await;
    s.until_parked(before).await;
    let t = latest(&s, &dlq_arn).await;
    assert_eq!(t.status(), Some("RUNNING"));
    assert_eq!(t.approximate_number_of_messages_moved, 1, "one per second");
    assert_eq!(t.task_handle.as_deref(), Some(handle.as_str()));
    assert_eq!(t.destination_arn.as_deref(), Some(other_arn.as_str()));
    assert_eq!(t.max_number_of_messages_per_second, Some(1));
    // Only one active task per source queue: AWS answers a second start with
    // InvalidParameterValue.
    let e = s
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    assert!(
        e.message()
            .unwrap_or_default()
            .starts_with("There is already a task running."),
        "{e:?}"
    );
    assert_eq!(latest(&s, &dlq_arn).await.task_handle, Some(handle.clone()));
    s.advance_secs(1);
    until(&s, &dlq_arn, |t| {
        t.approximate_number_of_messages_moved == 2
    })
    .await;
    let cancelled = s
        .sqs
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.approximate_number_of_messages_moved, 2);
    until(&s, &dlq_arn, |t| t.status() == Some("CANCELLED")).await;
    s.advance_secs(5);
    tokio::task::yield_now().await;
    assert_eq!(
        latest(&s, &dlq_arn)
            .await
            .approximate_number_of_messages_moved,
        2
    );
    assert_eq!(bodies(&s, &other).await, ["m0", "m1"]);
    assert_eq!(bodies(&s, &dlq).await, ["m2", "m3"]);
    // Both tasks are listed, newest first, with MaxResults.
    s.advance_secs(60);
    s.sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&other_arn)
        .send()
        .await
        .unwrap();
    let all = s
        .sqs
        .list_message_move_tasks()
        .source_arn(&dlq_arn)
        .max_results(10)
        .send()
        .await
        .unwrap()
        .results
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].status(), Some("CANCELLED"));
    s.stop().await;
}

#[tokio::test]
async fn move_task_requests_are_checked() {
    let s = SqsServer::start().await;
    let (_dlq, dlq_arn, urls) = setup(&s, &["src"]).await;
    let src_arn = s.attr(&urls[0], "QueueArn").await.unwrap();
    // The source must be some queue's dead-letter queue.
    let e = s
        .sqs
        .start_message_move_task()
        .source_arn(&src_arn)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let e = s
        .sqs
        .start_message_move_task()
        .source_arn("arn:aws:sqs:us-east-1:000000000000:missing")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "ResourceNotFoundException");
    let e = s
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn("arn:aws:sqs:us-east-1:000000000000:missing")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "ResourceNotFoundException");
    for rate in [0, 501] {
        let e = s
            .sqs
            .start_message_move_task()
            .source_arn(&dlq_arn)
            .max_number_of_messages_per_second(rate)
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(code(&e), "InvalidParameterValue");
    }
    let e = s
        .sqs
        .list_message_move_tasks()
        .source_arn(&dlq_arn)
        .max_results(11)
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "InvalidParameterValue");
    let none = s
        .sqs
        .list_message_move_tasks()
        .source_arn(&dlq_arn)
        .send()
        .await
        .unwrap();
    assert!(none.results.unwrap_or_default().is_empty());
    // A malformed handle is an invalid parameter; a well-formed one naming no task is a
    // missing resource, as AWS answers them.
    for malformed in ["no-such-task", "mv_unknown", ""] {
        let e = s
            .sqs
            .cancel_message_move_task()
            .task_handle(malformed)
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert_eq!(code(&e), "InvalidParameterValue", "{malformed:?}");
    }
    let e = s
        .sqs
        .cancel_message_move_task()
        .task_handle(format!("mv_{}", "0".repeat(32)))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&e), "ResourceNotFoundException");
    assert_eq!(e.message(), Some("Task does not exist."));
    s.stop().await;
}

#[tokio::test]
async fn a_running_task_survives_a_restart_and_completes() {
    let s = SqsServer::start().await;
    let (dlq, dlq_arn, urls) = setup(&s, &["work"]).await;
    let other = s.sqs_queue("elsewhere", &[]).await;
    let other_arn = s.attr(&other, "QueueArn").await.unwrap();
    for i in 0..3 {
        dead_letter(&s, &urls[0], &format!("m{i}")).await;
    }
    let before = s.clock().sleepers();
    let handle = s
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&other_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap()
        .task_handle
        .unwrap();
    until(&s, &dlq_arn, |t| {
        t.approximate_number_of_messages_moved == 1
    })
    .await;
    s.until_parked(before).await;
    // The server stops with the task running: it is left in the store, and the restarted
    // server resumes it (same handle, its counts kept) and moves on at its next slot: the
    // pacing is kept across the restart (one a second, not two in the first second).
    let s = s.restart().await;
    s.advance_secs(1);
    until(&s, &dlq_arn, |t| {
        t.approximate_number_of_messages_moved == 2
    })
    .await;
    let t = latest(&s, &dlq_arn).await;
    assert_eq!(t.status(), Some("RUNNING"));
    assert_eq!(t.task_handle.as_deref(), Some(handle.as_str()));
    assert_eq!(t.approximate_number_of_messages_to_move, Some(3));
    assert_eq!(t.max_number_of_messages_per_second, Some(1));
    s.advance_secs(1);
    until(&s, &dlq_arn, |t| {
        t.approximate_number_of_messages_moved == 3
    })
    .await;
    s.advance_secs(1);
    until(&s, &dlq_arn, |t| t.status() == Some("COMPLETED")).await;
    assert_eq!(
        latest(&s, &dlq_arn)
            .await
            .approximate_number_of_messages_moved,
        3
    );
    assert_eq!(bodies(&s, &other).await, ["m0", "m1", "m2"]);
    assert!(bodies(&s, &dlq).await.is_empty());
    s.stop().await;
}
