// One recovery case (GET /v1/cases/{id}: the summary, what the broker recorded, the
// timeline), and the person's decisions on it, each the API's own call:
// claim, release, note, diagnosis, correction, isolated test, reconcile, replay, close,
// review. Every POST answers the whole case after the change, which is drawn again; a
// refusal is shown beside its form with the problem document's title and detail.

const CORRECTION_KINDS = ["code", "config", "data", "permission", "dependency", "policy"];
const MAX_TEXT = 4096;

// What a value of the record looks like on the page: text for scalars, a list of facts
// for an object, a table for a list of objects.
function show(h, v) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "object") return String(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return "none";
    if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
      const keys = [];
      for (const row of v) for (const k of Object.keys(row)) if (!keys.includes(k)) keys.push(k);
      const t = h("table", {});
      const head = h("tr", {});
      for (const k of keys) head.append(h("th", { scope: "col" }, k));
      t.append(h("thead", {}, head));
      const body = h("tbody", {});
      for (const row of v) {
        const tr = h("tr", {});
        for (const k of keys) tr.append(h("td", {}, show(h, row[k])));
        body.append(tr);
      }
      t.append(body);
      return h("div", { class: "table-wrap" }, t);
    }
    return v.map((x) => (typeof x === "object" ? JSON.stringify(x) : String(x))).join(", ");
  }
  const keys = Object.keys(v);
  if (keys.length === 0) return "none";
  const dl = h("dl", { class: "pairs" });
  for (const k of keys) dl.append(h("dt", {}, k), h("dd", {}, show(h, v[k])));
  return dl;
}

function facts(h, pairs) {
  const dl = h("dl", { class: "pairs" });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(h("dt", {}, k), h("dd", {}, v));
  }
  return dl;
}

