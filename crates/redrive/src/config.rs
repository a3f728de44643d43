//! The server's configuration: one `Config` tree, layered from built-in defaults, an
//! optional TOML file, `REDRIVE_*` environment variables and command-line flags (in
//! increasing precedence), validated once at load. Nothing else reads the environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::failure::input_error;
use crate::units::parse_duration_ms;

/// The built-in defaults, commented; `redrive serve --print-default-config` prints it.
pub const DEFAULT_TOML: &str = include_str!("config.default.toml");

/// Everything `redrive serve` is configured by.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Directory of the embedded database.
    pub data_dir: PathBuf,
    /// Storage URL; absent means SQLite in `data_dir`.
    pub store: Option<String>,
    /// Logging.
    pub log: LogConfig,
    /// The server's own settings (`[server]`).
    pub server: redrive_server::Settings,
    /// Address of the SQS-compatible endpoint (`IP:PORT`), or `off`.
    pub sqs_listen: String,
    /// The URL clients reach the SQS endpoint at (`https://sqs.example.com`), the base of
    /// the queue URLs it answers; absent: `http://` (`https://` with TLS) and the address it
    /// listens on, which must then name one host (not `0.0.0.0` or `[::]`). Never taken from
    /// a request's `Host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqs_public_url: Option<String>,
    /// Account id in SQS queue URLs and ARNs.
    pub sqs_account_id: String,
    /// Region in SQS queue ARNs.
    pub sqs_region: String,
    /// `ACCESS_KEY_ID:SECRET` pairs; when any is set, SQS requests must carry a valid
    /// Signature Version 4 by one of them (or, with authentication on, by an API token's
    /// SQS key). Empty: with authentication on, only the API tokens' SQS keys sign; off,
    /// any signature is accepted. Secret.
    pub sqs_access_keys: Vec<String>,
    /// Networks (`10.0.0.0/8`), addresses and host names push endpoints may be on besides
    /// public addresses: loopback, private, link-local and metadata addresses are refused
    /// unless listed here.
    pub push_allowed_networks: Vec<String>,
    /// A PEM bundle of extra certificate authorities that outgoing `https://` requests
    /// (push endpoints, effect authorities, probes, escalation webhooks) trust besides the
    /// platform's roots: a private CA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Authentication, rate limits and the audit log (`[auth]`).
    pub auth: AuthConfig,
    /// Automatic replay of dead letters (`[replay]`).
    pub replay: ReplayConfig,
    /// Recovery cases (`[cases]`).
    pub cases: CasesConfig,
    /// Bounded replay plans (`[replay_plans]`).
    pub replay_plans: ReplayPlansConfig,
}

/// `[replay_plans]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayPlansConfig {
    /// The failing-path window (milliseconds or `5m`; one second to 24 hours, default
    /// `5m`): a destination that dead-lettered an item's reason less than this long ago is
    /// the failing path for it until the window has passed over that dead letter.
    pub failing_path_window: String,
}

impl Default for ReplayPlansConfig {
    fn default() -> Self {
        ReplayPlansConfig {
            failing_path_window: "5m".to_owned(),
        }
    }
}

/// `[cases]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct CasesConfig {
    /// A claim's length when the caller names none (milliseconds or `15m`).
    pub claim: String,
    /// How long a closed case keeps its payload bytes unless a rule says otherwise
    /// (default `7d`); the digest and the timeline stay.
    pub payload_retention: String,
    /// Where escalations are also posted as JSON (optional; the push network policy
    /// applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalation_webhook: Option<String>,
    /// This node's labels, recorded in every case's source identity (`region`, `tenant`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Per-entity rules (`[[cases.rule]]`): the first that covers a queue applies.
    pub rule: Vec<CaseRuleItem>,
    /// Effect authorities registered at start (`[[cases.effect_authority]]`).
    pub effect_authority: Vec<EffectAuthorityItem>,
}

impl Default for CasesConfig {
    fn default() -> Self {
        CasesConfig {
            claim: "15m".to_owned(),
            payload_retention: "7d".to_owned(),
            escalation_webhook: None,
            labels: std::collections::BTreeMap::new(),
            rule: Vec::new(),
            effect_authority: Vec::new(),
        }
    }
}

/// One `[[cases.rule]]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CaseRuleItem {
    /// A queue name, or a prefix ending in `*`.
    pub entity: String,
    /// Review deadline after a case opens (default `24h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// How long a closed case keeps its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_retention: Option<String>,
    /// The redaction allowlist: `body.<json path>` and `properties.<name>`.
    #[serde(default)]
    pub redact_allow: Vec<String>,
}

/// One `[[cases.effect_authority]]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EffectAuthorityItem {
    /// The message type it answers for.
    pub message_type: String,
    /// The endpoint.
    pub url: String,
    /// How long an answer may take (default `5s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// The node-wide replay budget's item rate when the file names none.
pub const DEFAULT_NODE_ITEMS_PER_S: u32 = 1_000;
/// The node-wide replay budget's byte rate when the file names none (64 MiB/s).
pub const DEFAULT_NODE_BYTES_PER_S: u64 = 64 * 1024 * 1024;
/// The highest node-wide byte rate (1 GiB/s).
pub const MAX_NODE_BYTES_PER_S: u64 = 1024 * 1024 * 1024;

/// `[replay]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayConfig {
    /// Failed judgements of one dead letter after which it is flagged (metric, error log,
    /// `last_replay_error`); it is kept and still retried (default 10, 1 to 1000).
    pub flag_after_failures: u32,
    /// The node-wide replay budget: items per second admitted over every replay plan this
    /// node runs, whatever each plan's own budget (default 1000, 1 to 100000).
    pub max_items_per_s: u32,
    /// The node-wide replay budget: payload bytes per second admitted over every replay
    /// plan this node runs (default 64 MiB, 1 to 1 GiB).
    pub max_bytes_per_s: u64,
    /// The idempotency register entries the file states (`[[replay.register]]`), applied
    /// at start (see [`Config::register_entries`]).
    pub register: Vec<RegisterItem>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            flag_after_failures: redrive_core::judgement::DEFAULT_FLAG_AFTER_FAILURES,
            max_items_per_s: DEFAULT_NODE_ITEMS_PER_S,
            max_bytes_per_s: DEFAULT_NODE_BYTES_PER_S,
            register: Vec::new(),
        }
    }
}

/// One `[[replay.register]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegisterItem {
    /// A message type, or `<queue>:*` for that queue's messages without a type.
    pub key: String,
    /// `idempotent` or `not_idempotent`.
    pub answer: String,
    /// The ordering attribute a time-dependent handler needs (idempotent types only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_attribute: Option<String>,
}

/// `[auth]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Requests must carry an API token. Off: every caller may do everything, which is
    /// allowed only while every listener is on loopback.
    pub enabled: bool,
    /// An admin token's secret (`rdt_` and 64 hex digits) made sure of at start. Secret.
    pub bootstrap_token: Option<String>,
    /// Requests per second per token (0: unlimited).
    pub rate_limit_per_s: u32,
    /// Burst above the rate (requests).
    pub rate_limit_burst: u32,
    /// Audit entries older than this many days are removed (with a record in the log).
    pub audit_retention_days: u32,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            bootstrap_token: None,
            rate_limit_per_s: 0,
            rate_limit_burst: 0,
            audit_retention_days: redrive_broker::DEFAULT_AUDIT_RETENTION_DAYS,
        }
    }
}

