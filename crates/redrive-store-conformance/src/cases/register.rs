//! The idempotency register: put creates or replaces and answers the previous entry (an
//! equal put changes nothing, not even its time), delete answers what it removed, and
//! listing pages in key order.

use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
use redrive_store::MAX_REGISTER_PAGE;

use super::prelude::*;

fn key(s: &str) -> RegisterKey {
    s.parse().unwrap()
}

fn entry(k: &str, answer: Idempotency, ordering: Option<&str>) -> RegisterEntry {
    RegisterEntry::new(key(k), answer, ordering.map(str::to_owned)).unwrap()
}

async fn keys(t: &TestStore, after: Option<&str>, limit: u32) -> Vec<String> {
    let after = after.map(key);
    t.s()
        .list_register(after.as_ref(), limit)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.entry.key.to_string())
        .collect()
}

pub async fn register_put_replaces_and_answers_the_previous_entry(t: &TestStore) {
    use Idempotency::*;
    let created = entry("order.created", Idempotent, Some("sequence"));
    assert_eq!(
        t.s().put_register_entry(&created, secs(1)).await.unwrap(),
        None
    );
    let all = t.s().list_register(None, 0).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!((&all[0].entry, all[0].updated_at), (&created, secs(1)));

    // An equal put answers the stored entry and writes nothing: its time stays.
    let same = t.s().put_register_entry(&created, secs(2)).await.unwrap();
    assert_eq!(
        same.map(|r| (r.entry, r.updated_at)),
        Some((created.clone(), secs(1)))
    );
    assert_eq!(
        t.s().list_register(None, 0).await.unwrap()[0].updated_at,
        secs(1)
    );

    // A change replaces the answer and drops the ordering attribute.
    let changed = entry("order.created", NotIdempotent, None);
    let previous = t.s().put_register_entry(&changed, secs(3)).await.unwrap();
    assert_eq!(previous.map(|r| r.entry), Some(created));
    let all = t.s().list_register(None, 0).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!((&all[0].entry, all[0].updated_at), (&changed, secs(3)));

    // A queue's own entry is a key of its own beside the types.
    let star = entry("orders:*", Idempotent, None);
    assert_eq!(
        t.s().put_register_entry(&star, secs(4)).await.unwrap(),
        None
    );
    assert_eq!(keys(t, None, 0).await, ["order.created", "orders:*"]);
}

pub async fn register_delete_answers_what_it_removed(t: &TestStore) {
    let e = entry("blob.deleted", Idempotency::Idempotent, None);
    t.s().put_register_entry(&e, secs(1)).await.unwrap();
    let gone = t.s().delete_register_entry(&e.key).await.unwrap();
    assert_eq!(
        gone.map(|r| (r.entry, r.updated_at)),
        Some((e.clone(), secs(1)))
    );
    assert!(t.s().list_register(None, 0).await.unwrap().is_empty());
    assert_eq!(t.s().delete_register_entry(&e.key).await.unwrap(), None);
    assert_eq!(
        t.s().delete_register_entry(&key("q:*")).await.unwrap(),
        None
    );
}

pub async fn register_list_pages_in_key_order(t: &TestStore) {
    // Bytewise order: upper case before lower case, '-' before '.' before digits.
    for (i, k) in ["b", "a.b", "B", "a-b", "a", "a:*", "a0"]
        .iter()
        .enumerate()
    {
        let e = entry(k, Idempotency::Idempotent, None);
        t.s()
            .put_register_entry(&e, secs(i as i64 + 1))
            .await
            .unwrap();
    }
    let all = keys(t, None, 0).await;
    assert_eq!(all, ["B", "a", "a-b", "a.b", "a0", "a:*", "b"]);
    assert_eq!(keys(t, None, 3).await, ["B", "a", "a-b"]);
    assert_eq!(keys(t, Some("a-b"), 3).await, ["a.b", "a0", "a:*"]);
    assert_eq!(keys(t, Some("a:*"), 3).await, ["b"]);
    assert!(keys(t, Some("b"), 3).await.is_empty());
    assert_eq!(keys(t, None, MAX_REGISTER_PAGE + 1).await.len(), 7);
}
