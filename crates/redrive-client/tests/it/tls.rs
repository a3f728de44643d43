//! `https://` servers: trusted through a CA bundle given as PEM or as a file, and refused
//! (a TLS failure, not transient, not retried) when the client does not trust the
//! certificate.

use std::sync::Arc;

use redrive_client::{Client, ErrorKind, Message};
use redrive_testkit::TestServer;
use redrive_testkit::tls::TestCa;

use crate::support::fixed_retries;

#[tokio::test]
async fn a_private_authority_is_trusted_as_pem_or_file_and_a_stranger_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("redrive client test CA");
    let (cert, key) = ca.issue(&["127.0.0.1"]).write(dir.path());
    let s = TestServer::builder()
        .trust(ca.trust())
        .settings(redrive_server::Settings {
            tls_cert_file: Some(cert),
            tls_key_file: Some(key),
            ..redrive_testkit::default_settings()
        })
        .start()
        .await;
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let build = |b: redrive_client::ClientBuilder| {
        b.clock(Arc::new(s.clock().clone()))
            .retry(fixed_retries())
            .build()
            .unwrap()
    };
    let by_pem = build(Client::builder(&s.url).ca_pem(ca.pem()));
    by_pem
        .admin()
        .create_queue("orders", Default::default())
        .await
        .unwrap();
    by_pem
        .sender("orders")
        .send(Message::new("a"))
        .await
        .unwrap();
    let by_file = build(Client::builder(&s.url).ca_file(ca.write(dir.path(), "ca.pem")));
    by_file
        .sender("orders")
        .send(Message::new("b"))
        .await
        .unwrap();
    assert_eq!(s.counts("orders").await["active"], 2);

    let stranger = TestCa::new("someone else's CA");
    let refused = build(Client::builder(&s.url).ca_pem(stranger.pem()));
    let err = refused
        .sender("orders")
        .send(Message::new("c").with_id("c"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert!(!err.is_transient(), "a refused certificate stays refused");
    assert_eq!(err.attempts(), 1, "not retried");
    assert!(err.to_string().contains("TLS"), "{err}");
    assert_eq!(s.counts("orders").await["active"], 2);
    s.stop().await;
}
