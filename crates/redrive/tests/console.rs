//! The web console in a real browser: headless Chromium driven over WebDriver
//! (chromedriver, through `fantoccini`) against the real `redrive serve` binary with
//! authentication on. Part of `cargo test`: without `/usr/bin/chromium` and
//! `/usr/bin/chromedriver` (Debian's `chromium` and `chromium-driver`) the tests print
//! that they were skipped and pass, unless `CI` is set, where they fail.
//! `REDRIVE_TEST_CHROMIUM` and `REDRIVE_TEST_CHROMEDRIVER` name other files.
//!
//! # Layout
//! - `harness`: the browser, the server, and the steps' helpers (sign in, go to a page,
//!   click, fill, wait for text, screenshots, the accessibility and console-log checks).
//! - `operations`: the operational pages end to end (overview, entity, dead letters,
//!   failures, quarantine, topics).

// Helpers outside `#[test]` functions are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "console/harness.rs"]
mod harness;
#[path = "console/operations.rs"]
mod operations;
#[path = "common/ports.rs"]
mod ports;
#[path = "console/recovery.rs"]
mod recovery;