impl AuthConfig {
    /// The broker's settings.
    pub fn access(&self) -> redrive_broker::AccessSettings {
        redrive_broker::AccessSettings {
            enabled: self.enabled,
            rate_limit_per_s: self.rate_limit_per_s,
            rate_limit_burst: self.rate_limit_burst,
            audit_retention_days: self.audit_retention_days,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 7474)),
            data_dir: PathBuf::from("./redrive-data"),
            store: None,
            log: LogConfig::default(),
            server: redrive_server::Settings::default(),
            sqs_listen: DEFAULT_SQS_LISTEN.to_owned(),
            sqs_public_url: None,
            sqs_account_id: "000000000000".to_owned(),
            sqs_region: "us-east-1".to_owned(),
            sqs_access_keys: Vec::new(),
            auth: AuthConfig::default(),
            push_allowed_networks: Vec::new(),
            ca_file: None,
            replay: ReplayConfig::default(),
            cases: CasesConfig::default(),
            replay_plans: ReplayPlansConfig::default(),
        }
    }
}

/// Default address of the SQS-compatible endpoint (the port SQS emulators use).
pub const DEFAULT_SQS_LISTEN: &str = "127.0.0.1:9324";

/// `[log]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing env-filter directive (`info`, `redrive_server=debug,info`).
    pub level: String,
    /// Line format.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("invalid log format {s:?} (expected text or json)")),
        }
    }
}

/// Values that replace the file's: one layer of environment variables or of flags.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `listen`.
    pub listen: Option<SocketAddr>,
    /// `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `store`.
    pub store: Option<String>,
    /// `log.level`.
    pub log_level: Option<String>,
    /// `log.format`.
    pub log_format: Option<LogFormat>,
    /// `server.sweep_interval_ms`.
    pub sweep_interval_ms: Option<u64>,
    /// `server.shutdown_timeout_ms`.
    pub shutdown_timeout_ms: Option<u64>,
    /// `sqs_listen` (`IP:PORT` or `off`).
    pub sqs_listen: Option<String>,
    /// `sqs_public_url`.
    pub sqs_public_url: Option<String>,
    /// `sqs_account_id`.
    pub sqs_account_id: Option<String>,
    /// `sqs_region`.
    pub sqs_region: Option<String>,
    /// `sqs_access_keys` (comma-separated in the environment).
    pub sqs_access_keys: Option<Vec<String>>,
    /// `auth.enabled`.
    pub auth_enabled: Option<bool>,
    /// `auth.bootstrap_token`.
    pub bootstrap_token: Option<String>,
    /// `push_allowed_networks` (comma-separated in the environment).
    pub push_allowed_networks: Option<Vec<String>>,
    /// `ca_file`.
    pub ca_file: Option<PathBuf>,
    /// `replay_plans.failing_path_window`.
    pub failing_path_window: Option<String>,
    /// `server.console`.
    pub console: Option<bool>,
}

impl Overrides {
    /// Reads the `REDRIVE_*` variables through `env` (empty values are ignored); a bad
    /// value is an error naming the variable.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Overrides> {
        let get = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let bad = |k: &str, why: String| input_error(format!("environment variable {k}: {why}"));
        let mut o = Overrides::default();
        if let Some(v) = get("REDRIVE_LISTEN") {
            o.listen = Some(parse_listen(&v).map_err(|e| bad("REDRIVE_LISTEN", e))?);
        }
        o.data_dir = get("REDRIVE_DATA_DIR").map(PathBuf::from);
        o.store = get("REDRIVE_STORE");
        if let Some(v) = get("REDRIVE_SQS_LISTEN") {
            parse_sqs_listen(&v).map_err(|e| bad("REDRIVE_SQS_LISTEN", e))?;
            o.sqs_listen = Some(v);
        }
        if let Some(v) = get("REDRIVE_SQS_PUBLIC_URL") {
            parse_public_url(&v).map_err(|e| bad("REDRIVE_SQS_PUBLIC_URL", e))?;
            o.sqs_public_url = Some(v);
        }
        o.sqs_account_id = get("REDRIVE_SQS_ACCOUNT_ID");
        o.sqs_region = get("REDRIVE_SQS_REGION");
        o.sqs_access_keys = get("REDRIVE_SQS_ACCESS_KEYS").map(|v| {
            v.split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect()
        });
        if let Some(v) = get("REDRIVE_AUTH_ENABLED") {
            o.auth_enabled = Some(match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    return Err(bad(
                        "REDRIVE_AUTH_ENABLED",
                        format!("{v:?} is not true or false"),
                    ));
                }
            });
        }
        o.bootstrap_token = get("REDRIVE_BOOTSTRAP_TOKEN");
        o.push_allowed_networks = get("REDRIVE_PUSH_ALLOWED_NETWORKS").map(|v| {
            v.split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect()
        });
        o.ca_file = get("REDRIVE_CA_FILE").map(PathBuf::from);
        if let Some(v) = get("REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW") {
            parse_millis(&v).map_err(|e| bad("REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW", e))?;
            o.failing_path_window = Some(v);
        }
        if let Some(v) = get("REDRIVE_SERVER_CONSOLE") {
            o.console = Some(parse_on_off(&v).map_err(|e| bad("REDRIVE_SERVER_CONSOLE", e))?);
        }
        o.log_level = get("REDRIVE_LOG");
        if let Some(v) = get("REDRIVE_LOG_FORMAT") {
            o.log_format = Some(v.parse().map_err(|e| bad("REDRIVE_LOG_FORMAT", e))?);
        }
        for (key, slot) in [
            ("REDRIVE_SERVER_SWEEP_INTERVAL_MS", &mut o.sweep_interval_ms),
            (
                "REDRIVE_SERVER_SHUTDOWN_TIMEOUT_MS",
                &mut o.shutdown_timeout_ms,
            ),
        ] {
            if let Some(v) = get(key) {
                *slot = Some(parse_millis(&v).map_err(|e| bad(key, e))?);
            }
        }
        Ok(o)
    }

    fn apply(&self, c: &mut Config) {
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = &self.data_dir {
            c.data_dir.clone_from(v);
        }
        if let Some(v) = &self.store {
            c.store = Some(v.clone());
        }
        if let Some(v) = &self.log_level {
            c.log.level.clone_from(v);
        }
        if let Some(v) = self.log_format {
            c.log.format = v;
        }
        if let Some(v) = self.sweep_interval_ms {
            c.server.sweep_interval_ms = v;
        }
        if let Some(v) = self.shutdown_timeout_ms {
            c.server.shutdown_timeout_ms = v;
        }
        if let Some(v) = &self.sqs_listen {
            c.sqs_listen.clone_from(v);
        }
        if let Some(v) = &self.sqs_public_url {
            c.sqs_public_url = Some(v.clone());
        }
        if let Some(v) = &self.sqs_account_id {
            c.sqs_account_id.clone_from(v);
        }
        if let Some(v) = &self.sqs_access_keys {
            c.sqs_access_keys.clone_from(v);
        }
        if let Some(v) = &self.sqs_region {
            c.sqs_region.clone_from(v);
        }
        if let Some(v) = self.auth_enabled {
            c.auth.enabled = v;
        }
        if let Some(v) = &self.bootstrap_token {
            c.auth.bootstrap_token = Some(v.clone());
        }
        if let Some(v) = &self.push_allowed_networks {
            c.push_allowed_networks.clone_from(v);
        }
        if let Some(v) = &self.ca_file {
            c.ca_file = Some(v.clone());
        }
        if let Some(v) = &self.failing_path_window {
            c.replay_plans.failing_path_window.clone_from(v);
        }
        if let Some(v) = self.console {
            c.server.console = v;
        }
    }
}

