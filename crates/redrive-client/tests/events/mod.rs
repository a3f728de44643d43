//! What the telemetry test binaries share: a `tracing` layer that keeps the processor's
//! events, each as its fields, in order. Each binary installs it as the process's only
//! subscriber, so that it sees every event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The processor's events, each as its fields, in order.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "redrive_client::processor" {
            return;
        }
        struct Fields<'a>(&'a mut BTreeMap<String, String>);
        impl tracing::field::Visit for Fields<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                let text = format!("{v:?}");
                self.0
                    .insert(f.name().to_owned(), text.trim_matches('"').to_owned());
            }
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(fields);
    }
}

impl Events {
    /// Every event kept so far that has an `event` field which `matches`.
    pub fn matching(&self, matches: impl Fn(&str) -> bool) -> Vec<BTreeMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f.get("event").is_some_and(|e| matches(e)))
            .cloned()
            .collect()
    }

    /// The events named `name`. (Not every binary that shares this module asks by name.)
    #[allow(dead_code)]
    pub fn named(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.matching(|e| e == name)
    }
}
