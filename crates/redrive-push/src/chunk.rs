//! Batching: events split into consecutive batches bounded by count and by the bytes of
//! the `application/cloudevents-batch+json` body they make. Neither bound implies the
//! other (many tiny events cross the count, a few large ones the bytes), so both apply.

use redrive_events::CloudEvent;

/// The bytes of one event in structured mode (compact JSON).
pub fn event_bytes(event: &CloudEvent) -> usize {
    serde_json::to_vec(&event.to_json()).map_or(0, |v| v.len())
}

/// Splits `events` into batches of at most `max_events` events (0 counts as 1) whose batch
/// body (`[e1,e2,…]`, exactly as [`batch_body`] writes it) stays within
/// `preferred_batch_bytes`. An event too large for the budget on its own goes alone: it is
/// never dropped here, the endpoint decides (a 413 dead-letters it). Order is kept.
pub fn chunk(
    events: Vec<CloudEvent>,
    max_events: usize,
    preferred_batch_bytes: usize,
) -> Vec<Vec<CloudEvent>> {
    chunk_by(events, max_events, preferred_batch_bytes, event_bytes)
}

/// [`chunk`] for any item, given the item's serialized size: a batch of sizes `s1…sn`
/// weighs `2 + Σs + (n − 1)` bytes (brackets and commas).
pub fn chunk_by<T>(
    items: impl IntoIterator<Item = T>,
    max_items: usize,
    budget_bytes: usize,
    mut size: impl FnMut(&T) -> usize,
) -> Vec<Vec<T>> {
    let max_items = max_items.max(1);
    let mut batches = Vec::new();
    let mut current: Vec<T> = Vec::new();
    let mut current_bytes = 2usize;
    for item in items {
        let s = size(&item);
        // Joining a non-empty batch costs the item and a comma.
        if !current.is_empty()
            && (current.len() >= max_items
                || current_bytes.saturating_add(s).saturating_add(1) > budget_bytes)
        {
            batches.push(std::mem::take(&mut current));
            current_bytes = 2;
        }
        let comma = usize::from(!current.is_empty());
        current_bytes = current_bytes.saturating_add(s).saturating_add(comma);
        current.push(item);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// The batch body of `events`: a compact JSON array of their structured forms.
pub fn batch_body(events: &[CloudEvent]) -> Vec<u8> {
    let array = serde_json::Value::Array(events.iter().map(CloudEvent::to_json).collect());
    serde_json::to_vec(&array).unwrap_or_default()
}

/// The batch body of events already in structured form: `[` + their JSON joined by `,` +
/// `]`, the bytes of each event as they are ([`chunk_by`]'s size formula holds exactly).
pub fn encoded_batch_body(events: &[crate::EncodedEvent]) -> Vec<u8> {
    let len = 2 + events.iter().map(|e| e.json.len() + 1).sum::<usize>();
    let mut body = Vec::with_capacity(len);
    body.push(b'[');
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&e.json);
    }
    body.push(b']');
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(id: usize, data_len: usize) -> CloudEvent {
        CloudEvent::from_json(json!({
            "specversion": "1.0", "id": id.to_string(), "source": "/s", "type": "t",
            "data": "x".repeat(data_len),
        }))
        .unwrap()
    }

    fn ids(batches: &[Vec<CloudEvent>]) -> Vec<Vec<String>> {
        batches
            .iter()
            .map(|b| b.iter().map(|e| e.id.clone()).collect())
            .collect()
    }

    #[test]
    fn batches_are_bounded_by_count_and_keep_order() {
        let events: Vec<_> = (0..7).map(|i| event(i, 1)).collect();
        let batches = chunk(events, 3, usize::MAX);
        assert_eq!(
            ids(&batches),
            [vec!["0", "1", "2"], vec!["3", "4", "5"], vec!["6"]]
        );
        assert_eq!(
            chunk(vec![event(0, 1), event(1, 1)], 0, usize::MAX).len(),
            2
        );
        assert!(chunk(Vec::new(), 10, 1000).is_empty());
    }

    #[test]
    fn batches_are_bounded_by_the_exact_bytes_of_their_body() {
        let events: Vec<_> = (0..20).map(|i| event(i, 100 + i * 7)).collect();
        for budget in [200, 500, 1000, 3000] {
            let batches = chunk(events.clone(), 1000, budget);
            let flat: Vec<_> = batches.iter().flatten().map(|e| e.id.clone()).collect();
            let expected: Vec<_> = events.iter().map(|e| e.id.clone()).collect();
            assert_eq!(flat, expected, "order kept, nothing lost");
            for (i, b) in batches.iter().enumerate() {
                let body = batch_body(b);
                assert!(
                    body.len() <= budget || b.len() == 1,
                    "batch {i} {}",
                    body.len()
                );
                // Greedy: the next event would not have fitted.
                if let Some(next) = batches.get(i + 1) {
                    let mut more = b.clone();
                    more.push(next[0].clone());
                    assert!(batch_body(&more).len() > budget);
                }
            }
        }
    }

    #[test]
    fn an_event_larger_than_the_budget_goes_alone() {
        let events = vec![event(0, 10), event(1, 5000), event(2, 10), event(3, 10)];
        let batches = chunk(events, 10, 1000);
        assert_eq!(ids(&batches), [vec!["0"], vec!["1"], vec!["2", "3"]]);
    }

    #[test]
    fn an_encoded_batch_is_the_events_bytes_in_an_array() {
        let events: Vec<_> = (0..3)
            .map(|i| crate::EncodedEvent {
                id: i.to_string(),
                json: serde_json::to_vec(&event(i, i).to_json()).unwrap(),
            })
            .collect();
        let body = encoded_batch_body(&events);
        let sizes: usize = events.iter().map(|e| e.json.len()).sum();
        assert_eq!(body.len(), 2 + sizes + events.len() - 1);
        let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let expected: Vec<_> = (0..3).map(|i| event(i, i).to_json()).collect();
        assert_eq!(parsed, serde_json::Value::Array(expected));
        // Bytes are kept as they are (spacing included) and the array stays valid JSON.
        let spaced = crate::EncodedEvent {
            id: "s".into(),
            json: b"{ \"id\" : \"s\" }".to_vec(),
        };
        assert_eq!(encoded_batch_body(&[spaced]), b"[{ \"id\" : \"s\" }]");
        assert_eq!(encoded_batch_body(&[]), b"[]");
    }

    #[test]
    fn the_size_formula_matches_serde_json() {
        let events: Vec<_> = (0..5).map(|i| event(i, i * 3)).collect();
        let sum: usize = events.iter().map(event_bytes).sum();
        assert_eq!(batch_body(&events).len(), 2 + sum + events.len() - 1);
    }
}