/// `on` or `off` (also `true`/`false`, `yes`/`no`, `1`/`0`), as a switch flag or variable
/// takes it.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("{s:?} is not on or off")),
    }
}

/// Where the data lives, resolved from `store` and `data_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: the connection URL (without redrive's own `schema` and
    /// `pool_size` parameters), the schema that holds redrive's tables and the size of
    /// the node's connection pool.
    Postgres {
        /// `postgres://…` as the driver reads it.
        url: String,
        /// From the `schema=` query parameter; `None` uses the `search_path`.
        schema: Option<String>,
        /// From the `pool_size=` query parameter; `None` is the store's default.
        pool_size: Option<usize>,
    },
}

/// Most connections one node may pool.
pub const MAX_POOL_SIZE: usize = 1_000;

/// redrive's own parameters of a PostgreSQL URL.
#[derive(Debug, Default)]
struct PostgresParams {
    schema: Option<String>,
    pool_size: Option<usize>,
}

/// Splits redrive's `schema=NAME` and `pool_size=N` parameters off a PostgreSQL URL.
fn split_params(url: &str) -> anyhow::Result<(String, PostgresParams)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), PostgresParams::default()));
    };
    let mut params = PostgresParams::default();
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", v)) => {
                if v.is_empty()
                    || v.len() > 63
                    || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(input_error(format!(
                        "store {}: schema {v:?} must be 1 to 63 letters, digits or '_'",
                        redact_url(url)
                    )));
                }
                params.schema = Some(v.to_owned());
            }
            Some(("pool_size", v)) => {
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_POOL_SIZE).contains(n));
                let Some(n) = n else {
                    return Err(input_error(format!(
                        "store {}: pool_size {v:?} must be a whole number from 1 to \
                         {MAX_POOL_SIZE}",
                        redact_url(url)
                    )));
                };
                params.pool_size = Some(n);
            }
            _ => rest.push(pair),
        }
    }
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, params))
}

