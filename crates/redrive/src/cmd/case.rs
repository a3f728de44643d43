//! `redrive case …` (recovery cases: search, count, show, read the payload, and work a
//! case: claim, note, diagnose, correct, transform, test, reconcile, close, review,
//! replay), `redrive intent …` (a producer's cancel or supersede) and
//! `redrive effect-authority …` (who answers whether an effect happened).
//!
//! A person's change to a case needs a claim first (`case claim`); the server refuses it
//! otherwise with a `case_conflict` naming why (`not_case_owner`, `case_claimed` by whom).
//! Fixed vocabularies (correction kinds, outcomes, states, decisions) are checked here,
//! before any request, so a typo exits 2 and changes nothing.

use std::io::{Read as _, Write as _};
use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use clap::{Args, Subcommand};
use redrive_api::case::{
    CancelIntent, Case, CaseCounts, CaseSummary, CloseCase, CorrectCase, DiagnoseCase,
    EffectAuthority, Intent, NoteCase, ReviewCase, SetEffectAuthority, SupersedeIntent, TestCase,
    TransformCase,
};
use redrive_api::message::BodyEncoding;
use redrive_core::case::CaseState;
use redrive_core::dead_letter::EvidenceQuality;

use super::message::encode_body;
use super::replay::counts_text;
use super::{Ctx, queue_name};
use crate::failure::input_error;
use crate::output::{KeyValues, Table, or_dash, print_json};
use crate::units::{format_duration_ms, parse_duration_ms, parse_time, ranged_u32};
use redrive_client::CaseQuery;

/// `redrive case …`.
#[derive(Debug, Subcommand)]
pub enum CaseCommand {
    /// Search cases (metadata only), by id.
    List(ListArgs),
    /// Count the cases a search matches, by state, reason and type.
    Counts(Filters),
    /// Show one case: its metadata, what the broker recorded, and its timeline.
    Show {
        /// Case id (case_…).
        id: String,
    },
    /// Write a case's payload bytes to stdout or a file (role payload-reader; audited).
    Payload {
        /// Case id.
        id: String,
        /// A transformation's digest instead of the exact dead-lettered bytes.
        #[arg(long, value_name = "SHA256")]
        digest: Option<String>,
        /// The file to write [default: stdout].
        #[arg(long, value_name = "FILE")]
        out: Option<String>,
    },
    /// Claim a case (or renew one's claim): one owner at a time works a case.
    Claim {
        /// Case id.
        id: String,
        /// How long the claim holds (e.g. 15m; at most 24h) [server default: 15m].
        #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
        lease: Option<u64>,
    },
    /// Give up one's claim.
    Release {
        /// Case id.
        id: String,
    },
    /// Add a note to the case (kept in its record, not on the timeline; the claim's owner only).
    Note {
        /// Case id.
        id: String,
        /// The note (at most 4096 bytes).
        text: String,
    },
    /// Propose a diagnosis: a hypothesis and what would disconfirm it.
    Diagnose {
        /// Case id.
        id: String,
        #[command(flatten)]
        diagnosis: DiagnosisArgs,
    },
    /// Record the correction that claims to address the failure.
    Correct {
        /// Case id.
        id: String,
        #[command(flatten)]
        correction: CorrectionArgs,
    },
    /// Record a deterministic transformation of the payload.
    Transform(TransformArgs),
    /// Record a bounded test of the latest (or a given) correction.
    Test(TestArgs),
    /// Ask the message type's effect authority whether the effect happened.
    Reconcile {
        /// Case id.
        id: String,
    },
    /// Close a case as rejected or indeterminate, or completed on attested evidence (a type
    /// without an effect authority), with the evidence.
    Close {
        /// Case id.
        id: String,
        /// The terminal state.
        #[arg(long, value_parser = ["rejected", "indeterminate", "completed"])]
        state: String,
        /// The evidence (the policy and the validation failure, or why the effect cannot
        /// be established).
        #[arg(long)]
        evidence: String,
    },
    /// Review a case at its deadline: archive, delete its payload, or extend.
    Review {
        /// Case id.
        id: String,
        /// The decision.
        #[arg(long, value_parser = ["archive", "delete", "extend"])]
        decision: String,
        /// For extend: how much longer (e.g. 7d; at most 30d).
        #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
        extend: Option<u64>,
        /// The policy the decision is taken under.
        #[arg(long)]
        policy: String,
    },
    /// Admit one replay of an eligible case (role replayer).
    Replay {
        /// Case id.
        id: String,
    },
    /// Case groups: the cases of one queue worked as one (one decision, many cases).
    #[command(subcommand)]
    Group(super::case_group::GroupCommand),
}

