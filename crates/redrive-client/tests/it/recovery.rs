//! Recovery and access calls against the test kit's server: dead letters, a plan's
//! preview, cases, tokens, and their errors typed (not found, forbidden, invalid).

use redrive_api::access::CreateToken;
use redrive_api::replay::PlanSpec;
use redrive_client::{CaseQuery, Client, DeadLetterQuery, ErrorKind, RetryOptions};
use redrive_testkit::recovery::{Letter, case_id, dead_letter};
use redrive_testkit::{ADMIN, Receiver, TestServer};
use serde_json::json;

use crate::support::client;

#[tokio::test]
async fn a_dead_letter_is_listed_and_shown_and_an_unknown_one_is_not_found() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let id = dead_letter(&s, "orders", Letter::order("o-1")).await;
    let recovery = client(&s).recovery();

    let page = recovery
        .dead_letters("orders", &DeadLetterQuery::default())
        .await
        .unwrap();
    let ids: Vec<&str> = page.dead_letters.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, [id.as_str()]);
    let shown = recovery.dead_letter("orders", &id).await.unwrap();
    assert_eq!(shown.message_id, "o-1");
    assert_eq!(shown.area, "live");

    // A filter that matches nothing is an empty page, not an error.
    let none = recovery
        .dead_letters(
            "orders",
            &DeadLetterQuery {
                area: Some("archived".into()),
                ..DeadLetterQuery::default()
            },
        )
        .await
        .unwrap();
    assert!(none.dead_letters.is_empty());

    let err = recovery
        .dead_letter("orders", "dl_missing")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(err.status(), Some(404));
    assert!(err.problem().is_some());
    let err = recovery
        .dead_letters("nowhere", &DeadLetterQuery::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(err.code(), Some("queue_not_found"));
}

#[tokio::test]
async fn a_case_is_listed_and_claimed_and_a_plan_previewed() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let record = dead_letter(&s, "orders", Letter::order("o-1")).await;
    let case = case_id(&record);
    let recovery = client(&s).recovery();

    let page = recovery
        .list_cases(&CaseQuery {
            queue: Some("orders".into()),
            ..CaseQuery::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = page.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [case.as_str()]);
    assert!(page.cases[0].lease.is_none());

    let claimed = recovery.claim_case(&case, Some(60_000)).await.unwrap();
    let lease = claimed.summary.lease.expect("claimed");
    assert!(lease.live);
    let shown = recovery.get_case(&case).await.unwrap();
    assert_eq!(shown.summary.lease.map(|l| l.owner), Some(lease.owner));

    let err = recovery.claim_case("case_missing", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    // The case is not worked to eligibility: the preview counts it, and blocks it.
    let probe = Receiver::always(200).await;
    let spec: PlanSpec = serde_json::from_value(json!({
        "selection": {"queue": "orders"},
        "budget": {"items_per_s": 1.0, "bytes_per_s": 65536, "max_concurrent": 1, "window": 1,
                   "dependency": {"name": "ledger", "probe_url": probe.url,
                                  "max_error_rate": 0.05, "max_latency_ms": 250}}
    }))
    .unwrap();
    let preview = recovery.preview_plan(&spec).await.unwrap();
    assert_eq!(preview.items, 1, "{preview:?}");
    assert_eq!(preview.eligible, 0, "{preview:?}");
    assert_eq!(preview.blocked.values().sum::<u64>(), 1, "{preview:?}");

    // A preview of no queue at all is refused as invalid, typed.
    let bad: PlanSpec = serde_json::from_value(json!({
        "selection": {},
        "budget": {"items_per_s": 1.0, "max_concurrent": 1}
    }))
    .unwrap();
    let err = recovery.preview_plan(&bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(err.status(), Some(400));
}

#[tokio::test]
async fn a_token_is_created_and_revoked_and_a_lesser_one_is_forbidden() {
    let s = TestServer::builder()
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    let admin = Client::builder(&s.url)
        .token(ADMIN)
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let access = admin.access();
    let created = access
        .create_token(&CreateToken {
            name: "reader".into(),
            grants: vec!["operator".into()],
            expires_at: None,
            sqs: false,
        })
        .await
        .unwrap();
    let listed = access.list_tokens().await.unwrap();
    assert!(
        listed.tokens.iter().any(|t| t.id == created.token.id),
        "{listed:?}"
    );

    // The new token may read, but tokens are the admin's: forbidden, typed.
    let reader = Client::builder(&s.url)
        .token(created.secret.clone())
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let err = reader.access().list_tokens().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert_eq!(err.status(), Some(403));

    let revoked = access.revoke_token(&created.token.id).await.unwrap();
    assert_eq!(revoked.status, "revoked", "{revoked:?}");
    let err = reader.admin().list_queues().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    let err = access.revoke_token("tok_missing").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}
