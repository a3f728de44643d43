// Recovery cases: the list (GET /v1/cases) with the filters the API takes, the counts
// of the same selection (GET /v1/cases/counts), and the case groups (GET /v1/case-groups).
// Every filter lives in the hash query (#/cases?state=escalated&owner=alice), so a
// filtered list can be linked to and reloaded.

const STATES = [
  "route_observed", "route_verified", "attempts_approximate", "payload_preserved",
  "access_authorized", "intent_active", "value_valid", "effect_absent", "effect_present",
  "effect_indeterminate", "failure_classified", "diagnosis_proposed",
  "correction_identified", "correction_isolated", "replay_eligible", "replay_admitted",
  "replay_stopped", "retained", "escalated", "completed", "cancelled", "superseded",
  "expired", "rejected", "indeterminate",
];

const QUALITIES = ["exact", "approximate", "incomplete", "unavailable"];

// The text filters: query parameter, label.
const TEXT_FILTERS = [
  ["queue", "Queue"],
  ["owner", "Owner"],
  ["intent", "Intent id"],
  ["reason", "Reason code"],
  ["type", "Message type"],
  ["source", "Source"],
  ["q", "Description contains"],
];

const PAGE_SIZE = 50;

// The parameters GET /v1/cases and /v1/cases/counts take (they refuse any other).
const API_PARAMS = [
  "queue", "reason", "type", "source", "subject", "state", "open", "owner", "overdue",
  "from", "to", "evidence_quality", "q", "intent",
];

// The query the API gets: only the filters that are set.
function apiQuery(query) {
  const out = {};
  for (const k of API_PARAMS) {
    const v = query.get(k);
    if (v) out[k] = v;
  }
  return out;
}