/// A diagnosis, for one case or a group.
#[derive(Debug, Clone, Args)]
pub struct DiagnosisArgs {
    /// The hypothesis.
    #[arg(long)]
    hypothesis: String,
    /// What would disconfirm it (or did).
    #[arg(long, value_name = "EVIDENCE")]
    disconfirming: String,
}

impl DiagnosisArgs {
    /// The request.
    pub fn request(self) -> DiagnoseCase {
        DiagnoseCase {
            hypothesis: self.hypothesis,
            disconfirming_evidence: self.disconfirming,
        }
    }
}

/// A correction, for one case or a group.
#[derive(Debug, Clone, Args)]
pub struct CorrectionArgs {
    /// What kind of change.
    #[arg(long, value_parser = ["code", "config", "data", "permission", "dependency", "policy"])]
    kind: String,
    /// Its identity (a commit, a config version, a ticket).
    #[arg(long)]
    identity: String,
    /// The failure shape it claims to address.
    #[arg(long, value_name = "SHAPE")]
    addresses: String,
}

impl CorrectionArgs {
    /// The request.
    pub fn request(self) -> CorrectCase {
        CorrectCase {
            kind: self.kind,
            identity: self.identity,
            addresses: self.addresses,
        }
    }
}

/// The search filters of `case list` and `case counts`; they combine with AND.
#[derive(Debug, Clone, Default, Args)]
pub struct Filters {
    /// Only this queue (a subscription's is `<topic>.<subscription>`).
    #[arg(long, value_parser = queue_name)]
    pub queue: Option<String>,
    /// Only this dead-letter reason code.
    #[arg(long)]
    pub reason: Option<String>,
    /// Only this message type.
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,
    /// Only this event or message `source`.
    #[arg(long)]
    pub source: Option<String>,
    /// Only this event or message `subject`.
    #[arg(long)]
    pub subject: Option<String>,
    /// Only these states (comma-separated, e.g. diagnosis_proposed,correction_identified).
    #[arg(long, value_name = "STATE[,STATE]", value_parser = states)]
    pub state: Option<String>,
    /// Only open cases.
    #[arg(long)]
    pub open: bool,
    /// Only cases claimed by this owner (a token's name).
    #[arg(long)]
    pub owner: Option<String>,
    /// Only open cases past their review deadline.
    #[arg(long)]
    pub overdue: bool,
    /// Opened at or after (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Opened before (RFC 3339, or -DUR for "ago").
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Only this evidence quality (exact, approximate, incomplete, unavailable).
    #[arg(long, value_parser = quality)]
    pub quality: Option<String>,
    /// Free text found in the case.
    #[arg(long)]
    pub text: Option<String>,
    /// Only the cases of this intent.
    #[arg(long, value_name = "INTENT")]
    pub intent: Option<String>,
}

impl Filters {
    fn query(self) -> CaseQuery {
        CaseQuery {
            queue: self.queue,
            reason: self.reason,
            message_type: self.message_type,
            source: self.source,
            subject: self.subject,
            state: self.state,
            open: self.open.then_some(true),
            owner: self.owner,
            overdue: self.overdue.then_some(true),
            from: self.from,
            to: self.to,
            evidence_quality: self.quality,
            q: self.text,
            intent: self.intent,
            cursor: None,
            limit: None,
        }
    }
}

/// `redrive case list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    filters: Filters,
    /// Continue after a previous page.
    #[arg(long)]
    cursor: Option<String>,
    /// Page size (1 to 1000) [server default: 100].
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, 1_000))]
    limit: Option<u32>,
}

/// `redrive case transform`.
#[derive(Debug, Args)]
pub struct TransformArgs {
    /// Case id.
    id: String,
    /// The transformed bytes (`-` for stdin); sent as base64 when not UTF-8.
    #[arg(long, value_name = "FILE|-")]
    file: String,
    /// The transformation's version.
    #[arg(long, value_name = "V")]
    version: String,
    /// A field the transformation changed (repeat for each).
    #[arg(long = "changed-field", value_name = "FIELD", required = true)]
    changed_fields: Vec<String>,
    /// The authority that permits the change.
    #[arg(long)]
    authority: String,
    /// The failure shape it addresses.
    #[arg(long, value_name = "SHAPE")]
    addresses: String,
    /// The intent stays equivalent (without it, the result is a new intent that is sent
    /// through the ordinary path, never replayed).
    #[arg(long)]
    equivalent: bool,
}

