//! Metrics, health, and routing errors.

use serde_json::json;

use redrive_testkit::{TestServer, assert_problem};

#[tokio::test]
async fn metrics_count_every_outcome_and_expose_live_counts() {
    let s = TestServer::start().await;
    s.queue(
        "m",
        json!({"max_delivery_count": 1, "duplicate_detection_window_ms": 60_000}),
    )
    .await;
    let (st, _) = s.post("/v1/queues/m/messages", json!({"messages": [{"message_id": "a", "body": "1"}, {"message_id": "a", "body": "1"}, {"message_id": "b", "body": "2"}]})).await;
    assert_eq!(st, 201);
    let got = s.receive("m", 2).await;
    s.settle(
        "m",
        got[0]["lock_token"].as_str().unwrap(),
        "complete",
        json!({}),
    )
    .await;
    s.settle(
        "m",
        got[1]["lock_token"].as_str().unwrap(),
        "abandon",
        json!({}),
    )
    .await;

    let resp = s
        .http
        .get(format!("{}/metrics", s.url))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = resp.text().await.unwrap();
    for line in [
        "redrive_messages_sent_total{queue=\"m\"} 2",
        "redrive_messages_duplicate_total{queue=\"m\"} 1",
        "redrive_messages_received_total{queue=\"m\"} 2",
        "redrive_messages_completed_total{queue=\"m\"} 1",
        "redrive_messages_abandoned_total{queue=\"m\"} 1",
        "redrive_messages_dead_lettered_total{queue=\"m\",reason=\"MaxDeliveryCountExceeded\"} 1",
        "redrive_queue_dead_lettered_messages{queue=\"m\"} 1",
        "redrive_queue_active_messages{queue=\"m\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    s.stop().await;
}

#[tokio::test]
async fn health_answers_and_unknown_routes_are_problems() {
    let s = TestServer::start().await;
    let (st, v) = s.get("/healthz").await;
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"status": "ok", "store": "ok", "backend": "sqlite"})
    );
    assert_problem(&s.get("/v2/nothing").await, 404, "not_found");
    assert_problem(
        &s.delete("/v1/queues/x/receive").await,
        405,
        "method_not_allowed",
    );
    let resp = s
        .http
        .get(format!("{}/v1/queues/nope", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    s.stop().await;
}

#[tokio::test]
async fn every_operation_of_the_openapi_document_is_routed() {
    let s = TestServer::start().await;
    let (st, doc) = s.get("/openapi.json").await;
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 18);
    for (path, ops) in paths {
        let concrete = path
            .replace("{name}", "q")
            .replace("{seq}", "1")
            .replace("{session}", "s")
            .replace("{id}", "dl_x");
        for method in ops.as_object().unwrap().keys() {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body =
                (m == reqwest::Method::POST || m == reqwest::Method::PATCH).then(|| json!({}));
            let (status, v) = s.call(m, &concrete, body).await;
            let code = v["code"].as_str().unwrap_or("");
            assert!(
                code != "not_found" && code != "method_not_allowed",
                "{method} {path} is documented but not routed ({status} {v})"
            );
        }
    }
    s.stop().await;
}

