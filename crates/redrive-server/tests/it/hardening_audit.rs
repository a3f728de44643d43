//! Hardening of the audit chain: removing the newest audit entries (or all of them, or
//! the head's own record) behind the server's back is detected on SQLite and on
//! PostgreSQL, and the chain's head is in `verify`'s answer and on `/metrics`.

use redrive_broker::AccessSettings;
use redrive_testkit::{Backend, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

async fn started(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .auth(on())
        .start()
        .await
}

/// Ten audited acts: five tokens made and revoked.
async fn audited_acts(s: &TestServer) {
    for i in 0..5 {
        let (id, _) = s.token(&format!("t{i}"), &["consumer:q"]).await;
        let (st, v) = s
            .admin(Method::POST, &format!("/v1/tokens/{id}/revoke"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
    }
}

async fn verify(s: &TestServer) -> Value {
    let (st, v) = s.admin(Method::POST, "/v1/audit/verify", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

async fn metrics(s: &TestServer) -> String {
    let (st, v) = s.admin(Method::GET, "/metrics", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v.as_str().expect("the Prometheus text").to_owned()
}

fn last_seq(s: &[Value]) -> i64 {
    s.last().expect("entries")["seq"].as_i64().expect("a seq")
}

#[tokio::test]
async fn removing_the_newest_audit_entries_is_detected_on_every_backend() {
    for backend in Backend::all("audit truncation") {
        let name = backend.name();
        let s = started(backend).await;
        audited_acts(&s).await;
        let all = s.audit("limit=1000").await;
        let newest = last_seq(&all);
        let v = verify(&s).await;
        assert_eq!(v["ok"], true, "{name}: {v}");
        assert_eq!(v["head_seq"], newest, "{name}: {v}");
        assert_eq!(v["head_hash"], all.last().unwrap()["hash"], "{name}: {v}");
        // The head is on /metrics for a scraper to keep.
        let m = metrics(&s).await;
        assert!(
            m.contains(&format!("redrive_audit_head_seq {newest}\n")),
            "{name}: {m}"
        );
        assert!(
            m.contains(&format!(
                "redrive_audit_head_info{{seq=\"{newest}\",hash=\"{}\"}} 1",
                v["head_hash"].as_str().unwrap()
            )),
            "{name}: {m}"
        );

        // The last five rows go while the server is stopped.
        let s = s
            .restart_after_sql(&format!("DELETE FROM audit_log WHERE seq > {}", newest - 5))
            .await;
        let v = verify(&s).await;
        assert_eq!(v["ok"], false, "{name}: {v}");
        assert_eq!(v["broken_at"], newest - 4, "{name}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("entries {} to {newest} are missing", newest - 4)),
            "{name}: {detail}"
        );
        assert_eq!(v["head_seq"], newest, "{name}: {v}");

        // An act after the removal does not hide it: the new entry follows the head,
        // whose entry is gone.
        audited_acts(&s).await;
        let v = verify(&s).await;
        assert_eq!(v["ok"], false, "{name}: {v}");
        assert_eq!(v["broken_at"], newest + 1, "{name}: {v}");

        // Every row goes.
        let s = s.restart_after_sql("DELETE FROM audit_log").await;
        let v = verify(&s).await;
        assert_eq!(v["ok"], false, "{name}: {v}");
        assert_eq!(v["entries"], 0, "{name}: {v}");
        assert_eq!(v["broken_at"], 1, "{name}: {v}");
        assert!(
            v["detail"].as_str().unwrap().contains("are missing"),
            "{name}: {v}"
        );

        // The head's own record removed as well: still not ok, and appends refuse.
        let s = s
            .restart_after_sql(if name == "sqlite" {
                "DELETE FROM audit_head"
            } else {
                "DELETE FROM audit_chain"
            })
            .await;
        let v = verify(&s).await;
        assert_eq!(v["ok"], false, "{name}: {v}");
        assert!(v.get("head_seq").is_none(), "{name}: {v}");
        assert!(
            metrics(&s).await.contains("redrive_audit_head_seq -1\n"),
            "{name}"
        );
        let (st, _) = s
            .admin(
                Method::POST,
                "/v1/tokens",
                Some(json!({"name": "after", "grants": ["consumer:q"]})),
            )
            .await;
        assert!(st.is_server_error(), "{name}: {st}");
        s.stop().await;
    }
}