impl Config {
    /// Defaults, then `file` (its path and text), then `env`, then `flags`; validated.
    pub fn layered(
        file: Option<(&Path, &str)>,
        env: &Overrides,
        flags: &Overrides,
    ) -> anyhow::Result<Config> {
        let mut config = match file {
            Some((path, text)) => toml::from_str::<Config>(text).map_err(|e| {
                input_error(format!(
                    "invalid config file {}: {}",
                    path.display(),
                    e.to_string().trim()
                ))
            })?,
            None => Config::default(),
        };
        env.apply(&mut config);
        flags.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    /// [`Config::layered`] reading the file from disk and the process environment.
    pub fn load(file: Option<&Path>, flags: &Overrides) -> anyhow::Result<Config> {
        let text = match file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                input_error(format!("cannot read config file {}: {e}", path.display()))
            })?),
            None => None,
        };
        let env = Overrides::from_env(|k| std::env::var(k).ok())?;
        let file = file.zip(text.as_deref());
        Config::layered(file, &env, flags)
    }

    /// The `[[replay.register]]` entries, checked: each is a valid entry (see
    /// `redrive_core::register`) and no key is stated twice. An error names the entry.
    pub fn register_entries(&self) -> anyhow::Result<Vec<redrive_core::register::RegisterEntry>> {
        use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
        let mut out: Vec<RegisterEntry> = Vec::with_capacity(self.replay.register.len());
        for (i, item) in self.replay.register.iter().enumerate() {
            let bad = |why: String| {
                input_error(format!(
                    "replay.register entry {} ({:?}): {why}",
                    i + 1,
                    item.key
                ))
            };
            let key: RegisterKey = item.key.parse().map_err(|e| bad(format!("{e}")))?;
            let answer: Idempotency = item.answer.parse().map_err(|e| bad(format!("{e}")))?;
            let entry = RegisterEntry::new(key, answer, item.ordering_attribute.clone())
                .map_err(|e| bad(e.to_string()))?;
            if out.iter().any(|e| e.key == entry.key) {
                return Err(bad("the key is stated more than once".to_owned()));
            }
            out.push(entry);
        }
        Ok(out)
    }

    /// The case settings of `[cases]`, checked.
    pub fn case_settings(&self) -> anyhow::Result<redrive_broker::CaseSettings> {
        let c = &self.cases;
        let ms = |field: &str, v: &str| {
            parse_millis(v).map_err(|e| input_error(format!("cases.{field}: {e}")))
        };
        let mut rules = Vec::with_capacity(c.rule.len());
        for (i, r) in c.rule.iter().enumerate() {
            let field = |f: &str| format!("rule[{}].{f}", i + 1);
            if r.entity.is_empty() {
                return Err(input_error(format!(
                    "cases.{}: must not be empty",
                    field("entity")
                )));
            }
            for p in &r.redact_allow {
                if !(p.starts_with("body.") || p.starts_with("properties.")) {
                    return Err(input_error(format!(
                        "cases.{}: {p:?} must start with body. or properties.",
                        field("redact_allow")
                    )));
                }
            }
            rules.push(redrive_broker::cases::CaseRule {
                entity: r.entity.clone(),
                review_ms: r
                    .review
                    .as_deref()
                    .map(|v| ms(&field("review"), v))
                    .transpose()?,
                payload_retention_ms: r
                    .payload_retention
                    .as_deref()
                    .map(|v| ms(&field("payload_retention"), v))
                    .transpose()?,
                redact_allow: r.redact_allow.clone(),
            });
        }
        let default_lease_ms = ms("claim", &c.claim)?;
        if default_lease_ms == 0 || default_lease_ms > redrive_broker::cases::MAX_CASE_LEASE_MS {
            return Err(input_error("cases.claim must be between 1 ms and 24h"));
        }
        Ok(redrive_broker::CaseSettings {
            worker: self.server.case_worker,
            default_lease_ms,
            payload_retention_ms: ms("payload_retention", &c.payload_retention)?,
            rules,
            labels: c.labels.clone(),
            escalation_webhook: c.escalation_webhook.clone(),
            lease_ttl: std::time::Duration::from_millis(self.server.lease_ttl_ms.max(1)),
            ..redrive_broker::CaseSettings::default()
        })
    }

    /// The `[[cases.effect_authority]]` entries: (type, url, timeout ms).
    pub fn effect_authorities(&self) -> anyhow::Result<Vec<(String, String, Option<u64>)>> {
        self.cases
            .effect_authority
            .iter()
            .map(|a| {
                let timeout = a
                    .timeout
                    .as_deref()
                    .map(parse_millis)
                    .transpose()
                    .map_err(|e| {
                        input_error(format!(
                            "cases.effect_authority {:?}: timeout: {e}",
                            a.message_type
                        ))
                    })?;
                Ok((a.message_type.clone(), a.url.clone(), timeout))
            })
            .collect()
    }

    /// The node-wide replay budget of `[replay]`, checked.
    pub fn node_replay_budget(&self) -> anyhow::Result<redrive_broker::NodeReplayBudget> {
        let r = &self.replay;
        let max_items = redrive_core::plan::MAX_ITEMS_PER_S;
        if !(1..=max_items).contains(&r.max_items_per_s) {
            return Err(input_error(format!(
                "replay.max_items_per_s must be between 1 and {max_items} (got {})",
                r.max_items_per_s
            )));
        }
        if !(1..=MAX_NODE_BYTES_PER_S).contains(&r.max_bytes_per_s) {
            return Err(input_error(format!(
                "replay.max_bytes_per_s must be between 1 and {MAX_NODE_BYTES_PER_S} (got {})",
                r.max_bytes_per_s
            )));
        }
        Ok(redrive_broker::NodeReplayBudget {
            items_per_s: f64::from(r.max_items_per_s),
            bytes_per_s: r.max_bytes_per_s,
        })
    }

    /// The replay plan settings of `[replay_plans]`, checked: the failing-path window is a
    /// duration from one second to 24 hours (`redrive_core::plan` judges the range).
    pub fn plan_settings(&self) -> anyhow::Result<redrive_broker::PlanSettings> {
        let v = &self.replay_plans.failing_path_window;
        let bad = |why: String| input_error(format!("replay_plans.failing_path_window: {why}"));
        let ms = parse_millis(v).map_err(&bad)?;
        let ms = redrive_core::plan::check_failing_path_window_ms(ms).map_err(|e| match e {
            redrive_core::plan::BudgetError::OutOfRange { why, .. } => bad(why),
            other => bad(other.to_string()),
        })?;
        Ok(redrive_broker::PlanSettings {
            failing_path_window_ms: ms,
        })
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.register_entries()?;
        self.case_settings()?;
        self.plan_settings()?;
        self.effect_authorities()?;
        if !(1..=1_000).contains(&self.replay.flag_after_failures) {
            return Err(input_error(format!(
                "replay.flag_after_failures must be between 1 and 1000 (got {})",
                self.replay.flag_after_failures
            )));
        }
        self.node_replay_budget()?;
        if self.server.sweep_interval_ms == 0 {
            return Err(input_error("server.sweep_interval_ms must be positive"));
        }
        if self.log.level.trim().is_empty() {
            return Err(input_error("log.level must not be empty"));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(input_error("data_dir must not be empty"));
        }
        let sqs_listen = parse_sqs_listen(&self.sqs_listen)
            .map_err(|e| input_error(format!("sqs_listen: {e}")))?;
        if let Some(url) = &self.sqs_public_url {
            parse_public_url(url).map_err(|e| input_error(format!("sqs_public_url: {e}")))?;
        }
        // Checked for its grammar only: an address on every interface is valid, and its
        // queue URLs name `localhost` (see `sqs_public_url`).
        let _ = sqs_listen;
        if self.sqs_account_id.len() != 12
            || !self.sqs_account_id.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(input_error(format!(
                "sqs_account_id must be 12 digits, not {:?}",
                self.sqs_account_id
            )));
        }
        let region_ok = !self.sqs_region.is_empty()
            && self
                .sqs_region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            return Err(input_error(format!(
                "sqs_region must be a region name such as us-east-1, not {:?}",
                self.sqs_region
            )));
        }
        self.sqs_keys()?;
        if let Some(t) = &self.auth.bootstrap_token
            && !redrive_broker::looks_like_token(t)
        {
            return Err(input_error(
                "auth.bootstrap_token must be rdt_ followed by 64 lowercase hex digits \
                 (e.g. from `openssl rand -hex 32`)",
            ));
        }
        if self.auth.audit_retention_days > 36_500 {
            return Err(input_error(
                "auth.audit_retention_days must be at most 36500",
            ));
        }
        self.check_exposure()?;
        self.push_network()?;
        self.store_location().map(|_| ())
    }

    /// Without authentication every caller may do everything: refuse to listen anywhere
    /// but on loopback then (the SQS endpoint may, when it checks signatures itself).
    pub fn check_exposure(&self) -> anyhow::Result<()> {
        if self.auth.enabled {
            return Ok(());
        }
        if !self.listen.ip().is_loopback() {
            return Err(input_error(format!(
                "refusing to listen on {} without authentication: anyone who can reach it \
                 could read and change everything. Set auth.enabled = true (or --auth, or \
                 REDRIVE_AUTH_ENABLED=true), or listen on 127.0.0.1",
                self.listen
            )));
        }
        if let Ok(Some(sqs)) = parse_sqs_listen(&self.sqs_listen)
            && !sqs.ip().is_loopback()
            && self.sqs_access_keys.is_empty()
        {
            return Err(input_error(format!(
                "refusing to run the SQS endpoint on {sqs} without authentication: set \
                 auth.enabled = true or sqs_access_keys, or listen on 127.0.0.1"
            )));
        }
        Ok(())
    }

    /// The addresses push endpoints may be on besides public ones.
    /// What outgoing `https://` requests trust: the platform's roots and `ca_file`'s
    /// certificates (a bundle that cannot be used is an input error naming it).
    pub fn trust(&self) -> anyhow::Result<redrive_tls::Trust> {
        redrive_tls::Trust::load(self.ca_file.as_deref())
            .map_err(|e| input_error(format!("ca_file: {e}")))
    }

    pub fn push_network(&self) -> anyhow::Result<redrive_broker::NetworkPolicy> {
        redrive_broker::NetworkPolicy::allowing(&self.push_allowed_networks)
            .map_err(|e| input_error(format!("push_allowed_networks: {e}")))
    }

    /// The configured SQS access keys as (id, secret) pairs.
    pub fn sqs_keys(&self) -> anyhow::Result<Vec<(String, String)>> {
        self.sqs_access_keys
            .iter()
            .map(|p| match p.split_once(':') {
                Some((id, secret)) if !id.is_empty() && !secret.is_empty() => {
                    Ok((id.to_owned(), secret.to_owned()))
                }
                _ => Err(input_error(format!(
                    "sqs_access_keys entries are ACCESS_KEY_ID:SECRET, not {:?}",
                    p.split_once(':').map_or(p.as_str(), |(id, _)| id)
                ))),
            })
            .collect()
    }

    /// Resolves the storage URL: `sqlite://PATH` (a file, or a directory to hold
    /// `redrive.db`), or absent for `data_dir/redrive.db`.
    pub fn store_location(&self) -> anyhow::Result<StoreLocation> {
        let Some(url) = self.store.as_deref().map(str::trim) else {
            return Ok(StoreLocation::Sqlite(self.data_dir.join("redrive.db")));
        };
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        if scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql") {
            let (url, params) = split_params(url)?;
            return Ok(StoreLocation::Postgres {
                url,
                schema: params.schema,
                pool_size: params.pool_size,
            });
        }
        if !scheme.eq_ignore_ascii_case("sqlite") {
            return Err(input_error(format!(
                "unsupported store {}: use sqlite://PATH, postgres://…, or leave `store` \
                 unset to use the data directory",
                redact_url(url)
            )));
        }
        let rest = &url[scheme.len() + 1..];
        let path = rest.strip_prefix("//").unwrap_or(rest);
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if path.is_empty() {
            return Err(input_error(format!(
                "store {url}: missing database path (use sqlite://PATH)"
            )));
        }
        let path = PathBuf::from(path);
        if path.is_dir() {
            return Ok(StoreLocation::Sqlite(path.join("redrive.db")));
        }
        Ok(StoreLocation::Sqlite(path))
    }

    /// The base of the SQS endpoint's queue URLs when it listens on `bound`:
    /// `sqs_public_url`, or the listen address itself (`https` when the server speaks TLS),
    /// with `localhost` for an address on every interface (`0.0.0.0`, `[::]`), which names
    /// no host a client could reach; the server warns at start that `sqs_public_url` should
    /// say where clients reach it. Never the request's `Host` header.
    pub fn sqs_public_url(&self, bound: SocketAddr) -> String {
        match &self.sqs_public_url {
            Some(url) => url.trim().trim_end_matches('/').to_owned(),
            None => {
                let scheme = if self.server.tls_cert_file.is_some() {
                    "https"
                } else {
                    "http"
                };
                if bound.ip().is_unspecified() {
                    format!("{scheme}://localhost:{}", bound.port())
                } else {
                    format!("{scheme}://{bound}")
                }
            }
        }
    }

    /// Whether the SQS endpoint's queue URLs fall back to `localhost` (it listens on every
    /// interface and no `sqs_public_url` says where clients reach it).
    pub fn sqs_public_url_guessed(&self, bound: SocketAddr) -> bool {
        self.sqs_public_url.is_none() && bound.ip().is_unspecified()
    }

    /// What the SQS endpoint checks, for the summary: the configured key ids (secrets
    /// hidden), and what happens to a request that none of them signed. With
    /// authentication on, the SQS credentials of API tokens are checked too and an
    /// unsigned request is refused, configured keys or not.
    fn sqs_keys_summary(&self) -> String {
        let ids = self
            .sqs_access_keys
            .iter()
            .map(|p| format!("{}:***", p.split_once(':').map_or(p.as_str(), |(id, _)| id)))
            .collect::<Vec<_>>()
            .join(",");
        match (ids.is_empty(), self.auth.enabled) {
            (true, false) => "(none: any signature accepted)".to_owned(),
            (true, true) => {
                "(none: signatures verified against the API tokens' SQS keys, unsigned \
                 requests refused)"
                    .to_owned()
            }
            (false, false) => ids,
            (false, true) => format!("{ids} (and the API tokens' SQS keys)"),
        }
    }

    /// The effective configuration as one line of `key=value` pairs, secrets redacted.
    pub fn summary(&self) -> String {
        format!(
            "listen={} data_dir={} store={} log.level={} log.format={} \
             server.sweep_interval_ms={} server.shutdown_timeout_ms={} \
             server.lease_ttl_ms={} sqs_listen={} sqs_public_url={} \
             sqs_account_id={} sqs_region={} sqs_access_keys={} auth.enabled={} \
             auth.bootstrap_token={} auth.rate_limit_per_s={} auth.rate_limit_burst={} \
             auth.audit_retention_days={}",
            self.listen,
            self.data_dir.display(),
            self.store
                .as_deref()
                .map_or_else(|| "(data_dir)".to_owned(), redact_url),
            self.log.level,
            match self.log.format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            },
            self.server.sweep_interval_ms,
            self.server.shutdown_timeout_ms,
            self.server.lease_ttl_ms,
            self.sqs_listen,
            self.sqs_public_url
                .as_deref()
                .unwrap_or("(the listen address)"),
            self.sqs_account_id,
            self.sqs_region,
            self.sqs_keys_summary(),
            self.auth.enabled,
            if self.auth.bootstrap_token.is_some() {
                "***"
            } else {
                "(none)"
            },
            self.auth.rate_limit_per_s,
            self.auth.rate_limit_burst,
            self.auth.audit_retention_days,
        )
    }
}

