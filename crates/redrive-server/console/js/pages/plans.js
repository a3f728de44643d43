// Replay plans: the list (GET /v1/replay/plans; SQS move tasks are plans of kind
// sqs_move), and a new plan: its selection, its budget (every limit named), the dry run
// (POST /v1/replay/plans/preview: what would be replayed, grouped, each item's blocking
// gate and when it clears, the lower bound of the time it takes), then "Create plan".
// The hash query seeds the selection: #/plans?queue=orders&group=grp_…&case=case_…,
// or &signature=… (from the failures page: the open cases of one failure shape).

const STATUSES = ["planned", "running", "paused", "stopped", "completed", "cancelled", "cancelling"];
const PAGE_SIZE = 50;

function list(s) {
  return s.split(",").map((x) => x.trim()).filter((x) => x);
}

// Milliseconds in words: "4 min 2 s".
export function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms} ms`;
  let s = Math.ceil(ms / 1000);
  const parts = [];
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) parts.push(`${d} d`);
  if (hr) parts.push(`${hr} h`);
  if (m) parts.push(`${m} min`);
  if (s || parts.length === 0) parts.push(`${s} s`);
  return parts.join(" ");
}

export function planProgress(p) {
  if (p.kind === "sqs_move" && p.sqs_move) return `${p.sqs_move.moved} of ${p.sqs_move.to_move} moved`;
  const g = p.progress;
  return `${g.completed + g.closed + g.stopped} of ${g.items} settled (${g.completed} completed, ${g.held} held)`;
}

export async function render(root, ctx) {
  const { h, table, problem, field, formatTime, formatBytes, link } = ctx.ui;
  const query = ctx.query;
  root.append(ctx.ui.header("Replay plans"));
  root.append(
    h("p", {},
      "A plan replays the open recovery cases of one queue that reached replay_eligible, under a budget that names every limit. ",
      "SQS message move tasks are listed here as plans of kind sqs_move."),
  );

  // ---- the list ------------------------------------------------------------------
  const filters = h("form", { class: "filters", "aria-label": "Plan filters" });
  const status = h("select", { name: "status" });
  status.append(h("option", { value: "" }, "any status"));
  for (const s of STATUSES) status.append(h("option", { value: s }, s));
  status.value = query.get("status") || "";
  const kind = h("select", { name: "kind" });
  for (const [v, t] of [["", "any kind"], ["cases", "cases"], ["sqs_move", "sqs_move (SQS move tasks)"]]) kind.append(h("option", { value: v }, t));
  kind.value = query.get("kind") || "";
  const fqueue = h("input", { type: "text", name: "list_queue", maxlength: "256" });
  fqueue.value = query.get("list_queue") || "";
  filters.append(field("Plan status", status), field("Plan kind", kind), field("Plans of queue", fqueue),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "btn" }, "Filter plans")));
  filters.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams(query);
    for (const [k, v] of [["status", status.value], ["kind", kind.value], ["list_queue", fqueue.value.trim()]]) {
      if (v) q.set(k, v); else q.delete(k);
    }
    q.delete("after");
    ctx.navigate(`#/plans?${q}`);
  });
  root.append(h("section", { class: "panel", "aria-labelledby": "rc-plans-h" }, h("h2", { id: "rc-plans-h" }, "Plans"), filters));
  const listBox = h("div", {});
  root.append(listBox);
  try {
    const lq = { limit: String(PAGE_SIZE) };
    if (status.value) lq.status = status.value;
    if (kind.value) lq.kind = kind.value;
    if (fqueue.value) lq.queue = fqueue.value;
    if (query.get("after")) lq.after = query.get("after");
    const page = await ctx.api("GET", "/v1/replay/plans", { query: lq });
    listBox.append(
      table(
        [
          { label: "Plan", render: (p) => link(`#/plan/${encodeURIComponent(p.id)}`, p.id) },
          { label: "Kind", render: (p) => p.kind },
          { label: "Queue", render: (p) => p.queue },
          { label: "Destination", render: (p) => p.destination || "each to its source" },
          { label: "Owner", render: (p) => p.owner },
          { label: "Status", render: (p) => h("span", { class: p.status === "stopped" ? "rc-bad-text" : "" }, p.status) },
          { label: "Progress", render: (p) => planProgress(p) },
          { label: "Stop reason", render: (p) => p.stop_reason || "—" },
          { label: "Created", render: (p) => formatTime(p.created_at) },
        ],
        page.plans,
        { caption: "Replay plans", empty: "No replay plans." },
      ),
    );
    const nav = h("nav", { class: "actions", "aria-label": "Plan pages" });
    if (query.get("after")) {
      const q = new URLSearchParams(query);
      q.delete("after");
      nav.append(link(`#/plans?${q}`, "First page of plans"));
    }
    if (page.plans.length === PAGE_SIZE) {
      const q = new URLSearchParams(query);
      q.set("after", page.plans[page.plans.length - 1].id);
      nav.append(link(`#/plans?${q}`, "Next page of plans"));
    }
    listBox.append(nav);
  } catch (err) {
    listBox.append(problem(err));
  }

  // ---- a new plan ----------------------------------------------------------------
  const section = h("section", { class: "panel", "aria-labelledby": "rc-new-h" });
  section.append(h("h2", { id: "rc-new-h" }, "New plan"));
  root.append(section);

  const inp = (name, attrs = {}) => h("input", { type: "text", name, maxlength: "2048", ...attrs });
  const queue = inp("queue");
  queue.value = query.get("queue") || "";
  const reasons = inp("reasons");
  reasons.value = query.get("reason") || "";
  const types = inp("types");
  types.value = query.get("type") || "";
  const from = h("input", { type: "datetime-local", name: "from" });
  const to = h("input", { type: "datetime-local", name: "to" });
  const caseIds = inp("case_ids");
  caseIds.value = query.get("case") || "";
  const group = inp("group");
  group.value = query.get("group") || "";
  const destination = inp("destination");
  const itemsPerS = h("input", { type: "number", name: "items_per_s", min: "0.001", max: "100000", step: "any", value: "1" });
  const bytesPerS = h("input", { type: "number", name: "bytes_per_s", min: "1024", max: "10737418240", step: "1", value: "65536" });
  const concurrent = h("input", { type: "number", name: "max_concurrent", min: "1", max: "1000", step: "1", value: "2" });
  const windowSize = h("input", { type: "number", name: "window", min: "1", max: "100000", step: "1", value: "10" });
  const depName = inp("dependency_name", { maxlength: "128" });
  const probe = h("input", { type: "url", name: "probe_url", maxlength: "2048" });
  const errRate = h("input", { type: "number", name: "max_error_rate", min: "0", max: "1", step: "any", value: "0.05" });
  const latency = h("input", { type: "number", name: "max_latency_ms", min: "1", max: "3600000", step: "1", value: "250" });
  const correction = inp("correction", { maxlength: "256" });
  const leaseMin = h("input", { type: "number", name: "lease_minutes", min: "1", max: "10080", step: "1" });
  const observeMs = h("input", { type: "number", name: "observe_ms", min: "100", max: "3600000", step: "1" });

  // A signature from the failures page (its id, hex) selects the cases of that failure
  // shape; its queue is the selection's queue.
  const signature = inp("signature", { maxlength: "128", pattern: "[0-9a-f]*" });
  signature.value = query.get("signature") || "";

  const form = h("form", { class: "rc-plan-form", "aria-label": "New plan" },
    h("fieldset", {}, h("legend", {}, "Selection: the open cases of one queue"),
      field("Queue (may be empty with a failure signature)", queue),
      field("Failure signature (from the failures page; not with a group or case ids)", signature),
      field("Case group (grp_…)", group),
      field("Reasons (comma-separated; empty: any)", reasons),
      field("Message types (comma-separated; empty: any)", types),
      field("Dead-lettered from (local time)", from),
      field("Dead-lettered before (local time)", to),
      field("Case ids (comma-separated; not with a group)", caseIds),
      field("Destination (empty: the queue the items came from)", destination)),
    h("fieldset", {}, h("legend", {}, "Budget: every limit named"),
      field("Items per second", itemsPerS),
      field("Bytes per second", bytesPerS),
      field("Concurrent deliveries", concurrent),
      field("Admission window (items)", windowSize),
      field("Dependency name", depName),
      field("Dependency probe URL", probe),
      field("Dependency max error rate (0 to 1)", errRate),
      field("Dependency max latency (ms)", latency)),
    h("fieldset", {}, h("legend", {}, "The plan (not needed for the dry run)"),
      field("Correction every item must carry (optional)", correction),
      field("Owner's lease (minutes; empty: 1 hour)", leaseMin),
      field("Observation window (ms; empty: 10 s)", observeMs)),
  );
  const previewBtn = h("button", { type: "submit", class: "btn btn-primary" }, "Preview (dry run)");
  const createBtn = h("button", { type: "button", class: "btn" }, "Create plan");
  form.append(h("div", { class: "actions" }, previewBtn, createBtn));
  const out = h("div", { "aria-live": "polite" });
  section.append(form, out);

  function spec() {
    const sel = { queue: queue.value.trim() };
    if (reasons.value.trim()) sel.reasons = list(reasons.value);
    if (types.value.trim()) sel.types = list(types.value);
    if (ctx.ui.fromLocalInput(from.value)) sel.from = ctx.ui.fromLocalInput(from.value);
    if (ctx.ui.fromLocalInput(to.value)) sel.to = ctx.ui.fromLocalInput(to.value);
    if (caseIds.value.trim()) sel.case_ids = list(caseIds.value);
    if (group.value.trim()) sel.group = group.value.trim();
    if (signature.value.trim()) sel.signature = signature.value.trim();
    const budget = {};
    const num = (i) => (i.value === "" ? undefined : Number(i.value));
    if (num(itemsPerS) !== undefined) budget.items_per_s = num(itemsPerS);
    if (num(bytesPerS) !== undefined) budget.bytes_per_s = num(bytesPerS);
    if (num(concurrent) !== undefined) budget.max_concurrent = num(concurrent);
    if (num(windowSize) !== undefined) budget.window = num(windowSize);
    // The dependency is one object; left out whole when nothing of it is filled in, so
    // the API names it as missing (replay_unbounded).
    if (depName.value || probe.value || errRate.value || latency.value) {
      budget.dependency = {
        name: depName.value.trim(),
        probe_url: probe.value.trim(),
        max_error_rate: num(errRate) ?? 0,
        max_latency_ms: num(latency) ?? 0,
      };
    }
    const body = { selection: sel, budget };
    if (destination.value.trim()) body.destination = destination.value.trim();
    return body;
  }

  function countsTable(title, m) {
    return table(
      [{ label: title, render: ([k]) => k || "(none)" }, { label: "Items", render: ([, v]) => String(v) }],
      Object.entries(m),
      { caption: `By ${title.toLowerCase()}`, empty: "None." },
    );
  }

  function drawPreview(p) {
    const items = p.item_list.map((i) => i);
    const heading = h("h3", { tabindex: "-1" }, "Dry run");
    out.replaceChildren(
      heading,
      h("p", { class: "rc-big" },
        `${p.items} item${p.items === 1 ? "" : "s"}, ${formatBytes(p.bytes)}; ${p.eligible} eligible now; `,
        `at least ${duration(p.lower_bound_ms)} under this budget.`),
      h("p", { class: "muted" }, "The duration is a lower bound: the slower of items ÷ items/s and bytes ÷ bytes/s, before processing, pauses and reconciliation. Nothing was touched."),
      h("div", { class: "grid" }, countsTable("Reason", p.by_reason), countsTable("Type", p.by_type)),
      table(
        [
          { label: "Gate", render: (g) => g.gate },
          { label: "What holds the items", render: (g) => g.detail },
          { label: "Items", render: (g) => String(g.items) },
          { label: "Clears at", render: (g) => (g.clears_at ? formatTime(g.clears_at) : "waits on a person or a condition") },
        ],
        p.gates || [],
        { caption: "Blocking gates", empty: "No gate blocks any item." },
      ),
      table(
        [
          { label: "Case", render: (i) => link(`#/case/${encodeURIComponent(i.case_id)}`, i.case_id) },
          { label: "Message", render: (i) => i.message_id },
          { label: "Reason", render: (i) => i.reason },
          { label: "Type", render: (i) => i.message_type || "—" },
          { label: "Bytes", render: (i) => formatBytes(i.bytes) },
          { label: "Blocked by", render: (i) => i.gate || "nothing: eligible" },
          { label: "Clears at", render: (i) => (i.clears_at ? formatTime(i.clears_at) : "—") },
        ],
        items,
        { caption: p.truncated ? `Items (the first ${items.length} of ${p.items})` : "Items", empty: "No open case matches the selection." },
      ),
    );
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    previewBtn.disabled = true;
    out.replaceChildren(h("p", { role: "status" }, "Running the dry run…"));
    try {
      drawPreview(await ctx.api("POST", "/v1/replay/plans/preview", { body: spec() }));
      // The answer is below the form: bring it into view, and keyboard focus with it.
      out.querySelector("h3").focus();
    } catch (err) {
      out.replaceChildren(problem(err));
    } finally {
      previewBtn.disabled = false;
    }
  });
  createBtn.addEventListener("click", async () => {
    const body = spec();
    if (correction.value.trim()) body.correction = correction.value.trim();
    if (leaseMin.value) body.lease_ms = Math.round(Number(leaseMin.value) * 60000);
    if (observeMs.value) body.observe_ms = Number(observeMs.value);
    createBtn.disabled = true;
    try {
      const plan = await ctx.api("POST", "/v1/replay/plans", { body });
      ctx.navigate(`#/plan/${encodeURIComponent(plan.id)}`);
    } catch (err) {
      out.replaceChildren(problem(err));
    } finally {
      createBtn.disabled = false;
    }
  });
}
