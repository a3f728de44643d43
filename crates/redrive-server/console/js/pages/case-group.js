// One case group (GET /v1/case-groups/{id}): the cases of one queue worked as one. Its
// selection, its members as they are now (counts by state, each member's state and next
// decision), the decisions taken on it, and one decision at a time carried out on every
// member: claim, release, diagnose, correct, test, close — each the API's own call
// (POST /v1/case-groups/{id}/…), which answers the whole group with each member's
// outcome. A refusal of the whole call is shown beside its form; a member that refused
// the decision is listed with the API's reason.

const CORRECTION_KINDS = ["code", "config", "data", "permission", "dependency", "policy"];
const MAX_TEXT = 4096;

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, link } = ctx.ui;
  const id = ctx.params.id;
  const path = `/v1/case-groups/${encodeURIComponent(id)}`;

  const status = h("p", { role: "status", class: "rc-status", "aria-live": "polite" });
  const body = h("div", {});
  root.append(h("h1", { class: "rc-wrap" }, `Case group ${id}`), status, body);

  function draw(g) {
    body.replaceChildren(...view(g));
  }

  async function load() {
    try {
      draw(await ctx.api("GET", path));
    } catch (err) {
      body.replaceChildren(problem(err), h("p", {}, link("#/cases", "Back to the cases")));
    }
  }

  // The outcome of the decision just taken, member by member.
  function outcomeText(g) {
    const outs = g.outcomes || [];
    const ok = outs.filter((o) => o.ok).length;
    return `${ok} of ${outs.length} member${outs.length === 1 ? "" : "s"} took it`;
  }

  // One decision on every member: a form whose submit makes the call and draws the
  // answer; a refusal of the call stays beside the form.
  function action(title, help, controls, submitLabel, call, opts = {}) {
    return ctx.ui.actionForm({
      title, label: `Group: ${title}`, help, controls, submitLabel, call, ...opts,
      done: (g) => {
        draw(g);
        status.textContent = `${title}: ${outcomeText(g)}.`;
      },
      refused: () => {
        status.textContent = `${title}: refused.`;
      },
    });
  }

  const post = (suffix, payload) => ctx.api("POST", `${path}/${suffix}`, payload === undefined ? {} : { body: payload });

  function textArea(name) {
    return h("textarea", { name, maxlength: String(MAX_TEXT), rows: "3", required: true });
  }
  function textInput(name, required = true) {
    const i = h("input", { type: "text", name, maxlength: "256" });
    if (required) i.required = true;
    return i;
  }

  function actions() {
    const out = [];
    const lease = h("input", { type: "number", name: "lease_minutes", min: "1", max: "1440", step: "1" });
    out.push(
      action("Claim", "Take ownership of every member (a member another person holds refuses, and says so).",
        [field("Claim for (minutes; empty: the server's default)", lease)], "Claim the group",
        () => post("claim", lease.value ? { lease_ms: Math.round(Number(lease.value) * 60000) } : {})),
    );
    out.push(action("Release", "Give back the claims you hold on the members.", [], "Release the group",
      () => post("release"), { plain: true }));

    const hyp = textArea("hypothesis");
    const dis = textArea("disconfirming_evidence");
    out.push(
      action("Diagnose", "One hypothesis for every member, with what would prove it wrong.",
        [field("Group hypothesis", hyp), field("Group disconfirming evidence", dis)], "Record diagnosis on each",
        () => post("diagnosis", { hypothesis: hyp.value, disconfirming_evidence: dis.value })),
    );

    const kind = h("select", { name: "kind" });
    for (const k of CORRECTION_KINDS) kind.append(h("option", { value: k }, k));
    const identity = textInput("identity");
    const addresses = textArea("addresses");
    out.push(
      action("Correct", "One versioned correction recorded on every member.",
        [field("Group correction kind", kind), field("Group correction identity (commit, config version, ticket)", identity),
          field("Failure shape the correction addresses", addresses)], "Record correction on each",
        () => post("corrections", { kind: kind.value, identity: identity.value, addresses: addresses.value })),
    );

    const dest = textInput("destination");
    const send = h("input", { type: "checkbox", name: "send" });
    const outcome = h("select", { name: "outcome" });
    for (const o of ["pass", "fail"]) outcome.append(h("option", { value: o }, o));
    const failed = h("input", { type: "text", name: "failed", maxlength: "8192" });
    const evidence = textArea("evidence");
    out.push(
      action("Isolated test", "Test the correction on each member's exact payload at a test sandbox queue (sending needs payload-reader on the group's queue).",
        [field("Group sandbox queue", dest), field("Send each member's payload to the sandbox now", send),
          field("Outcome for the members not listed as failed", outcome),
          field("Members whose payload failed (case ids, comma-separated)", failed),
          field("Group test evidence", evidence)], "Record test on each",
        () => {
          const b = { destination: dest.value.trim(), send: send.checked, outcome: outcome.value, evidence: evidence.value };
          const f = failed.value.split(",").map((x) => x.trim()).filter((x) => x);
          if (f.length) b.failed = f;
          return post("tests", b);
        }),
    );

    const closeState = h("select", { name: "state" });
    for (const s of ["rejected", "indeterminate", "completed"]) closeState.append(h("option", { value: s }, s));
    const closeEvidence = textArea("evidence");
    out.push(
      action("Close", "Close every member in a terminal state a person decides, and the group with them.",
        [field("Close the members as", closeState), field("Group close evidence", closeEvidence)], "Close the group",
        () => post("close", { state: closeState.value, evidence: closeEvidence.value }),
        { danger: true, confirm: () => `Close every member of ${id} as ${closeState.value}? Closed cases take no more decisions.` }),
    );
    return out;
  }

  function view(g) {
    const parts = [];
    const sel = Object.entries(g.selection || {})
      .filter(([k, v]) => k !== "queue" && v)
      .map(([k, v]) => `${k}=${v}`)
      .join(", ") || "every open case";
    const chips = h("ul", { class: "rc-chips", "aria-label": "Members by state" });
    for (const [s, n] of Object.entries(g.by_state || {})) chips.append(h("li", {}, `${s}: ${n}`));
    parts.push(
      h("section", { class: "panel", "aria-label": "Group" },
        ctx.ui.dl([
          ["Queue", link(`#/cases?queue=${encodeURIComponent(g.queue)}`, g.queue)],
          ["Selection", sel],
          ["Members", String(g.size)],
          ["Created", `${formatTime(g.created_at)} by ${g.created_by}`],
          ["Closed", g.closed_at ? formatTime(g.closed_at) : "open"],
        ]),
        chips,
        g.closed_at
          ? ""
          : h("p", {}, link(`#/plans?group=${encodeURIComponent(g.id)}&queue=${encodeURIComponent(g.queue)}`,
            `Plan a bounded replay of ${g.id}`))),
    );
    if ((g.outcomes || []).length) {
      parts.push(
        h("section", { class: "panel", "aria-labelledby": "rc-out-h" }, h("h2", { id: "rc-out-h" }, "Outcome of the last decision"),
          table(
            [
              { label: "Case", render: (o) => link(`#/case/${encodeURIComponent(o.case_id)}`, o.case_id) },
              { label: "Result", render: (o) => (o.ok ? "done" : h("span", { class: "badge badge-bad" }, "refused")) },
              { label: "State", render: (o) => o.state || "—" },
              { label: "Next", render: (o) => o.next || "—" },
              { label: "Refused because", render: (o) => (o.ok ? "—" : `${o.code}${o.detail ? `: ${o.detail}` : ""}`), class: "wrap" },
            ],
            g.outcomes,
            { caption: "Each member's outcome", empty: "No members." },
          )),
      );
    }
    parts.push(
      h("section", { class: "panel", "aria-labelledby": "rc-mem-h" }, h("h2", { id: "rc-mem-h" }, "Members"),
        table(
          [
            { label: "Case", render: (c) => link(`#/case/${encodeURIComponent(c.id)}`, c.id) },
            { label: "State", render: (c) => c.state },
            { label: "Next decision", render: (c) => c.next },
            { label: "Reason", render: (c) => c.reason },
            { label: "Owner", render: (c) => (c.lease ? `${c.lease.owner}${c.lease.live ? "" : " (claim ended)"}` : "—") },
            { label: "Review by", render: (c) => formatTime(c.review_deadline) },
          ],
          g.cases || [],
          { caption: "Members as they are now", empty: "No members." },
        )),
    );
    parts.push(
      h("section", { class: "panel", "aria-labelledby": "rc-dec-h" }, h("h2", { id: "rc-dec-h" }, "Decisions taken"),
        table(
          [
            { label: "When", render: (d) => formatTime(d.at) },
            { label: "Who", render: (d) => d.actor },
            { label: "Decision", render: (d) => d.action },
            { label: "Applied", render: (d) => String(d.applied) },
            { label: "Refused", render: (d) => String(d.refused) },
            { label: "Fields", render: (d) => Object.entries(d.fields || {}).map(([k, v]) => `${k} ${v}`).join("; "), class: "wrap" },
          ],
          g.decisions || [],
          { caption: "Decisions, oldest first", empty: "None yet." },
        )),
    );
    const acts = h("div", { class: "grid" });
    parts.push(h("section", { class: "panel", "aria-labelledby": "rc-gact-h" }, h("h2", { id: "rc-gact-h" }, "Decide for the group"), acts));
    if (g.closed_at) {
      acts.append(h("p", {}, `Closed at ${formatTime(g.closed_at)}.`));
    } else {
      acts.append(...actions());
    }
    const refresh = h("button", { type: "button", class: "btn" }, "Refresh group");
    refresh.addEventListener("click", () => load());
    parts.push(h("p", {}, refresh));
    return parts;
  }

  await load();
}