/// A listen address: `IP:PORT`, or `localhost:PORT`.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Some(port) = s.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("invalid port in {s:?}"))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("invalid listen address {s:?} (expected IP:PORT, e.g. 127.0.0.1:7474)")
    })
}

/// The SQS endpoint's address: `IP:PORT`, `localhost:PORT`, or `off` (`None`).
pub fn parse_sqs_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    parse_listen(s).map(Some)
}

/// A public URL of the SQS endpoint: `http://` or `https://`, a host (and port), and
/// optionally a path; no query, fragment or user info.
pub fn parse_public_url(s: &str) -> Result<(), String> {
    let s = s.trim();
    let bad = || {
        format!("{s:?} is not an http:// or https:// URL of a host (e.g. https://sqs.example.com)")
    };
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if authority.starts_with('[') {
        authority
            .split(']')
            .next()
            .map(|h| h.trim_start_matches('['))
    } else {
        authority.split(':').next()
    }
    .unwrap_or_default();
    let port_ok = match authority.rsplit_once(':') {
        Some((_, p)) if !authority.ends_with(']') => p.parse::<u16>().is_ok(),
        _ => true,
    };
    if host.is_empty()
        || !port_ok
        || s.len() > 2048
        || s.bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"?#@\\".contains(&b))
    {
        return Err(bad());
    }
    Ok(())
}

/// Milliseconds as a plain integer, or a duration with unit (`1s`).
pub fn parse_millis(s: &str) -> Result<u64, String> {
    let s = s.trim();
    match s.parse::<u64>() {
        Ok(v) => Ok(v),
        Err(_) => parse_duration_ms(s),
    }
}

