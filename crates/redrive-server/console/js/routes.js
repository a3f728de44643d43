// Every page of the console: its hash path (`#/<path>[/<param>][?query]`), its module
// (loaded on demand, so a page that fails to load breaks no other), its title, whether it
// is in the navigation, and the name of its one path parameter.
export const routes = [
  { path: "overview", module: "./pages/overview.js", title: "Overview", nav: true },
  { path: "failures", module: "./pages/failures.js", title: "Failures", nav: true },
  { path: "dead-letters", module: "./pages/dead-letters.js", title: "Dead letters", nav: true, param: "queue" },
  { path: "quarantine", module: "./pages/quarantine.js", title: "Quarantine", nav: true },
  { path: "topics", module: "./pages/topics.js", title: "Topics", nav: true },
  { path: "entity", module: "./pages/entity.js", title: "Entity", nav: false, param: "name" },
  { path: "cases", module: "./pages/cases.js", title: "Cases", nav: true },
  { path: "case", module: "./pages/case.js", title: "Case", nav: false, param: "id" },
  { path: "case-group", module: "./pages/case-group.js", title: "Case group", nav: false, param: "id" },
  { path: "plans", module: "./pages/plans.js", title: "Replay plans", nav: true },
  { path: "plan", module: "./pages/plan.js", title: "Replay plan", nav: false, param: "id" },
  { path: "audit", module: "./pages/audit.js", title: "Audit", nav: true },
  { path: "tokens", module: "./pages/tokens.js", title: "Tokens", nav: true },
];

/** The route a nav link marks as current for `path` (a detail page marks its list). */
export const navParent = { entity: "overview", case: "cases", "case-group": "cases", plan: "plans" };

/** The default page. */
export const home = "overview";
