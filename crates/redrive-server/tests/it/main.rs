//! HTTP-level tests of the native API: a real server on 127.0.0.1 (redrive-testkit's
//! `TestServer`) over a real SQLite file (or a PostgreSQL schema), driven by a real HTTP
//! client, with time moved by a manual clock (no test sleeps).

// Test support code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

mod access;
mod auto_replay;
mod case_groups;
mod cases;
mod console;
mod contract_budgets;
mod contract_cases;
mod contract_doors;
mod contract_evidence;
mod dead_letters;
mod failures;
mod hardening_access;
mod hardening_audit;
mod hardening_http;
mod hardening_imports;
mod hardening_plans;
mod hardening_push;
mod hardening_replay;
mod messages;
mod ops;
mod overview;
mod plan_signature;
mod policy_versions;
mod push_fidelity;
mod push_outcomes;
mod queues;
mod register;
mod replay;
mod replay_api;
mod replay_moves;
mod replay_plans;
mod seed_003;
mod session_list;
mod sessions;
mod tls;
mod topics;
mod transactions;
mod transport;
mod typed_ids;