/// Hides secrets in a store URL: the password of its user info and the values of query
/// parameters that look secret (`password`, `secret`, `token`, `key`, `credential`).
///
/// The URL is split by its grammar, not matched against a pattern: the user info runs
/// from `://` to the *last* `@`, so a password holding `/`, `?`, `:` or `@` (which a
/// WHATWG parser would take for the path, the query or the host) is hidden whole; if a
/// query value holds an `@` too, more is hidden, never less. A connection string without
/// a scheme (`host=… password=…`) has its secret-looking values hidden.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_key_values(url);
    };
    let (userinfo, after) = match rest.rfind('@') {
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(info) = userinfo {
        match info.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push_str(":***@");
            }
            None => {
                out.push_str(info);
                out.push('@');
            }
        }
    }
    let (base, query) = match after.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (after, None),
    };
    out.push_str(base);
    if let Some(q) = query {
        out.push('?');
        let parts: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if looks_secret(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    out
}

/// Hides the secret-looking values of a `key=value key='quoted value'` connection string.
fn redact_key_values(s: &str) -> String {
    let mut out = Vec::new();
    let mut words = s.split_whitespace();
    while let Some(w) = words.next() {
        match w.split_once('=') {
            Some((k, v)) if looks_secret(k) => {
                out.push(format!("{k}=***"));
                // A quoted value may run over several words: skip to its closing quote.
                let mut open = v.starts_with('\'') && !(v.len() > 1 && closes_quote(v));
                while open {
                    match words.next() {
                        Some(next) => open = !closes_quote(next),
                        None => open = false,
                    }
                }
            }
            _ => out.push(w.to_owned()),
        }
    }
    out.join(" ")
}

/// Whether a word ends a quoted value (a `'` not escaped by a backslash).
fn closes_quote(w: &str) -> bool {
    w.ends_with('\'') && !w.ends_with("\\'")
}

fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "credential"]
        .iter()
        .any(|s| k.contains(s))
}