function caseMarks(h, c) {
  const marks = [];
  if (c.overdue) marks.push(h("span", { class: "badge badge-warn" }, "overdue"));
  if (c.state === "escalated" || c.next.startsWith("escalate:")) {
    marks.push(h("span", { class: "badge badge-bad" }, "escalated"));
  }
  if (c.closed_at) marks.push(h("span", { class: "badge" }, "closed"));
  return marks;
}

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, link } = ctx.ui;
  const query = ctx.query;

  root.append(ctx.ui.header("Recovery cases"));
  root.append(
    h(
      "p",
      {},
      "Every dead letter is a case: what is known about it and the one decision it waits for. ",
      "Overdue and escalated cases are marked.",
    ),
  );

  // ---- filters -------------------------------------------------------------------
  const inputs = {};
  const form = h("form", { class: "filters rc-form", "aria-label": "Case filters" });
  const stateSelect = h("select", { name: "state" });
  stateSelect.append(h("option", { value: "" }, "any state"));
  for (const s of STATES) stateSelect.append(h("option", { value: s }, s));
  stateSelect.value = query.get("state") || "";
  inputs.state = stateSelect;
  form.append(field("State", stateSelect));

  for (const [name, label] of TEXT_FILTERS) {
    const i = h("input", { type: "text", name, maxlength: "256" });
    i.value = query.get(name) || "";
    inputs[name] = i;
    form.append(field(label, i));
  }

  const quality = h("select", { name: "evidence_quality" });
  quality.append(h("option", { value: "" }, "any quality"));
  for (const q of QUALITIES) quality.append(h("option", { value: q }, q));
  quality.value = query.get("evidence_quality") || "";
  inputs.evidence_quality = quality;
  form.append(field("Evidence quality", quality));

  for (const [name, label] of [["from", "Dead-lettered from (local time)"], ["to", "Dead-lettered before (local time)"]]) {
    const i = h("input", { type: "datetime-local", name });
    i.value = ctx.ui.toLocalInput(query.get(name));
    inputs[name] = i;
    form.append(field(label, i));
  }

  const open = h("input", { type: "checkbox", name: "open" });
  // Open cases by default; `open=false` in the hash lists closed ones too.
  open.checked = query.get("open") !== "false";
  form.append(field("Open cases only", open));
  const overdue = h("input", { type: "checkbox", name: "overdue" });
  overdue.checked = query.get("overdue") === "true";
  form.append(field("Overdue only", overdue));

  form.append(
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "btn btn-primary" }, "Apply filters"),
      h("button", { type: "reset", class: "btn" }, "Clear filters"),
    ),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [name, i] of Object.entries(inputs)) {
      const v = name === "from" || name === "to" ? ctx.ui.fromLocalInput(i.value) : i.value.trim();
      if (v) q.set(name, v);
    }
    q.set("open", open.checked ? "true" : "false");
    if (overdue.checked) q.set("overdue", "true");
    ctx.navigate(`#/cases?${q}`);
  });
  form.addEventListener("reset", (ev) => {
    ev.preventDefault();
    ctx.navigate("#/cases");
  });
  root.append(form);

  // The selection as the API reads it.
  const sel = apiQuery(query);
  if (!query.has("open")) sel.open = "true";
  if (sel.open === "false") delete sel.open;

  // ---- counts --------------------------------------------------------------------
  const counts = h("section", { "aria-label": "Counts of the selection" });
  root.append(counts);
  ctx.api("GET", "/v1/cases/counts", { query: sel }).then(
    (c) => {
      counts.append(h("p", {}, `${c.total} case${c.total === 1 ? "" : "s"} match`,
        c.oldest_opened_at ? `; the oldest opened ${formatTime(c.oldest_opened_at)}` : "", "."));
      const chips = h("ul", { class: "rc-chips", "aria-label": "By state" });
      for (const [s, n] of Object.entries(c.by_state)) {
        const q = new URLSearchParams(query);
        q.set("state", s);
        q.delete("cursor");
        chips.append(h("li", {}, link(`#/cases?${q}`, `${s}: ${n}`)));
      }
      counts.append(chips);
    },
    // Counts over every queue need an unscoped grant: a scoped operator still gets the list.
    (err) => counts.append(h("p", { class: "muted" }, `Counts unavailable: ${err.detail || err.title || err.message}`)),
  );

  // ---- the list ------------------------------------------------------------------
  const listBox = h("section", { "aria-label": "Cases" });
  root.append(listBox);
  const cursor = query.get("cursor");
  try {
    const page = await ctx.api("GET", "/v1/cases", {
      query: { ...sel, limit: String(PAGE_SIZE), ...(cursor ? { cursor } : {}) },
    });
    listBox.append(
      table(
        [
          { label: "Case", render: (c) => link(`#/case/${encodeURIComponent(c.id)}`, c.id) },
          { label: "Queue", render: (c) => c.queue },
          { label: "State", render: (c) => h("span", {}, c.state, " ", ...caseMarks(h, c)) },
          { label: "Next decision", render: (c) => c.next },
          { label: "Reason", render: (c) => c.reason },
          { label: "Type", render: (c) => c.message_type || "—" },
          { label: "Intent", render: (c) => c.intent_id },
          {
            label: "Owner",
            render: (c) => (c.lease ? `${c.lease.owner}${c.lease.live ? "" : " (claim ended)"}` : "—"),
          },
          {
            label: "Review by",
            render: (c) => h("span", { class: c.overdue ? "rc-warn-text" : "" }, formatTime(c.review_deadline)),
          },
          { label: "Dead-lettered", render: (c) => formatTime(c.dead_lettered_at) },
        ],
        page.cases,
        { caption: "Cases", empty: "No case matches these filters." },
      ),
    );
    const nav = h("nav", { class: "actions", "aria-label": "Case pages" });
    if (cursor) {
      const q = new URLSearchParams(query);
      q.delete("cursor");
      nav.append(link(`#/cases?${q}`, "First page"));
    }
    if (page.next_cursor) {
      const q = new URLSearchParams(query);
      q.set("cursor", page.next_cursor);
      nav.append(link(`#/cases?${q}`, "Next page"));
    }
    listBox.append(nav);
  } catch (err) {
    listBox.append(problem(err));
  }

  // ---- case groups ---------------------------------------------------------------
  const groups = h("section", { class: "panel", "aria-labelledby": "rc-groups-h" });
  groups.append(h("h2", { id: "rc-groups-h" }, "Case groups"));
  groups.append(
    h("p", { class: "muted" },
      "A group is the cases of one queue worked as one: one decision carried out on each member. ",
      "A replay plan can take a group's members as its items."),
  );
  root.append(groups);
  try {
    const gq = { limit: "20" };
    if (sel.queue) gq.queue = sel.queue;
    const list = await ctx.api("GET", "/v1/case-groups", { query: gq });
    groups.append(
      table(
        [
          { label: "Group", render: (g) => link(`#/case-group/${encodeURIComponent(g.id)}`, g.id) },
          { label: "Queue", render: (g) => link(`#/cases?queue=${encodeURIComponent(g.queue)}`, g.queue) },
          {
            label: "Selection",
            render: (g) =>
              Object.entries(g.selection)
                .filter(([k, v]) => k !== "queue" && v)
                .map(([k, v]) => `${k}=${v}`)
                .join(", ") || "every open case",
          },
          { label: "Members", render: (g) => String(g.size) },
          { label: "Decisions", render: (g) => String(g.decisions) },
          { label: "Created", render: (g) => `${formatTime(g.created_at)} by ${g.created_by}` },
          { label: "Closed", render: (g) => (g.closed_at ? formatTime(g.closed_at) : "open") },
          {
            label: "Replay",
            render: (g) =>
              g.closed_at
                ? "—"
                : link(
                    `#/plans?group=${encodeURIComponent(g.id)}&queue=${encodeURIComponent(g.queue)}`,
                    `Plan a replay of ${g.id}`,
                  ),
          },
        ],
        list.groups,
        { caption: "Case groups", empty: "No case groups." },
      ),
    );
  } catch (err) {
    groups.append(problem(err));
  }
}