/// The endpoint tables of docs/api.md and the OpenAPI document cannot drift: every
/// endpoint a table lists exists in the document with the method, and the status the
/// table answers with (the leading code of its answer cell, 200 when it has none) is one
/// the document declares for it.
#[test]
fn the_endpoint_tables_of_the_api_docs_agree_with_the_openapi_document() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md"))
        .expect("docs/api.md");
    let doc: serde_json::Value =
        serde_json::from_str(redrive_api::OPENAPI_JSON).expect("the OpenAPI document");
    let normalize = |p: &str| -> String {
        let mut out = String::new();
        let mut in_param = false;
        for c in p.chars() {
            match c {
                '{' => {
                    in_param = true;
                    out.push_str("{}");
                }
                '}' => in_param = false,
                _ if !in_param => out.push(c),
                _ => {}
            }
        }
        out
    };
    let documented: std::collections::BTreeMap<
        String,
        &serde_json::Map<String, serde_json::Value>,
    > = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, ops)| (normalize(p), ops.as_object().unwrap()))
        .collect();
    let mut checked = 0;
    for line in docs.lines().filter(|l| l.starts_with("| `")) {
        // Cells are split on unescaped pipes (`\|` stays inside a cell).
        let line = line.replace("\\|", "\u{1}");
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let answer = cells
            .iter()
            .rev()
            .find(|c| !c.is_empty())
            .copied()
            .unwrap_or("");
        let status: String = answer.chars().take_while(char::is_ascii_digit).collect();
        let status = if status.len() == 3 {
            status
        } else {
            "200".to_owned()
        };
        for quoted in cells[0].split('`').skip(1).step_by(2) {
            let Some((method, path)) = quoted.split_once(' ') else {
                continue;
            };
            if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) {
                continue;
            }
            let path = path.split('?').next().unwrap();
            let variants: Vec<String> = match path.split_once('[') {
                Some((base, rest)) if rest.starts_with('/') => {
                    vec![
                        base.to_owned(),
                        format!("{base}{}", rest.trim_end_matches(']')),
                    ]
                }
                Some((base, _)) => vec![base.to_owned()],
                None => vec![path.to_owned()],
            };
            for p in variants {
                let ops = documented.get(&normalize(&p)).unwrap_or_else(|| {
                    panic!("docs/api.md lists {method} {p}, the OpenAPI document does not")
                });
                let op = ops.get(&method.to_lowercase()).unwrap_or_else(|| {
                    panic!("docs/api.md lists {method} {p}, the OpenAPI document has no {method}")
                });
                let responses = op["responses"].as_object().unwrap();
                assert!(
                    responses.contains_key(&status),
                    "docs/api.md answers {method} {p} with {status}; the OpenAPI document declares {:?}",
                    responses.keys().collect::<Vec<_>>()
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 55,
        "only {checked} endpoints found in the docs' tables"
    );
}

/// Checks `value` against the OpenAPI `schema` (the subset the document uses: `$ref`,
/// `type`, `properties`, `required`, `items`, `enum`, `oneOf`/`anyOf`/`allOf`): every field
/// of an answer must be documented, every required one present, every type as said.
fn check_schema(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    use serde_json::Value;
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/components/schemas/");
        return check_schema(doc, &doc["components"]["schemas"][name], value, at, errors);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let ok = branches.iter().any(|b| {
                let mut e = Vec::new();
                check_schema(doc, b, value, at, &mut e);
                e.is_empty()
            });
            if !ok {
                errors.push(format!("{at}: matches none of {key}"));
            }
            return;
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for b in all {
            check_schema(doc, b, value, at, errors);
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let fits = types.iter().any(|t| match *t {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            "null" => value.is_null(),
            _ => true,
        });
        if !fits {
            errors.push(format!("{at}: {value} is not {types:?}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let (Some(obj), Some(props)) = (
        value.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        let open = !matches!(
            schema.get("additionalProperties"),
            None | Some(Value::Bool(false))
        );
        for (k, v) in obj {
            match props.get(k) {
                Some(p) => check_schema(doc, p, v, &format!("{at}.{k}"), errors),
                None if open => {}
                None => errors.push(format!("{at}.{k}: not documented")),
            }
        }
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(r) = r.as_str()
                && !obj.contains_key(r)
            {
                errors.push(format!("{at}.{r}: required, missing"));
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            check_schema(doc, items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

/// The answers of the router match the OpenAPI document: for a run through the main
/// resources (queues, messages, dead letters, topics, subscriptions, cases, the register,
/// replay status, the audit log), each status is one the document declares for the
/// operation (a success explicitly; a problem may fall under `default`) and each JSON body
/// fits its schema, with no field the document leaves out.
#[tokio::test]
async fn answers_fit_their_documented_status_and_schema() {
    use reqwest::Method;
    let s = TestServer::start().await;
    let doc: serde_json::Value = serde_json::from_str(redrive_api::OPENAPI_JSON).unwrap();
    let mut errors = Vec::new();
    let mut call = async |m: Method, pattern: &str, path: &str, body: Option<serde_json::Value>| {
        let (st, v) = s.call(m.clone(), path, body).await;
        let op = &doc["paths"][pattern][m.as_str().to_lowercase()];
        assert!(op.is_object(), "{m} {pattern} is not documented");
        let code = st.as_u16().to_string();
        // A success must be declared as such; a problem may fall under `default`.
        let declared = op["responses"].get(&code).or_else(|| {
            (!code.starts_with('2'))
                .then(|| op["responses"].get("default"))
                .flatten()
        });
        let resp = match declared {
            Some(r) => r,
            None => {
                errors.push(format!("{m} {pattern}: {code} is not declared ({v})"));
                return v;
            }
        };
        if let Some(schema) = resp["content"]["application/json"].get("schema") {
            check_schema(
                &doc,
                schema,
                &v,
                &format!("{m} {pattern} {code}"),
                &mut errors,
            );
        }
        v
    };
    call(
        Method::POST,
        "/v1/queues",
        "/v1/queues",
        Some(json!({"name": "q", "policy": {"max_delivery_count": 1}})),
    )
    .await;
    call(Method::GET, "/v1/queues", "/v1/queues", None).await;
    call(Method::GET, "/v1/queues/{name}", "/v1/queues/q", None).await;
    call(
        Method::POST,
        "/v1/queues/{name}/messages",
        "/v1/queues/q/messages",
        Some(json!({"message_id": "m1", "body": "x", "properties": {"k": 1}})),
    )
    .await;
    call(
        Method::GET,
        "/v1/queues/{name}/messages",
        "/v1/queues/q/messages",
        None,
    )
    .await;
    let got = call(
        Method::POST,
        "/v1/queues/{name}/receive",
        "/v1/queues/q/receive",
        Some(json!({"max_messages": 1})),
    )
    .await;
    let token = got["messages"][0]["lock_token"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let settled = call(
        Method::POST,
        "/v1/queues/{name}/settle",
        "/v1/queues/q/settle",
        Some(json!({"lock_token": token, "action": "dead_letter", "reason": "Boom"})),
    )
    .await;
    let dl = settled["dead_letter_id"].as_str().unwrap_or("").to_owned();
    call(
        Method::GET,
        "/v1/queues/{name}/dead-letters",
        "/v1/queues/q/dead-letters",
        None,
    )
    .await;
    call(
        Method::GET,
        "/v1/queues/{name}/dead-letters/{id}",
        &format!("/v1/queues/q/dead-letters/{dl}"),
        None,
    )
    .await;
    call(Method::GET, "/v1/replay", "/v1/replay", None).await;
    call(Method::GET, "/v1/replay/{name}", "/v1/replay/q", None).await;
    s.broker.cases_once().await.unwrap();
    let page = call(Method::GET, "/v1/cases", "/v1/cases", None).await;
    let case = page["cases"][0]["id"].as_str().unwrap_or("").to_owned();
    call(Method::GET, "/v1/cases/counts", "/v1/cases/counts", None).await;
    call(
        Method::GET,
        "/v1/cases/{id}",
        &format!("/v1/cases/{case}"),
        None,
    )
    .await;
    call(
        Method::POST,
        "/v1/cases/{id}/claim",
        &format!("/v1/cases/{case}/claim"),
        Some(json!({})),
    )
    .await;
    call(
        Method::POST,
        "/v1/cases/{id}/notes",
        &format!("/v1/cases/{case}/notes"),
        Some(json!({"text": "looked"})),
    )
    .await;
    call(
        Method::GET,
        "/v1/cases/{id}/payload",
        &format!("/v1/cases/{case}/payload"),
        None,
    )
    .await;
    // A bounded replay plan over the case, through its states.
    call(
        Method::POST,
        "/v1/queues",
        "/v1/queues",
        Some(json!({"name": "repair"})),
    )
    .await;
    let plan_body = |destination: &str| {
        json!({
            "selection": {"queue": "q"},
            "destination": destination,
            "budget": {"items_per_s": 1.0, "bytes_per_s": 1024, "max_concurrent": 1,
                       "dependency": {"name": "d", "probe_url": "http://d.internal/health",
                                      "max_error_rate": 0.1, "max_latency_ms": 100}},
        })
    };
    call(
        Method::POST,
        "/v1/replay/plans",
        "/v1/replay/plans",
        Some(json!({"selection": {"queue": "q"}, "budget": {}})),
    )
    .await;
    call(
        Method::POST,
        "/v1/replay/plans",
        "/v1/replay/plans",
        Some(plan_body("q")),
    )
    .await;
    let plan = call(
        Method::POST,
        "/v1/replay/plans",
        "/v1/replay/plans",
        Some(plan_body("repair")),
    )
    .await;
    let plan = plan["id"].as_str().unwrap_or("").to_owned();
    assert!(plan.starts_with("plan_"), "the plan was created: {plan:?}");
    call(Method::GET, "/v1/replay/plans", "/v1/replay/plans", None).await;
    call(
        Method::GET,
        "/v1/replay/plans",
        "/v1/replay/plans?status=bogus",
        None,
    )
    .await;
    call(
        Method::GET,
        "/v1/replay/plans/{id}",
        &format!("/v1/replay/plans/{plan}"),
        None,
    )
    .await;
    call(
        Method::GET,
        "/v1/replay/plans/{id}/items",
        &format!("/v1/replay/plans/{plan}/items"),
        None,
    )
    .await;
    for action in ["pause", "start", "pause", "resume", "cancel"] {
        call(
            Method::POST,
            &format!("/v1/replay/plans/{{id}}/{action}"),
            &format!("/v1/replay/plans/{plan}/{action}"),
            None,
        )
        .await;
    }
    call(
        Method::GET,
        "/v1/replay/plans/{id}",
        "/v1/replay/plans/plan_nope",
        None,
    )
    .await;
    call(Method::GET, "/v1/intents/{id}", "/v1/intents/m1", None).await;
    call(
        Method::POST,
        "/v1/intents/{id}/cancel",
        "/v1/intents/m1/cancel",
        Some(json!({})),
    )
    .await;
    call(
        Method::GET,
        "/v1/effect-authorities",
        "/v1/effect-authorities",
        None,
    )
    .await;
    call(
        Method::POST,
        "/v1/topics",
        "/v1/topics",
        Some(json!({"name": "t"})),
    )
    .await;
    call(Method::GET, "/v1/topics", "/v1/topics", None).await;
    call(Method::GET, "/v1/topics/{topic}", "/v1/topics/t", None).await;
    call(
        Method::POST,
        "/v1/topics/{topic}/subscriptions",
        "/v1/topics/t/subscriptions",
        Some(json!({"name": "s", "type": "pull"})),
    )
    .await;
    call(
        Method::GET,
        "/v1/topics/{topic}/subscriptions",
        "/v1/topics/t/subscriptions",
        None,
    )
    .await;
    call(
        Method::GET,
        "/v1/topics/{topic}/subscriptions/{sub}",
        "/v1/topics/t/subscriptions/s",
        None,
    )
    .await;
    call(
        Method::DELETE,
        "/v1/topics/{topic}/subscriptions/{sub}",
        "/v1/topics/t/subscriptions/s?force=true",
        None,
    )
    .await;
    call(Method::GET, "/v1/register", "/v1/register", None).await;
    call(Method::GET, "/v1/audit", "/v1/audit", None).await;
    call(
        Method::POST,
        "/v1/queues/{name}/purge",
        "/v1/queues/q/purge",
        None,
    )
    .await;
    call(Method::GET, "/v1/queues/{name}", "/v1/queues/nope", None).await;
    assert!(
        errors.is_empty(),
        "answers that do not fit the document:\n{}",
        errors.join("\n")
    );
    s.stop().await;
}
