//! The CloudEvents parser in its three HTTP forms.
//!
//! Input layout: the first byte picks the form, the rest is the input.
//! - `sel % 3 == 0`: structured mode, the rest is the JSON.
//! - `sel % 3 == 1`: batch mode, the rest is the JSON array.
//! - `sel % 3 == 2`: binary mode: header lines `name:value` up to the first empty line,
//!   the rest is the body.
//!
//! What must hold: no panic; an accepted event survives `to_json` then `from_json`
//! unchanged, and its JSON bytes parse back to it; `id_and_source` (used on stored events)
//! reads the same key from an accepted event's bytes; a batch agrees with its events
//! parsed one by one; an event survives `to_binary` then `from_binary` in every context
//! attribute and extension (binary mode carries extensions as text).

#![no_main]

use libfuzzer_sys::fuzz_target;
use redrive_events::cloudevent::{CloudEvent, ExtensionValue};

/// The functions under test; re-point here if their signatures change.
mod under_test {
    use redrive_events::cloudevent::{BatchError, CloudEvent, EventError};

    pub fn structured(json: &[u8]) -> Result<CloudEvent, EventError> {
        CloudEvent::from_slice(json)
    }

    pub fn batch(json: &[u8]) -> Result<Vec<(CloudEvent, Vec<u8>)>, BatchError> {
        CloudEvent::batch_from_slice(json)
    }

    pub fn binary(headers: &[(&str, &str)], body: &[u8]) -> Result<CloudEvent, EventError> {
        CloudEvent::from_binary(headers.iter().copied(), body)
    }
}

fn check_event(ev: &CloudEvent, bytes: &[u8]) {
    let again = CloudEvent::from_json(ev.to_json()).expect("to_json of an event parses");
    assert_eq!(&again, ev, "to_json then from_json round-trips");

    match CloudEvent::id_and_source(bytes) {
        Ok((id, source)) => {
            assert_eq!(
                (id.as_str(), source.as_str()),
                (ev.id.as_str(), ev.source.as_str())
            );
        }
        Err(e) => panic!("id_and_source refuses an accepted event: {e}"),
    }

    let (headers, body) = ev.to_binary();
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let bin = under_test::binary(&pairs, &body).expect("to_binary of an event parses");
    assert_eq!(bin.id, ev.id);
    assert_eq!(bin.source, ev.source);
    assert_eq!(bin.specversion, ev.specversion);
    assert_eq!(bin.event_type, ev.event_type);
    assert_eq!(bin.subject, ev.subject);
    assert_eq!(bin.time, ev.time);
    assert_eq!(bin.dataschema, ev.dataschema);
    if ev.datacontenttype.is_some() {
        assert_eq!(bin.datacontenttype, ev.datacontenttype);
    }
    let as_text = |v: &ExtensionValue| match v {
        ExtensionValue::String(s) => s.clone(),
        ExtensionValue::Integer(i) => i.to_string(),
        ExtensionValue::Boolean(b) => b.to_string(),
    };
    let want: Vec<(&String, String)> = ev.extensions.iter().map(|(k, v)| (k, as_text(v))).collect();
    let got: Vec<(&String, String)> = bin
        .extensions
        .iter()
        .map(|(k, v)| (k, as_text(v)))
        .collect();
    assert_eq!(got, want, "extensions survive binary mode as text");
}

fn split_headers(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => {
            if let Ok(ev) = under_test::structured(rest) {
                check_event(&ev, rest);
            }
        }
        1 => {
            let batch = under_test::batch(rest);
            let whole: Result<Vec<CloudEvent>, _> = serde_json::from_slice(rest)
                .map_err(|_| ())
                .and_then(|v| CloudEvent::batch_from_json(v).map_err(|_| ()));
            match (&batch, &whole) {
                (Ok(events), Ok(parsed)) => {
                    assert_eq!(events.len(), parsed.len());
                    for ((ev, bytes), one) in events.iter().zip(parsed) {
                        assert_eq!(ev, one, "a batch event is the event parsed alone");
                        let again =
                            under_test::structured(bytes).expect("an event's own bytes parse");
                        assert_eq!(&again, ev);
                        check_event(ev, bytes);
                    }
                }
                (Err(_), Err(_)) => {}
                // The bytes can repeat a key; a parsed value cannot show it, so only the
                // byte path refuses such a batch.
                (Err(_), Ok(_)) if redrive_events::json::check_unique_keys(rest).is_err() => {}
                _ => panic!(
                    "batch_from_slice and batch_from_json disagree: {:?} vs {:?}",
                    batch.as_ref().map(Vec::len),
                    whole.as_ref().map(Vec::len)
                ),
            }
        }
        _ => {
            let (head, body) = split_headers(rest);
            let Ok(head) = std::str::from_utf8(head) else {
                return;
            };
            let headers: Vec<(&str, &str)> =
                head.split('\n').filter_map(|l| l.split_once(':')).collect();
            if let Ok(ev) = under_test::binary(&headers, body) {
                let bytes = serde_json::to_vec(&ev.to_json()).expect("an event serialises");
                check_event(&ev, &bytes);
            }
        }
    }
});