/// Creates the directory that will hold `db`.
pub fn ensure_parent_dir(db: &Path) -> anyhow::Result<()> {
    if let Some(parent) = db.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create directory {}", parent.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::exit_code;

    fn env_of(pairs: &[(&str, &str)]) -> Overrides {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Overrides::from_env(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn embedded_defaults_file_matches_the_built_in_defaults() {
        let parsed: Config = toml::from_str(DEFAULT_TOML).unwrap();
        let d = Config::default();
        assert_eq!(parsed.listen, d.listen);
        assert_eq!(parsed.data_dir, d.data_dir);
        assert_eq!(parsed.store, d.store);
        assert_eq!(parsed.log, d.log);
        assert_eq!(parsed.server.sweep_interval_ms, d.server.sweep_interval_ms);
        assert_eq!(
            parsed.server.shutdown_timeout_ms,
            d.server.shutdown_timeout_ms
        );
        assert_eq!(parsed.replay, d.replay);
        assert_eq!(parsed.cases, d.cases);
        assert_eq!(parsed.replay_plans, d.replay_plans);
        assert!(d.server.plan_worker);
    }

    /// The default file's section `[name]` (up to the next section that is not one of its
    /// own tables), its commented examples uncommented.
    fn uncommented_section(name: &str) -> String {
        let start = DEFAULT_TOML
            .find(&format!("\n[{name}]\n"))
            .unwrap_or_else(|| panic!("a [{name}] section"))
            + 1;
        let rest = &DEFAULT_TOML[start + name.len() + 2..];
        let end = start
            + name.len()
            + 2
            + rest
                .match_indices("\n[")
                .find(|(i, _)| !rest[i + 2..].starts_with(&format!("[{name}.")))
                .map_or(rest.len(), |(i, _)| i);
        DEFAULT_TOML[start..end]
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.starts_with("[[") || rest.contains(" = ") => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_default_files_cases_examples_are_valid_once_uncommented() {
        let uncommented = uncommented_section("cases");
        let none = Overrides::default();
        let c = Config::layered(Some((Path::new("f.toml"), &uncommented)), &none, &none)
            .unwrap_or_else(|e| panic!("{e:#}\n{uncommented}"));
        let settings = c.case_settings().unwrap();
        assert_eq!(settings.rules.len(), 1, "{uncommented}");
        assert_eq!(c.effect_authorities().unwrap().len(), 1);
        assert!(c.cases.escalation_webhook.is_some());
        assert_eq!(c.cases.labels.len(), 2);
    }

    #[test]
    fn the_default_files_replay_plans_example_is_valid_once_uncommented() {
        let uncommented = uncommented_section("replay_plans");
        assert!(
            uncommented.contains("failing_path_window = \"90s\""),
            "{uncommented}"
        );
        let none = Overrides::default();
        let c = Config::layered(Some((Path::new("f.toml"), &uncommented)), &none, &none)
            .unwrap_or_else(|e| panic!("{e:#}\n{uncommented}"));
        assert_eq!(c.plan_settings().unwrap().failing_path_window_ms, 90_000);
        // As shipped (the example commented out): the default, five minutes.
        let c = Config::layered(None, &none, &none).unwrap();
        assert_eq!(c.plan_settings().unwrap().failing_path_window_ms, 300_000);
        assert_eq!(
            c.plan_settings().unwrap(),
            redrive_broker::PlanSettings::default()
        );
    }

    #[test]
    fn the_failing_path_window_layers_and_is_bounded() {
        let path = Path::new("f.toml");
        let none = Overrides::default();
        let file = "[replay_plans]\nfailing_path_window = \"2m\"";
        let c = Config::layered(Some((path, file)), &none, &none).unwrap();
        assert_eq!(c.plan_settings().unwrap().failing_path_window_ms, 120_000);
        let env = env_of(&[("REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW", "45000")]);
        let c = Config::layered(Some((path, file)), &env, &none).unwrap();
        assert_eq!(
            c.plan_settings().unwrap().failing_path_window_ms,
            45_000,
            "env beats file"
        );
        for bad in ["0", "999", "25h", "soon", "-5s"] {
            let text = format!("[replay_plans]\nfailing_path_window = \"{bad}\"");
            let err = Config::layered(Some((path, &text)), &none, &none).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.starts_with("replay_plans.failing_path_window: "),
                "{bad}: {msg}"
            );
            assert_eq!(exit_code(&err), 2, "{bad}");
        }
        let err = Overrides::from_env(|k| {
            (k == "REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW").then(|| "soon".to_owned())
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW"),
            "{err}"
        );
    }

    #[test]
    fn the_node_replay_budget_defaults_layers_and_is_bounded() {
        let path = Path::new("f.toml");
        let none = Overrides::default();
        let c = Config::layered(None, &none, &none).unwrap();
        let b = c.node_replay_budget().unwrap();
        assert_eq!((b.items_per_s, b.bytes_per_s), (1_000.0, 67_108_864));
        let file = "[replay]\nmax_items_per_s = 50\nmax_bytes_per_s = 1048576\n\n[server]\nplan_worker = false";
        let c = Config::layered(Some((path, file)), &none, &none).unwrap();
        let b = c.node_replay_budget().unwrap();
        assert_eq!((b.items_per_s, b.bytes_per_s), (50.0, 1_048_576));
        assert!(!c.server.plan_worker);
        for (text, key) in [
            ("[replay]\nmax_items_per_s = 0", "replay.max_items_per_s"),
            (
                "[replay]\nmax_items_per_s = 100001",
                "replay.max_items_per_s",
            ),
            ("[replay]\nmax_bytes_per_s = 0", "replay.max_bytes_per_s"),
            (
                "[replay]\nmax_bytes_per_s = 1073741825",
                "replay.max_bytes_per_s",
            ),
        ] {
            let err = Config::layered(Some((path, text)), &none, &none)
                .and_then(|c| c.validate())
                .unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
            assert_eq!(crate::failure::exit_code(&err), 2, "{text}");
        }
    }

    #[test]
    fn flags_beat_env_beat_file_beat_defaults() {
        let file = "listen = \"127.0.0.1:1001\"\ndata_dir = \"/file\"\n\
                    [server]\nsweep_interval_ms = 5\nshutdown_timeout_ms = 6\n\
                    [log]\nlevel = \"warn\"\n";
        let env = env_of(&[
            ("REDRIVE_LISTEN", "127.0.0.1:1002"),
            ("REDRIVE_DATA_DIR", "/env"),
            ("REDRIVE_SERVER_SWEEP_INTERVAL_MS", "2s"),
            ("REDRIVE_LOG_FORMAT", "json"),
        ]);
        let flags = Overrides {
            listen: Some("127.0.0.1:1003".parse().unwrap()),
            ..Overrides::default()
        };
        let path = Path::new("redrive.toml");
        let c = Config::layered(Some((path, file)), &env, &flags).unwrap();
        assert_eq!(c.listen.port(), 1003, "flag wins");
        assert_eq!(c.data_dir, PathBuf::from("/env"), "env beats file");
        assert_eq!(c.server.sweep_interval_ms, 2_000, "env beats file");
        assert_eq!(c.server.shutdown_timeout_ms, 6, "file beats default");
        assert_eq!(c.log.level, "warn");
        assert_eq!(c.log.format, LogFormat::Json);
        let c = Config::layered(Some((path, file)), &env, &Overrides::default()).unwrap();
        assert_eq!(c.listen.port(), 1002, "env beats file");
        let c = Config::layered(
            Some((path, file)),
            &Overrides::default(),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.listen.port(), 1001, "file beats default");
        let c = Config::layered(None, &Overrides::default(), &Overrides::default()).unwrap();
        assert_eq!(c.listen.port(), 7474);
        assert_eq!(
            c.store_location().unwrap(),
            StoreLocation::Sqlite(PathBuf::from("./redrive-data/redrive.db"))
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let path = Path::new("f.toml");
        for (text, key) in [
            ("lisen = \"127.0.0.1:1\"", "lisen"),
            ("[server]\nbogus_knob = 1", "bogus_knob"),
            ("[log]\ncolour = true", "colour"),
        ] {
            let e = Config::layered(
                Some((path, text)),
                &Overrides::default(),
                &Overrides::default(),
            )
            .unwrap_err();
            assert!(format!("{e:#}").contains(key), "{e:#}");
            assert_eq!(exit_code(&e), 2);
        }
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let e = Overrides::from_env(|k| (k == "REDRIVE_LISTEN").then(|| "nope".to_owned()))
            .unwrap_err();
        assert!(e.to_string().contains("REDRIVE_LISTEN"), "{e}");
        let e = Overrides::from_env(|k| (k == "REDRIVE_LOG_FORMAT").then(|| "xml".to_owned()))
            .unwrap_err();
        assert!(e.to_string().contains("REDRIVE_LOG_FORMAT"), "{e}");
    }

    #[test]
    fn store_urls_resolve_to_sqlite_or_a_clear_error() {
        let with = |s: &str| Config {
            store: Some(s.to_owned()),
            ..Config::default()
        };
        assert_eq!(
            with("sqlite:///var/lib/r.db").store_location().unwrap(),
            StoreLocation::Sqlite(PathBuf::from("/var/lib/r.db"))
        );
        assert_eq!(
            with("sqlite://rel/r.db").store_location().unwrap(),
            StoreLocation::Sqlite(PathBuf::from("rel/r.db"))
        );
        assert_eq!(
            with("postgres://u:p@db/redrive?schema=rd&sslmode=disable")
                .store_location()
                .unwrap(),
            StoreLocation::Postgres {
                url: "postgres://u:p@db/redrive?sslmode=disable".to_owned(),
                schema: Some("rd".to_owned()),
                pool_size: None,
            }
        );
        assert_eq!(
            with("postgresql://db/redrive").store_location().unwrap(),
            StoreLocation::Postgres {
                url: "postgresql://db/redrive".to_owned(),
                schema: None,
                pool_size: None,
            }
        );
        assert_eq!(
            with("postgres://db/redrive?pool_size=6&schema=rd")
                .store_location()
                .unwrap(),
            StoreLocation::Postgres {
                url: "postgres://db/redrive".to_owned(),
                schema: Some("rd".to_owned()),
                pool_size: Some(6),
            }
        );
        for bad in ["0", "-1", "x", "1001", ""] {
            let e = with(&format!("postgres://u:hunter2@db/r?pool_size={bad}"))
                .store_location()
                .unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains("pool_size"), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
            assert_eq!(crate::failure::exit_code(&e), 2, "{msg}");
        }
        let e = with("postgres://u:hunter2@db/redrive?schema=a-b")
            .store_location()
            .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = with("mysql://u:hunter2@db/redrive")
            .store_location()
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unsupported store"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
        assert!(with("sqlite://").store_location().is_err());
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/redrive?sslmode=require&password=x"),
            "postgres://app:***@db:5432/redrive?sslmode=require&password=***"
        );
        assert_eq!(redact_url("sqlite:///a/b.db"), "sqlite:///a/b.db");
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        // A password holding `/` and `?`: hidden whole, the query still shown.
        let shown = redact_url("postgres://u:pa/ss?w@host/db?schema=x");
        assert_eq!(shown, "postgres://u:***@host/db?schema=x");
        // A password holding `@` and `:`.
        let shown = redact_url("postgres://u:p@ss:w@rd@host:5432/db?pool_size=4");
        assert_eq!(shown, "postgres://u:***@host:5432/db?pool_size=4");
        for secret in ["pa/ss?w", "p@ss:w@rd"] {
            let c = Config {
                store: Some(format!("postgres://u:{secret}@host/db?schema=x")),
                ..Config::default()
            };
            assert!(!c.summary().contains(secret), "{}", c.summary());
        }
        assert_eq!(
            redact_url("host=db user=u password='a b c' dbname=x"),
            "host=db user=u password=*** dbname=x"
        );
        assert_eq!(
            redact_url("host=db password=s3 x=1"),
            "host=db password=*** x=1"
        );
        let c = Config {
            store: Some("postgres://a:b@h/d".to_owned()),
            ..Config::default()
        };
        assert!(
            c.summary().contains("store=postgres://a:***@h/d"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn push_allowed_networks_layer_and_are_checked() {
        let c = Config::layered(None, &Overrides::default(), &Overrides::default()).unwrap();
        assert!(
            c.push_allowed_networks.is_empty(),
            "nothing private by default"
        );
        let env = env_of(&[(
            "REDRIVE_PUSH_ALLOWED_NETWORKS",
            "127.0.0.0/8, ::1,hooks.lan",
        )]);
        let c = Config::layered(
            Some((
                Path::new("f.toml"),
                "push_allowed_networks = [\"10.0.0.0/8\"]",
            )),
            &env,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.push_allowed_networks, ["127.0.0.0/8", "::1", "hooks.lan"]);
        assert_eq!(
            c.push_network().unwrap(),
            redrive_broker::NetworkPolicy::allowing(&["127.0.0.0/8", "::1", "hooks.lan"]).unwrap()
        );
        let e = Config::layered(
            Some((
                Path::new("f.toml"),
                "push_allowed_networks = [\"10.0.0.0/99\"]",
            )),
            &Overrides::default(),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("push_allowed_networks"), "{e}");
    }

    #[test]
    fn the_summary_says_what_the_sqs_endpoint_checks() {
        let open = Config::default();
        assert!(
            open.summary()
                .contains("sqs_access_keys=(none: any signature accepted)"),
            "{}",
            open.summary()
        );
        let mut auth = Config::default();
        auth.auth.enabled = true;
        let line = auth.summary();
        assert!(!line.contains("any signature accepted"), "{line}");
        assert!(
            line.contains(
                "sqs_access_keys=(none: signatures verified against the API tokens' SQS keys, \
                 unsigned requests refused)"
            ),
            "{line}"
        );
        auth.sqs_access_keys = vec!["AKID:hunter2".to_owned()];
        let line = auth.summary();
        assert!(
            line.contains("sqs_access_keys=AKID:*** (and the API tokens' SQS keys)"),
            "{line}"
        );
        assert!(!line.contains("hunter2"), "{line}");
    }

    #[test]
    fn sqs_queue_urls_come_from_the_configuration() {
        let bound: SocketAddr = "127.0.0.1:9324".parse().unwrap();
        let c = Config::default();
        assert_eq!(c.sqs_public_url(bound), "http://127.0.0.1:9324");
        assert!(c.summary().contains("sqs_public_url=(the listen address)"));
        let mut tls = Config::default();
        tls.server.tls_cert_file = Some("c.pem".into());
        tls.server.tls_key_file = Some("k.pem".into());
        assert_eq!(tls.sqs_public_url(bound), "https://127.0.0.1:9324");
        let c = Config::layered(
            Some((
                Path::new("f.toml"),
                "sqs_listen = \"0.0.0.0:9324\"\nsqs_public_url = \"https://sqs.example.com/\"\n\
                 [auth]\nenabled = true",
            )),
            &Overrides::default(),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.sqs_public_url(bound), "https://sqs.example.com");
        assert!(!c.sqs_public_url_guessed("0.0.0.0:9324".parse().unwrap()));
        // Listening everywhere names no host: localhost, and a warning at start.
        let c = Config::layered(
            Some((
                Path::new("f.toml"),
                "sqs_listen = \"0.0.0.0:9324\"\n[auth]\nenabled = true",
            )),
            &Overrides::default(),
            &Overrides::default(),
        )
        .unwrap();
        let everywhere: SocketAddr = "0.0.0.0:9324".parse().unwrap();
        assert_eq!(c.sqs_public_url(everywhere), "http://localhost:9324");
        assert!(c.sqs_public_url_guessed(everywhere));
        assert!(!c.sqs_public_url_guessed(bound));
        let v6: SocketAddr = "[::]:9324".parse().unwrap();
        assert_eq!(c.sqs_public_url(v6), "http://localhost:9324");
        let env = env_of(&[("REDRIVE_SQS_PUBLIC_URL", "http://sqs.internal:9324")]);
        assert_eq!(
            env.sqs_public_url.as_deref(),
            Some("http://sqs.internal:9324")
        );
        for ok in [
            "http://sqs.internal",
            "https://sqs.example.com:8443/prefix",
            "http://[::1]:9324",
        ] {
            assert!(parse_public_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "sqs.example.com",
            "ftp://sqs.example.com",
            "http://",
            "http://:9324",
            "http://a b",
            "http://h:99999",
            "http://user@h",
            "http://h/?q=1",
        ] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
        assert!(
            Overrides::from_env(|k| (k == "REDRIVE_SQS_PUBLIC_URL").then(|| "nope".into()))
                .is_err()
        );
    }

    #[test]
    fn sqs_endpoint_settings_layer_and_turn_off() {
        let c = Config::layered(None, &Overrides::default(), &Overrides::default()).unwrap();
        assert_eq!(
            parse_sqs_listen(&c.sqs_listen).unwrap(),
            Some(SocketAddr::from(([127, 0, 0, 1], 9324)))
        );
        assert_eq!(c.sqs_account_id, "000000000000");
        let env = env_of(&[
            ("REDRIVE_SQS_LISTEN", "off"),
            ("REDRIVE_SQS_REGION", "eu-west-1"),
        ]);
        let c = Config::layered(
            Some((Path::new("f.toml"), "sqs_account_id = \"123456789012\"")),
            &env,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(parse_sqs_listen(&c.sqs_listen).unwrap(), None);
        assert_eq!(c.sqs_region, "eu-west-1");
        let keyed = Config {
            sqs_access_keys: vec!["AKID:hunter2".to_owned()],
            ..Config::default()
        };
        assert_eq!(
            keyed.sqs_keys().unwrap(),
            [("AKID".to_owned(), "hunter2".to_owned())]
        );
        assert!(keyed.summary().contains("sqs_access_keys=AKID:***"));
        assert!(!keyed.summary().contains("hunter2"));
        let bad = Config {
            sqs_access_keys: vec!["nosecret".to_owned()],
            ..Config::default()
        };
        assert!(bad.validate().is_err());
        assert_eq!(c.sqs_account_id, "123456789012");
        let e = Overrides::from_env(|k| (k == "REDRIVE_SQS_LISTEN").then(|| "nope".to_owned()))
            .unwrap_err();
        assert!(e.to_string().contains("REDRIVE_SQS_LISTEN"), "{e}");
        let flags = Overrides {
            sqs_account_id: Some("12".to_owned()),
            ..Overrides::default()
        };
        assert!(Config::layered(None, &Overrides::default(), &flags).is_err());
    }

    #[test]
    fn the_console_switch_layers_file_environment_and_flag() {
        let file = "[server]\nconsole = false";
        let path = Path::new("redrive.toml");
        let none = Overrides::default();
        assert!(Config::layered(None, &none, &none).unwrap().server.console);
        assert!(
            !Config::layered(Some((path, file)), &none, &none)
                .unwrap()
                .server
                .console
        );
        let env = env_of(&[("REDRIVE_SERVER_CONSOLE", "on")]);
        assert!(
            Config::layered(Some((path, file)), &env, &none)
                .unwrap()
                .server
                .console
        );
        let flags = Overrides {
            console: Some(false),
            ..Overrides::default()
        };
        assert!(!Config::layered(None, &env, &flags).unwrap().server.console);
        let e = Overrides::from_env(|k| (k == "REDRIVE_SERVER_CONSOLE").then(|| "maybe".into()))
            .unwrap_err();
        assert!(e.to_string().contains("REDRIVE_SERVER_CONSOLE"), "{e}");
    }

    #[test]
    fn listen_addresses_parse() {
        assert_eq!(parse_listen("localhost:80").unwrap().port(), 80);
        assert_eq!(parse_listen("0.0.0.0:7474").unwrap().port(), 7474);
        assert!(parse_listen("7474").is_err());
    }
}