/// `redrive case test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Case id.
    id: String,
    /// The isolated sink queue (never the case's queue or its dead-letter queue).
    #[arg(long, value_name = "SINK", value_parser = queue_name)]
    destination: String,
    /// Send the fixture to the sink now.
    #[arg(long)]
    send: bool,
    /// The fixture's bytes [default: the case's payload or its latest transformation].
    #[arg(long, value_name = "FILE")]
    fixture: Option<String>,
    /// The correction tested [default: the latest].
    #[arg(long, value_name = "N", value_parser = ranged_u32(1, u32::MAX))]
    correction: Option<u32>,
    /// The outcome.
    #[arg(long, value_parser = ["pass", "fail"])]
    outcome: String,
    /// The evidence of the outcome.
    #[arg(long)]
    evidence: String,
}

/// `redrive intent …`.
#[derive(Debug, Subcommand)]
pub enum IntentCommand {
    /// Show what the producer said about an intent, and its cases.
    Show {
        /// Intent id (the message's intent id, else its message id).
        id: String,
    },
    /// Cancel an intent: its open cases close as cancelled (those of the entities the
    /// token may produce to, or of `--queue`).
    Cancel {
        /// Intent id.
        id: String,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// The queue the word is for (default: the one scope the token may produce to).
        #[arg(long, value_name = "QUEUE")]
        queue: Option<String>,
    },
    /// Supersede an intent by a newer one: its open cases close as superseded.
    Supersede {
        /// Intent id.
        id: String,
        /// The intent that replaces it.
        #[arg(long, value_name = "NEW")]
        by: String,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// The queue the word is for (default: the one scope the token may produce to).
        #[arg(long, value_name = "QUEUE")]
        queue: Option<String>,
    },
}

/// `redrive effect-authority …`.
#[derive(Debug, Subcommand)]
pub enum EffectAuthorityCommand {
    /// List the registered effect authorities, by message type.
    List,
    /// Register (or change) the authority of a message type.
    Set {
        /// The message type it answers for.
        #[arg(value_name = "TYPE")]
        message_type: String,
        /// Its endpoint (http:// or https://). Not named `url`: that is the global
        /// `--url` of the server.
        #[arg(value_name = "URL")]
        endpoint: String,
        /// How long an answer may take (e.g. 5s; at most 60s) [server default: 5s].
        #[arg(long, value_name = "DUR", value_parser = parse_duration_ms)]
        timeout: Option<u64>,
    },
    /// Remove the authority of a message type.
    Delete {
        /// The message type.
        #[arg(value_name = "TYPE")]
        message_type: String,
    },
}

/// A clap value parser for `--state`: known states, comma-separated.
fn states(s: &str) -> Result<String, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    for p in &parts {
        p.parse::<CaseState>().map_err(|e| e.to_string())?;
    }
    Ok(parts.join(","))
}

/// A clap value parser for `--quality`.
fn quality(s: &str) -> Result<String, String> {
    s.parse::<EvidenceQuality>()
        .map(|q| q.to_string())
        .map_err(|e| e.to_string())
}