export async function render(root, ctx) {
  const { h, problem, field, formatTime, formatBytes, link, confirm } = ctx.ui;
  const id = ctx.params.id;
  const path = `/v1/cases/${encodeURIComponent(id)}`;

  const status = h("p", { role: "status", class: "rc-status", "aria-live": "polite" });
  const body = h("div", {});
  root.append(h("h1", { class: "rc-wrap" }, `Case ${id}`), status, body);

  let current;

  function draw(c) {
    current = c;
    body.replaceChildren(...view(c));
  }

  async function load() {
    try {
      draw(await ctx.api("GET", path));
    } catch (err) {
      body.replaceChildren(problem(err), h("p", {}, link("#/cases", "Back to the cases")));
    }
  }

  // One decision: a form whose submit makes the call and draws the answer; a refusal
  // stays beside the form, readable.
  function action(title, help, controls, submitLabel, call, opts = {}) {
    return ctx.ui.actionForm({
      title, help, controls, submitLabel, call, ...opts,
      confirm: typeof opts.confirm === "string" ? () => opts.confirm : opts.confirm,
      done: (c) => {
        draw(c);
        status.textContent = `${title}: done. State ${c.state}; next ${c.next}.`;
      },
      refused: () => {
        status.textContent = `${title}: refused.`;
      },
    });
  }

  const post = (suffix, payload) => ctx.api("POST", `${path}/${suffix}`, payload === undefined ? {} : { body: payload });

  function textArea(name, required = true) {
    const t = h("textarea", { name, maxlength: String(MAX_TEXT), rows: "3" });
    if (required) t.required = true;
    return t;
  }
  function textInput(name, required = true) {
    const i = h("input", { type: "text", name, maxlength: "256" });
    if (required) i.required = true;
    return i;
  }

  function actions(c) {
    const out = [];
    const mine = c.lease && c.lease.live && ctx.whoami && c.lease.owner === ctx.whoami.actor;

    // Claim / release.
    const lease = h("input", { type: "number", name: "lease_minutes", min: "1", max: "1440", step: "1" });
    out.push(
      action("Claim", mine ? "You hold the claim; claiming again renews it." : "Take ownership: only the holder of a live claim diagnoses, corrects, tests, replays, closes or reviews.",
        [field("Claim for (minutes; empty: the server's default)", lease)], mine ? "Renew claim" : "Claim",
        () => post("claim", lease.value ? { lease_ms: Math.round(Number(lease.value) * 60000) } : {})),
    );
    out.push(action("Release", "Give the claim back.", [], "Release", () => post("release"), { plain: true }));

    const hyp = textArea("hypothesis");
    const dis = textArea("disconfirming_evidence");
    out.push(
      action("Diagnose", "A hypothesis and what would prove it wrong, kept apart from the observed failure.",
        [field("Hypothesis", hyp), field("Disconfirming evidence", dis)], "Record diagnosis",
        () => post("diagnosis", { hypothesis: hyp.value, disconfirming_evidence: dis.value })),
    );

    const kind = h("select", { name: "kind" });
    for (const k of CORRECTION_KINDS) kind.append(h("option", { value: k }, k));
    const identity = textInput("identity");
    const addresses = textArea("addresses");
    out.push(
      action("Correct", "One versioned correction that claims to address the failure.",
        [field("Correction kind", kind), field("Correction identity (commit, config version, ticket)", identity),
          field("Failure shape it addresses", addresses)], "Record correction",
        () => post("corrections", { kind: kind.value, identity: identity.value, addresses: addresses.value })),
    );

    // A deterministic transformation of the payload (a data correction): the new bytes,
    // what changed and who permits it. A non-equivalent one is a new intent and is never
    // replayed (the API says so on the case).
    const tBody = h("textarea", { name: "body", maxlength: String(256 * 1024), rows: "5", required: true });
    const tEncoding = h("select", { name: "body_encoding" });
    for (const e of ["utf8", "base64"]) tEncoding.append(h("option", { value: e }, e));
    const tVersion = textInput("transformation_version");
    const tFields = textInput("changed_fields");
    const tAuthority = textInput("authority");
    const tEquivalent = h("input", { type: "checkbox", name: "equivalent", checked: true });
    const tAddresses = textArea("addresses");
    out.push(
      action("Transform", "Record transformed bytes for this case: a deterministic change under a named authority. The exact original stays; a test or replay then uses the latest transformation.",
        [field("Transformed payload", tBody), field("Transformed payload encoding", tEncoding),
          field("Transformation version", tVersion), field("Changed fields (comma-separated)", tFields),
          field("Authority that permits the change", tAuthority),
          field("The intent stays equivalent", tEquivalent),
          field("Failure shape the transformation addresses", tAddresses)], "Record transformation",
        () => post("transformations", {
          body: tBody.value,
          body_encoding: tEncoding.value,
          transformation_version: tVersion.value.trim(),
          changed_fields: tFields.value.split(",").map((x) => x.trim()).filter((x) => x),
          authority: tAuthority.value.trim(),
          equivalent: tEquivalent.checked,
          addresses: tAddresses.value,
        })),
    );

    const dest = textInput("destination");
    const outcome = h("select", { name: "outcome" });
    for (const o of ["pass", "fail"]) outcome.append(h("option", { value: o }, o));
    const evidence = textArea("evidence");
    const send = h("input", { type: "checkbox", name: "send" });
    const version = h("input", { type: "number", name: "correction_version", min: "1", step: "1" });
    out.push(
      action("Isolated test", "Test the correction on this exact payload at a test sandbox queue (never the case's queue).",
        [field("Sandbox queue", dest), field("Send the payload to the sandbox now", send),
          field("Test outcome", outcome), field("Test evidence", evidence),
          field("Correction version (empty: the latest)", version)], "Record test",
        () => {
          const b = { destination: dest.value.trim(), outcome: outcome.value, evidence: evidence.value, send: send.checked };
          if (version.value) b.correction_version = Number(version.value);
          return post("tests", b);
        }),
    );

    out.push(
      action("Reconcile", "Ask the message type's effect authority now whether the effect happened.", [],
        "Ask the effect authority", () => post("reconcile")),
    );

    out.push(
      action("Replay", "Admit one replay of the exact payload to the case's queue (role replayer, with your live claim). The broker checks every gate again first.",
        [], "Replay once", () => post("replay"),
        { confirm: () => `Send one replay of case ${id} to ${current.queue}?` }),
    );

    const note = textArea("text");
    out.push(action("Note", "A note on the timeline; needs no claim.", [field("Note", note)], "Add note",
      () => post("notes", { text: note.value })));

    const closeState = h("select", { name: "state" });
    for (const s of ["rejected", "indeterminate", "completed"]) closeState.append(h("option", { value: s }, s));
    const closeEvidence = textArea("evidence");
    out.push(
      action("Close", "A terminal state a person decides: rejected, or indeterminate (completed only where no effect authority answers for the type). Nothing is appended after it.",
        [field("Close as", closeState), field("Close evidence", closeEvidence)], "Close case",
        () => post("close", { state: closeState.value, evidence: closeEvidence.value }),
        { danger: true, confirm: () => `Close case ${id} as ${closeState.value}? A closed case takes no more decisions.` }),
    );

    const decision = h("select", { name: "decision" });
    for (const d of ["extend", "archive", "delete"]) decision.append(h("option", { value: d }, d));
    const policy = textInput("policy");
    const extend = h("input", { type: "number", name: "extend_hours", min: "1", max: "720", step: "1" });
    out.push(
      action("Review", "Once the review deadline has passed: archive, delete (closes indeterminate) or extend, under a named policy.",
        [field("Review decision", decision), field("Review policy", policy), field("Extend by (hours; extend only)", extend)],
        "Record review",
        () => {
          const b = { decision: decision.value, policy: policy.value };
          if (decision.value === "extend" && extend.value) b.extend_ms = Math.round(Number(extend.value) * 3600000);
          return post("review", b);
        },
        {
          danger: true,
          confirm: () => (decision.value === "extend" ? "" : `${decision.value} case ${id}? It closes indeterminate.`),
        }),
    );
    return out;
  }

  // The exact payload is a separate read: payload-reader on the case's queue, written to
  // the audit log (case.payload_read) before the bytes come back. Never part of the view.
  function payloadReveal(c) {
    if (c.payload_deleted_at) return h("p", { class: "muted" }, "The payload bytes were deleted under the retention rule; the digest stays.");
    const box = h("div", {});
    const reveal = h("button", { type: "button", class: "btn" }, "Reveal case payload");
    reveal.addEventListener("click", async () => {
      reveal.disabled = true;
      try {
        const p = await ctx.api("GET", `${path}/payload`);
        let text = p.body;
        if (p.body_encoding === "utf8") {
          try {
            text = JSON.stringify(JSON.parse(p.body), null, 2);
          } catch {
            // Not JSON: shown as it is.
          }
        }
        box.replaceChildren(
          h("p", { class: "muted" }, `Payload (${p.body_encoding}, SHA-256 ${p.sha256}); this read is recorded in the audit log.`),
          h("pre", { class: "payload", tabindex: "0", "aria-label": "Case payload" }, text),
        );
        reveal.remove();
      } catch (err) {
        box.replaceChildren(problem(err));
        reveal.disabled = false;
      }
    });
    return h("div", {}, h("p", { class: "muted" }, "The payload is shown only when asked for (role payload-reader; the read is audited)."), reveal, box);
  }

  function view(c) {
    const rec = c.record || {};
    const parts = [];
    const marks = [];
    if (c.overdue) marks.push(h("span", { class: "badge badge-warn" }, "overdue"));
    if (c.state === "escalated" || c.next.startsWith("escalate:")) marks.push(h("span", { class: "badge badge-bad" }, "escalated"));
    parts.push(
      h("section", { "aria-label": "Decision", class: "panel" },
        h("p", { class: "rc-big" }, "State ", h("strong", {}, c.state), " — next: ", h("strong", {}, c.next), " ", ...marks),
        h("p", {},
          link(`#/cases?queue=${encodeURIComponent(c.queue)}`, `Cases of ${c.queue}`), " · ",
          link(`#/dead-letters/${encodeURIComponent(c.queue)}`, `Dead letters of ${c.queue}`), " · ",
          c.state === "replay_eligible" || c.next === "replay_eligible"
            ? link(`#/plans?queue=${encodeURIComponent(c.queue)}&case=${encodeURIComponent(c.id)}`, "Plan a bounded replay of this case")
            : "")),
    );
    parts.push(
      h("section", { class: "panel", "aria-labelledby": "rc-ev-h" }, h("h2", { id: "rc-ev-h" }, "Evidence"),
        facts(h, [
          ["Queue", c.queue],
          ["Dead-letter record", c.record_id],
          ["Message id", c.message_id],
          ["Intent", c.intent_id],
          ["Type", c.message_type],
          ["Session", c.session_id],
          ["Source", c.source],
          ["Subject", c.subject],
          ["Reason", c.reason],
          ["Description", c.description],
          ["Failure signature", c.signature],
          ["Route", c.route],
          ["Route rule", c.route_rule],
          ["Policy version", c.policy_version === undefined ? undefined : String(c.policy_version)],
          ["Consumer", c.consumer],
          ["Rule version", c.rule_version],
          ["Evidence quality", c.evidence_quality],
          ["Deliveries", String(c.delivery_count)],
          ["Payload SHA-256", c.payload_sha256],
          ["Payload size", formatBytes(c.payload_size)],
          ["Payload deleted", c.payload_deleted_at ? formatTime(c.payload_deleted_at) : undefined],
          ["Owner", c.lease ? `${c.lease.owner} until ${formatTime(c.lease.until)}${c.lease.live ? "" : " (ended)"}` : "nobody"],
          ["Review by", formatTime(c.review_deadline)],
          ["Value window ends", c.valid_until ? formatTime(c.valid_until) : undefined],
          ["Dead-lettered", formatTime(c.dead_lettered_at)],
          ["Opened", formatTime(c.opened_at)],
          ["Closed", c.closed_at ? formatTime(c.closed_at) : undefined],
          ["Version", String(c.version)],
        ]),
        payloadReveal(c)),
    );
    if (rec.route) parts.push(h("section", { class: "panel", "aria-labelledby": "rc-route-h" }, h("h2", { id: "rc-route-h" }, "Route evidence"), show(h, rec.route)));
    parts.push(
      h("section", { class: "panel", "aria-labelledby": "rc-effect-h" }, h("h2", { id: "rc-effect-h" }, "Effect authority"),
        rec.effect ? show(h, rec.effect) : h("p", {}, "No answer recorded.")),
    );
    for (const [key, title] of [
      ["diagnoses", "Diagnoses"], ["corrections", "Corrections"], ["transformations", "Transformations"],
      ["tests", "Isolated tests"], ["replays", "Replays"], ["reviews", "Review decisions"], ["notes", "Notes"],
    ]) {
      const v = rec[key];
      parts.push(h("section", { class: "panel", "aria-labelledby": `rc-${key}-h` }, h("h2", { id: `rc-${key}-h` }, title),
        v && (!Array.isArray(v) || v.length) ? show(h, v) : h("p", { class: "muted" }, "None yet.")));
    }
    if (rec.context && Object.keys(rec.context).length) {
      parts.push(h("section", { class: "panel", "aria-labelledby": "rc-ctx-h" }, h("h2", { id: "rc-ctx-h" }, "Redacted context"), show(h, rec.context)));
    }
    parts.push(
      h("section", { class: "panel", "aria-labelledby": "rc-tl-h" }, h("h2", { id: "rc-tl-h" }, "Timeline"),
        ctx.ui.table(
          [
            { label: "When", render: (e) => formatTime(e.at) },
            { label: "Who", render: (e) => e.actor },
            { label: "State", render: (e) => e.state },
            { label: "Evidence", render: (e) => e.evidence, class: "wrap" },
            { label: "Fields", render: (e) => Object.entries(e.fields || {}).map(([k, v]) => `${k} ${v}`).join("; "), class: "wrap" },
          ],
          c.timeline,
          { caption: "Timeline, oldest first", empty: "No entries." },
        )),
    );
    const acts = h("div", { class: "grid" });
    parts.push(h("section", { class: "panel", "aria-labelledby": "rc-act-h" }, h("h2", { id: "rc-act-h" }, "Decisions"), acts));
    if (c.closed_at) {
      acts.append(h("p", {}, `Closed ${c.state} at ${formatTime(c.closed_at)}: nothing more is appended.`));
    } else {
      acts.append(...actions(c));
    }
    const refresh = h("button", { type: "button", class: "btn" }, "Refresh case");
    refresh.addEventListener("click", () => load());
    parts.push(h("p", {}, refresh));
    return parts;
  }

  await load();
}