/// Reads a file, or stdin for `-`.
fn read_input(path: &str) -> anyhow::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| input_error(format!("cannot read stdin: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| input_error(format!("cannot read {path}: {e}")))
}

/// Runs `case …`.
pub async fn run(ctx: &Ctx, cmd: CaseCommand) -> anyhow::Result<()> {
    let c = &ctx.client;
    match cmd {
        CaseCommand::List(a) => {
            let mut query = a.filters.query();
            query.cursor = a.cursor;
            query.limit = a.limit;
            let page = c
                .recovery()
                .list_cases(&query)
                .await
                .context("list cases")?;
            if ctx.json {
                return print_json(&page);
            }
            if page.cases.is_empty() {
                println!("no cases");
            } else {
                print!("{}", list_table(&page.cases).render());
            }
            if let Some(cursor) = &page.next_cursor {
                println!("more: --cursor {cursor}");
            }
        }
        CaseCommand::Counts(f) => {
            let counts = c
                .recovery()
                .case_counts(&f.query())
                .await
                .context("count cases")?;
            if ctx.json {
                return print_json(&counts);
            }
            print!("{}", describe_counts(&counts).render());
        }
        CaseCommand::Show { id } => {
            let case = c
                .recovery()
                .get_case(&id)
                .await
                .with_context(|| format!("show case {id}"))?;
            if ctx.json {
                return print_json(&case);
            }
            print!("{}", show_text(&case)?);
        }
        CaseCommand::Payload { id, digest, out } => {
            let p = c
                .recovery()
                .case_payload(&id, digest.as_deref())
                .await
                .with_context(|| format!("read the payload of case {id}"))?;
            if ctx.json {
                return print_json(&p);
            }
            let bytes = match p.body_encoding {
                BodyEncoding::Utf8 => p.body.into_bytes(),
                BodyEncoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(p.body.as_bytes())
                    .with_context(|| format!("the payload of case {id} is not valid base64"))?,
            };
            match out {
                Some(path) => {
                    std::fs::write(Path::new(&path), &bytes)
                        .map_err(|e| input_error(format!("cannot write {path}: {e}")))?;
                    eprintln!(
                        "wrote {} bytes (sha256 {}) to {path}",
                        bytes.len(),
                        p.sha256
                    );
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    stdout.write_all(&bytes).context("write the payload")?;
                    stdout.flush().context("write the payload")?;
                }
            }
        }
        CaseCommand::Claim { id, lease } => {
            let case = c
                .recovery()
                .claim_case(&id, lease)
                .await
                .with_context(|| format!("claim case {id}"))?;
            if ctx.json {
                return print_json(&case);
            }
            match &case.summary.lease {
                Some(l) => println!("claimed {id} as {} until {}", l.owner, l.until),
                None => println!("claimed {id}"),
            }
        }
        CaseCommand::Release { id } => {
            let case = c
                .recovery()
                .release_case(&id)
                .await
                .with_context(|| format!("release case {id}"))?;
            changed(ctx, &case, "released")?;
        }
        CaseCommand::Note { id, text } => {
            let case = c
                .recovery()
                .note_case(&id, &NoteCase { text })
                .await
                .with_context(|| format!("note on case {id}"))?;
            changed(ctx, &case, "noted")?;
        }
        CaseCommand::Diagnose { id, diagnosis } => {
            let case = c
                .recovery()
                .diagnose_case(&id, &diagnosis.request())
                .await
                .with_context(|| format!("diagnose case {id}"))?;
            changed(ctx, &case, "diagnosed")?;
        }
        CaseCommand::Correct { id, correction } => {
            let case = c
                .recovery()
                .correct_case(&id, &correction.request())
                .await
                .with_context(|| format!("record a correction on case {id}"))?;
            changed(ctx, &case, "corrected")?;
        }
        CaseCommand::Transform(a) => {
            let (body, body_encoding) = encode_body(read_input(&a.file)?);
            let req = TransformCase {
                body,
                body_encoding,
                transformation_version: a.version,
                changed_fields: a.changed_fields,
                authority: a.authority,
                equivalent: a.equivalent,
                addresses: a.addresses,
            };
            let case = c
                .recovery()
                .transform_case(&a.id, &req)
                .await
                .with_context(|| format!("record a transformation on case {}", a.id))?;
            changed(ctx, &case, "transformed")?;
        }
        CaseCommand::Test(a) => {
            let (fixture, fixture_encoding) = match &a.fixture {
                Some(path) => {
                    let (b, e) = encode_body(read_input(path)?);
                    (Some(b), e)
                }
                None => (None, BodyEncoding::default()),
            };
            let req = TestCase {
                correction_version: a.correction,
                fixture,
                fixture_encoding,
                destination: a.destination,
                send: a.send,
                outcome: a.outcome,
                evidence: a.evidence,
            };
            let case = c
                .recovery()
                .test_case(&a.id, &req)
                .await
                .with_context(|| format!("record a test on case {}", a.id))?;
            changed(ctx, &case, "tested")?;
        }
        CaseCommand::Reconcile { id } => {
            let case = c
                .recovery()
                .reconcile_case(&id)
                .await
                .with_context(|| format!("reconcile case {id}"))?;
            changed(ctx, &case, "reconciled")?;
        }
        CaseCommand::Close {
            id,
            state,
            evidence,
        } => {
            let case = c
                .recovery()
                .close_case(&id, &CloseCase { state, evidence })
                .await
                .with_context(|| format!("close case {id}"))?;
            changed(ctx, &case, "closed")?;
        }
        CaseCommand::Review {
            id,
            decision,
            extend,
            policy,
        } => {
            // The server's rule, checked before anything is sent.
            match (decision.as_str(), extend) {
                ("extend", None) => return Err(input_error("--decision extend needs --extend")),
                ("archive" | "delete", Some(_)) => {
                    return Err(input_error("only --decision extend takes --extend"));
                }
                _ => {}
            }
            let req = ReviewCase {
                decision,
                policy,
                extend_ms: extend,
            };
            let case = c
                .recovery()
                .review_case(&id, &req)
                .await
                .with_context(|| format!("review case {id}"))?;
            changed(ctx, &case, "reviewed")?;
        }
        CaseCommand::Replay { id } => {
            let case = c
                .recovery()
                .replay_case(&id)
                .await
                .with_context(|| format!("replay case {id}"))?;
            changed(ctx, &case, "replay admitted for")?;
        }
        CaseCommand::Group(g) => return super::case_group::run(ctx, g).await,
    }
    Ok(())
}

/// Prints a changed case: the wire JSON, or one line with where it stands now.
fn changed(ctx: &Ctx, case: &Case, verb: &str) -> anyhow::Result<()> {
    if ctx.json {
        return print_json(case);
    }
    let s = &case.summary;
    println!("{verb} {}: state {}, next {}", s.id, s.state, s.next);
    Ok(())
}

/// The live claim's owner, if any.
fn owner(s: &CaseSummary) -> Option<&str> {
    s.lease
        .as_ref()
        .filter(|l| l.live)
        .map(|l| l.owner.as_str())
}

/// The review deadline, marked when it has passed on an open case.
fn deadline(s: &CaseSummary) -> String {
    if s.overdue {
        format!("{} OVERDUE", s.review_deadline)
    } else {
        s.review_deadline.clone()
    }
}

/// One row per case.
pub fn list_table(cases: &[CaseSummary]) -> Table {
    let mut t = Table::new([
        "ID",
        "QUEUE",
        "STATE",
        "NEXT",
        "REASON",
        "TYPE",
        "OWNER",
        "REVIEW-BY",
    ]);
    for s in cases {
        t.row([
            s.id.clone(),
            s.queue.clone(),
            s.state.clone(),
            s.next.clone(),
            s.reason.clone(),
            or_dash(s.message_type.as_deref()),
            or_dash(owner(s)),
            deadline(s),
        ]);
    }
    t
}

/// Counts as `key: value` lines.
pub fn describe_counts(c: &CaseCounts) -> KeyValues {
    // The API counts messages without a type under "".
    let by_type: std::collections::BTreeMap<String, u64> = c
        .by_type
        .iter()
        .map(|(k, v)| {
            let k = if k.is_empty() { "(none)" } else { k.as_str() };
            (k.to_owned(), *v)
        })
        .collect();
    let mut kv = KeyValues::new();
    kv.add("total", c.total.to_string())
        .add("by state", counts_text(&c.by_state))
        .add("by reason", counts_text(&c.by_reason))
        .add("by type", counts_text(&by_type))
        .add("oldest opened", or_dash(c.oldest_opened_at.as_deref()));
    kv
}

/// `case show`: metadata, the record as pretty JSON, then the timeline, one line per
/// entry (`at actor state evidence`, named fields after it).
pub fn show_text(case: &Case) -> anyhow::Result<String> {
    let s = &case.summary;
    let mut kv = KeyValues::new();
    kv.add("id", s.id.clone())
        .add("queue", s.queue.clone())
        .add("state", s.state.clone())
        .add("next", s.next.clone())
        .add("reason", s.reason.clone())
        .add_opt("description", s.description.clone())
        .add_opt(
            "signature",
            Some(s.signature.clone()).filter(|s| !s.is_empty()),
        )
        .add("type", or_dash(s.message_type.as_deref()))
        .add("message id", s.message_id.clone())
        .add("intent", s.intent_id.clone())
        .add_opt("session", s.session_id.clone())
        .add("dead letter", s.record_id.clone())
        .add("route", s.route.clone())
        .add("evidence quality", s.evidence_quality.clone());
    match &s.lease {
        Some(l) if l.live => kv.add("owner", format!("{} until {}", l.owner, l.until)),
        Some(l) => kv.add(
            "owner",
            format!("- (claim of {} ran out {})", l.owner, l.until),
        ),
        None => kv.add("owner", "-"),
    };
    kv.add("review by", deadline(s))
        .add("dead-lettered at", s.dead_lettered_at.clone())
        .add("opened at", s.opened_at.clone())
        .add_opt("closed at", s.closed_at.clone())
        .add_opt("valid until", s.valid_until.clone())
        .add_opt("source", s.source.clone())
        .add_opt("subject", s.subject.clone())
        .add(
            "payload",
            format!("{} bytes, sha256 {}", s.payload_size, s.payload_sha256),
        )
        .add_opt("payload deleted at", s.payload_deleted_at.clone())
        .add("deliveries", s.delivery_count.to_string())
        .add(
            "policy version",
            s.policy_version
                .map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
        )
        .add_opt("route rule", s.route_rule.clone())
        .add_opt("consumer", s.consumer.clone())
        .add_opt("rule version", s.rule_version.clone())
        .add("version", s.version.to_string());
    let mut out = kv.render();
    out.push_str("record:\n");
    let record = serde_json::to_string_pretty(&case.record)?;
    for line in record.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("timeline:\n");
    for e in &case.timeline {
        let mut line = format!("  {}  {}  {}  {}", e.at, e.actor, e.state, e.evidence);
        for (k, v) in &e.fields {
            line.push_str(&format!("  {k}={v}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// Runs `intent …`.
pub async fn run_intent(ctx: &Ctx, cmd: IntentCommand) -> anyhow::Result<()> {
    let c = &ctx.client;
    let intent = match cmd {
        IntentCommand::Show { id } => c
            .recovery()
            .get_intent(&id)
            .await
            .with_context(|| format!("show intent {id}"))?,
        IntentCommand::Cancel { id, reason, queue } => c
            .recovery()
            .cancel_intent(&id, &CancelIntent { reason, queue })
            .await
            .with_context(|| format!("cancel intent {id}"))?,
        IntentCommand::Supersede {
            id,
            by,
            reason,
            queue,
        } => c
            .recovery()
            .supersede_intent(&id, &SupersedeIntent { by, reason, queue })
            .await
            .with_context(|| format!("supersede intent {id}"))?,
    };
    if ctx.json {
        return print_json(&intent);
    }
    print!("{}", describe_intent(&intent).render());
    Ok(())
}

/// An intent as `key: value` lines.
pub fn describe_intent(i: &Intent) -> KeyValues {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            v.join(", ")
        }
    };
    let mut kv = KeyValues::new();
    kv.add("intent", i.intent_id.clone())
        .add("status", i.status.clone())
        .add_opt("superseded by", i.superseded_by.clone())
        .add_opt("reason", i.reason.clone())
        .add_opt("by", i.actor.clone())
        .add_opt("at", i.at.clone())
        .add_opt("for", i.entity.clone())
        .add("cases", list(&i.cases));
    if !i.closed.is_empty() {
        kv.add("closed now", list(&i.closed));
    }
    kv
}

/// Runs `effect-authority …`.
pub async fn run_effect_authority(ctx: &Ctx, cmd: EffectAuthorityCommand) -> anyhow::Result<()> {
    let c = &ctx.client;
    match cmd {
        EffectAuthorityCommand::List => {
            let list = c
                .recovery()
                .list_effect_authorities()
                .await
                .context("list effect authorities")?;
            if ctx.json {
                return print_json(&list);
            }
            if list.authorities.is_empty() {
                println!("no effect authorities");
            } else {
                print!("{}", authority_table(&list.authorities).render());
            }
        }
        EffectAuthorityCommand::Set {
            message_type,
            endpoint,
            timeout,
        } => {
            let req = SetEffectAuthority {
                url: endpoint,
                timeout_ms: timeout,
            };
            let a = c
                .recovery()
                .set_effect_authority(&message_type, &req)
                .await
                .with_context(|| format!("set the effect authority of {message_type}"))?;
            if ctx.json {
                return print_json(&a);
            }
            println!(
                "effect authority of {}: {} (timeout {})",
                a.message_type,
                a.url,
                format_duration_ms(a.timeout_ms)
            );
        }
        EffectAuthorityCommand::Delete { message_type } => {
            c.recovery()
                .delete_effect_authority(&message_type)
                .await
                .with_context(|| format!("delete the effect authority of {message_type}"))?;
            if ctx.json {
                return print_json(&serde_json::json!({ "deleted": message_type }));
            }
            println!("deleted the effect authority of {message_type}");
        }
    }
    Ok(())
}

/// One row per authority.
pub fn authority_table(list: &[EffectAuthority]) -> Table {
    let mut t = Table::new(["TYPE", "URL", "TIMEOUT", "UPDATED"]);
    for a in list {
        t.row([
            a.message_type.clone(),
            a.url.clone(),
            format_duration_ms(a.timeout_ms),
            a.updated_at.clone(),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> CaseSummary {
        CaseSummary {
            id: "case_1".to_owned(),
            record_id: "dl_1".to_owned(),
            queue: "orders".to_owned(),
            message_id: "m1".to_owned(),
            intent_id: "m1".to_owned(),
            message_type: None,
            session_id: None,
            reason: "BadInput".to_owned(),
            description: None,
            signature: String::new(),
            route: "application_quarantined".to_owned(),
            evidence_quality: "exact".to_owned(),
            state: "route_verified".to_owned(),
            next: "needs_diagnosis".to_owned(),
            lease: None,
            review_deadline: "2026-12-02T00:00:00Z".to_owned(),
            overdue: true,
            dead_lettered_at: "2026-12-01T00:00:00Z".to_owned(),
            opened_at: "2026-12-01T00:00:00Z".to_owned(),
            closed_at: None,
            valid_until: None,
            source: None,
            subject: None,
            payload_sha256: "ab".to_owned(),
            payload_size: 2,
            payload_deleted_at: None,
            delivery_count: 1,
            policy_version: Some(1),
            route_rule: Some("application".to_owned()),
            consumer: None,
            rule_version: None,
            version: 3,
        }
    }

    #[test]
    fn state_filters_are_checked_and_normalised() {
        assert_eq!(
            states("route_observed, diagnosis_proposed"),
            Ok("route_observed,diagnosis_proposed".to_owned())
        );
        assert!(states("route_observed,nonsense").is_err());
        assert_eq!(quality("exact"), Ok("exact".to_owned()));
        assert!(quality("great").is_err());
    }

    #[test]
    fn list_rows_mark_overdue_cases_and_only_live_owners() {
        let mut s = summary();
        s.lease = Some(redrive_api::case::CaseLease {
            owner: "alice".to_owned(),
            until: "2026-12-01T00:15:00Z".to_owned(),
            live: false,
        });
        let text = list_table(&[s]).render();
        let row = text.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "case_1",
                "orders",
                "route_verified",
                "needs_diagnosis",
                "BadInput",
                "-",
                "-",
                "2026-12-02T00:00:00Z",
                "OVERDUE"
            ]
        );
    }

    #[test]
    fn counts_name_the_untyped_messages() {
        let c = CaseCounts {
            total: 2,
            by_type: [("".to_owned(), 1), ("order.created".to_owned(), 1)].into(),
            ..CaseCounts::default()
        };
        let text = describe_counts(&c).render();
        assert!(
            text.contains("by type:        (none)=1, order.created=1\n"),
            "{text}"
        );
    }

    #[test]
    fn show_prints_the_timeline_one_line_per_entry() {
        let case = Case {
            summary: summary(),
            record: serde_json::json!({"route": {"rule": "application"}}),
            timeline: vec![redrive_api::case::CaseEntry {
                at: "2026-12-01T00:00:00Z".to_owned(),
                actor: "broker".to_owned(),
                state: "route_observed".to_owned(),
                evidence: "dead-lettered by the application".to_owned(),
                fields: [("reason".to_owned(), "BadInput".to_owned())].into(),
            }],
        };
        let text = show_text(&case).unwrap();
        assert!(
            text.contains(
                "  2026-12-01T00:00:00Z  broker  route_observed  dead-lettered by the application  reason=BadInput\n"
            ),
            "{text}"
        );
        assert!(text.contains("\"rule\": \"application\""), "{text}");
    }
}
