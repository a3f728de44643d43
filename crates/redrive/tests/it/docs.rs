//! The docs test: every command block of README.md and docs/*.md runs, in order, against a
//! real `redrive serve`, as a reader would type it.
//!
//! Each file gets a fresh server (SQLite, loopback push endpoints allowed), a local
//! receiver that stands in for the hosts the docs name (an effect authority that answers
//! `absent`, a dependency probe, a push endpoint that agrees to the validation handshake),
//! and one `bash` whose state (variables, exports, the working directory, background jobs)
//! carries from block to block and command to command: the queue one block creates is the
//! queue the next one uses. The test's own binary is `redrive` on `PATH`, and
//! `REDRIVE_URL` points at the server. `sh`, `bash`, `shell` and `console` blocks run
//! command by command (`console`: the `$ ` lines); `python` blocks run whole with
//! `python3`. Other blocks (`json`, `toml`, `http`, `text`…) are not run; a block without a
//! language is refused.
//!
//! What a block needs besides its text is declared in HTML comments on the lines right
//! above its fence (invisible when rendered); CONTRIBUTING.md ("The docs test") documents
//! them:
//!
//! - `<!-- docs-test: skip: REASON -->`: not run, for the reason given.
//! - `<!-- docs-test: requires: aws|boto3|python3|postgres -->`: without the tool (or
//!   without `REDRIVE_TEST_POSTGRES_URL`) the block is skipped with a printed line; with
//!   `CI` set that is a failure.
//! - `<!-- docs-test: before: SHELL -->`: run in the file's shell before the block (a
//!   fixture file, the consumer the text describes); must succeed.
//! - `<!-- docs-test: TARGET = WORD -->` and `<!-- docs-test: TARGET = WORD at /POINTER -->`:
//!   TARGET (`<name>`, or `"any text"`) in the block is replaced by the value of the shell
//!   word WORD, evaluated in the file's shell just before the first command that holds it
//!   (`at`: WORD's value is JSON and the value is what the JSON pointer names).
//! - `<!-- docs-test: exit N: TEXT -->`: the command holding TEXT exits with N.
//! - `<!-- docs-test: wait: TEXT -->`: the command holding TEXT (or the value of the
//!   target TEXT) is retried until it succeeds (has a value), bounded: it waits on a
//!   server worker that a reader would not outrun.
//! - `<!-- docs-test: server: TEXT -->`: the command holding TEXT is `redrive serve ARGS`:
//!   the test restarts its server with ARGS, on its own addresses and data directory.
//!
//! The shell runs with `pipefail`, and `curl` with `--fail-with-body` (an HTTP error is a
//! failed command). The test fails on: a command that exits non-zero (or any failing
//! command inside one line) unless declared; a placeholder (`<…>`, a word with `…`, a bare `...`) that is
//! not declared; a declaration that names text the block does not hold, or a command it
//! does not have; a declaration not right above a runnable block; a command still running
//! after [`COMMAND_BOUND`]. A failure prints the file, the line, the command as run, its
//! exit status, stderr and stdout; a file stops at its first failure (later blocks build
//! on it), other files go on.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redrive_testkit::{Receiver, Reply};

use crate::support::{BIN, Server, free_port};

/// How long one command may run before it counts as hung (a server started in the
/// foreground, a plan followed to an end that never comes). A bound on a stuck test, not
/// a timing rule: each documented command takes well under a second.
const COMMAND_BOUND: Duration = Duration::from_secs(90);

/// How long a `wait:` command is retried: a bound on a server worker's pass on a busy
/// machine, not a timing rule of the broker.
const WAIT_BOUND: Duration = Duration::from_secs(60);

/// Between two tries of a `wait:` command.
const WAIT_STEP: Duration = Duration::from_millis(100);

/// The block languages that run.
const RUNNABLE: [&str; 5] = ["sh", "bash", "shell", "console", "python"];

/// The block languages that are shown, not run.
const SHOWN: [&str; 11] = [
    "json", "jsonl", "toml", "text", "http", "yaml", "rust", "sql", "diff", "csv", "ini",
];

/// What a declaration may require.
const REQUIREMENTS: [&str; 4] = ["aws", "boto3", "python3", "postgres"];

/// Where the fixture files of `before:` declarations live (`$DOCS_TEST_FIXTURES`).
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/docs-fixtures");

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every docs/*.md, by their paths from the root.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

/// `DOCS_TEST_VERBOSE=1`: every command is printed as run, with what it printed.
fn verbose() -> bool {
    std::env::var_os("DOCS_TEST_VERBOSE").is_some_and(|v| !v.is_empty())
}

fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Straight to stderr: the harness's capture would swallow `eprintln!` from a passing test.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

// ----------------------------------------------------------------------------------------
// Reading a document

#[derive(Debug, Clone, PartialEq)]
enum Decl {
    Skip(String),
    Requires(Vec<String>),
    Before(String),
    Value {
        target: String,
        word: String,
        pointer: Option<String>,
    },
    Exit {
        code: i32,
        text: String,
    },
    Wait(String),
    Server(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Lang {
    Shell,
    Console,
    Python,
}

/// One command of a block: its first line in the file and its text.
#[derive(Debug, Clone)]
struct Command {
    line: usize,
    text: String,
    /// The text without shell comments, where placeholders are looked for.
    code: String,
}

#[derive(Debug)]
struct Block {
    /// The fence's line (1-based).
    line: usize,
    lang: Lang,
    decls: Vec<(usize, Decl)>,
    commands: Vec<Command>,
}

/// A document's runnable blocks, or every mistake found in it (`FILE:LINE: what`).
fn read_document(name: &str, text: &str) -> Result<Vec<Block>, Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut errors = Vec::new();
    let mut blocks = Vec::new();
    // Declarations seen right above the next fence: (line, text).
    let mut pending: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let n = i + 1;
        let trimmed = line.trim();
        if trimmed.starts_with("<!--") && trimmed.contains("docs-test") {
            match trimmed
                .strip_prefix("<!-- docs-test:")
                .and_then(|r| r.strip_suffix("-->"))
            {
                Some(body) => pending.push((n, body.trim().to_owned())),
                None => errors.push(format!(
                    "{name}:{n}: a docs-test declaration is one line, `<!-- docs-test: … -->`"
                )),
            }
            i += 1;
            continue;
        }
        if let Some((indent, fence, info)) = fence_open(line) {
            let end = (i + 1..lines.len()).find(|&j| fence_close(lines[j], &fence));
            let Some(end) = end else {
                errors.push(format!("{name}:{n}: a code fence that is never closed"));
                break;
            };
            let content: Vec<(usize, String)> = (i + 1..end)
                .map(|j| (j + 1, dedent(lines[j], indent)))
                .collect();
            let decls = std::mem::take(&mut pending);
            match block(name, n, &info, decls, &content) {
                Ok(Some(b)) => blocks.push(b),
                Ok(None) => {}
                Err(mut e) => errors.append(&mut e),
            }
            i = end + 1;
            continue;
        }
        if !pending.is_empty() {
            for (d, _) in pending.drain(..) {
                errors.push(format!(
                    "{name}:{d}: a docs-test declaration must be right above the fence of \
                     the block it is about"
                ));
            }
        }
        i += 1;
    }
    for (d, _) in pending {
        errors.push(format!(
            "{name}:{d}: a docs-test declaration with no block below it"
        ));
    }
    if errors.is_empty() {
        Ok(blocks)
    } else {
        Err(errors)
    }
}

/// An opening fence: its indentation, its fence (three or more backticks or tildes) and
/// its info string's first word.
fn fence_open(line: &str) -> Option<(usize, String, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let len = rest.chars().take_while(|&x| x == c).count();
    if len < 3 {
        return None;
    }
    let info = rest[len..]
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned();
    Some((indent, rest[..len].to_owned(), info))
}

fn fence_close(line: &str, fence: &str) -> bool {
    let t = line.trim();
    let c = fence.chars().next().unwrap_or('`');
    t.len() >= fence.len() && t.chars().all(|x| x == c)
}

/// A content line without the fence's indentation.
fn dedent(line: &str, indent: usize) -> String {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    line[spaces.min(indent)..].to_owned()
}

/// Reads one fenced block; `None` when it is not run (a shown language).
fn block(
    name: &str,
    line: usize,
    info: &str,
    raw_decls: Vec<(usize, String)>,
    content: &[(usize, String)],
) -> Result<Option<Block>, Vec<String>> {
    let at = |n: usize, what: String| format!("{name}:{n}: {what}");
    let lang = match info {
        "sh" | "bash" | "shell" => Lang::Shell,
        "console" => Lang::Console,
        "python" => Lang::Python,
        "" => {
            return Err(vec![at(
                line,
                "a code block without a language: name it (`sh` runs; `text`, `json`… are shown)"
                    .into(),
            )]);
        }
        other if SHOWN.contains(&other) => {
            if let Some((d, _)) = raw_decls.first() {
                return Err(vec![at(
                    *d,
                    format!("a docs-test declaration above a `{other}` block, which is not run"),
                )]);
            }
            return Ok(None);
        }
        other => {
            return Err(vec![at(
                line,
                format!(
                    "a code block in `{other}`: the docs test runs {} and shows {}",
                    RUNNABLE.join(", "),
                    SHOWN.join(", ")
                ),
            )]);
        }
    };
    debug_assert!(RUNNABLE.contains(&info));
    let mut errors = Vec::new();
    let mut decls = Vec::new();
    for (n, body) in raw_decls {
        match parse_decl(&body) {
            Ok(d) => decls.push((n, d)),
            Err(e) => errors.push(at(n, e)),
        }
    }
    let commands = match lang {
        Lang::Shell => shell_commands(content).map_err(|(n, e)| vec![at(n, e)]),
        Lang::Console => Ok(console_commands(content)),
        Lang::Python => Ok(vec![Command {
            line: line + 1,
            text: content.iter().map(|(_, l)| format!("{l}\n")).collect(),
            code: content.iter().map(|(_, l)| format!("{l}\n")).collect(),
        }]),
    };
    let commands = match commands {
        Ok(c) => c,
        Err(mut e) => {
            errors.append(&mut e);
            return Err(errors);
        }
    };
    if commands.is_empty() {
        errors.push(at(line, "a runnable block without a command".into()));
    }
    let skipped = decls.iter().any(|(_, d)| matches!(d, Decl::Skip(_)));
    if skipped && decls.len() > 1 {
        errors.push(at(
            line,
            "a skipped block takes no other docs-test declaration".into(),
        ));
    }
    // Every declaration names something the block holds; exit, wait and server name one
    // command each.
    for (n, d) in &decls {
        match d {
            Decl::Value { target, .. } => {
                if !commands.iter().any(|c| c.text.contains(target.as_str())) {
                    errors.push(at(*n, format!("the block does not contain {target:?}")));
                }
                if decls
                    .iter()
                    .filter(|(_, o)| matches!(o, Decl::Value { target: t, .. } if t == target))
                    .count()
                    > 1
                {
                    errors.push(at(*n, format!("{target:?} is declared twice")));
                }
            }
            Decl::Wait(text)
                if decls
                    .iter()
                    .any(|(_, o)| matches!(o, Decl::Value { target, .. } if target == text)) => {}
            Decl::Exit { text, .. } | Decl::Wait(text) | Decl::Server(text) => {
                let holding = commands
                    .iter()
                    .filter(|c| c.text.contains(text.as_str()))
                    .count();
                if holding != 1 {
                    errors.push(at(
                        *n,
                        format!("{text:?} must name one command of the block; it names {holding}"),
                    ));
                }
            }
            _ => {}
        }
    }
    if !skipped {
        let targets: Vec<&str> = decls
            .iter()
            .filter_map(|(_, d)| match d {
                Decl::Value { target, .. } => Some(target.as_str()),
                _ => None,
            })
            .collect();
        for c in &commands {
            for p in placeholders(&c.code, &targets, lang) {
                errors.push(at(
                    c.line,
                    format!(
                        "placeholder {p:?} is not declared: declare its value above the block \
                         (`<!-- docs-test: {} = WORD -->`)",
                        if p.starts_with('<') {
                            p.clone()
                        } else {
                            format!("\"{p}\"")
                        }
                    ),
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(Some(Block {
            line,
            lang,
            decls,
            commands,
        }))
    } else {
        Err(errors)
    }
}

/// One declaration's body (between `docs-test:` and `-->`).
fn parse_decl(body: &str) -> Result<Decl, String> {
    let nonempty = |s: &str, what: &str| {
        let s = s.trim();
        if s.is_empty() {
            Err(format!("`{what}` needs what follows it"))
        } else {
            Ok(s.to_owned())
        }
    };
    if let Some(r) = body.strip_prefix("skip:") {
        return Ok(Decl::Skip(nonempty(r, "skip:")?));
    }
    if let Some(r) = body.strip_prefix("before:") {
        return Ok(Decl::Before(nonempty(r, "before:")?));
    }
    if let Some(r) = body.strip_prefix("wait:") {
        return Ok(Decl::Wait(nonempty(r, "wait:")?));
    }
    if let Some(r) = body.strip_prefix("server:") {
        return Ok(Decl::Server(nonempty(r, "server:")?));
    }
    if let Some(r) = body.strip_prefix("requires:") {
        let names: Vec<String> = r.split_whitespace().map(str::to_owned).collect();
        if names.is_empty() {
            return Err("`requires:` needs what is required".into());
        }
        if let Some(bad) = names.iter().find(|n| !REQUIREMENTS.contains(&n.as_str())) {
            return Err(format!(
                "`requires: {bad}`: the docs test knows {}",
                REQUIREMENTS.join(", ")
            ));
        }
        return Ok(Decl::Requires(names));
    }
    if let Some(r) = body.strip_prefix("exit ") {
        let (code, text) = r
            .split_once(':')
            .ok_or("`exit N: TEXT` names the exit status and the command")?;
        let code: i32 = code
            .trim()
            .parse()
            .map_err(|_| format!("`exit {code}:` is not an exit status"))?;
        if code == 0 {
            return Err("`exit 0` is what every command must do anyway".into());
        }
        return Ok(Decl::Exit {
            code,
            text: nonempty(text, "exit N:")?,
        });
    }
    let (target, rest) = if let Some(r) = body.strip_prefix('<') {
        let end = r.find('>').ok_or("a `<placeholder>` without its `>`")?;
        (format!("<{}>", &r[..end]), &r[end + 1..])
    } else if let Some(r) = body.strip_prefix('"') {
        let end = r
            .find("\" =")
            .ok_or("a quoted target ends with `\" = VALUE`")?;
        (r[..end].to_owned(), &r[end + 1..])
    } else {
        return Err(format!(
            "not a docs-test declaration: {body:?} (skip:, requires:, before:, exit N:, \
             wait:, server:, or TARGET = VALUE)"
        ));
    };
    if target.is_empty() || target == "<>" {
        return Err("an empty target".into());
    }
    let value = rest
        .trim_start()
        .strip_prefix('=')
        .ok_or("a target is followed by `= VALUE`")?
        .trim();
    let (word, pointer) = match value.rsplit_once(" at /") {
        Some((w, p)) if !p.contains(char::is_whitespace) => {
            (w.trim().to_owned(), Some(format!("/{p}")))
        }
        _ => (value.to_owned(), None),
    };
    if word.is_empty() {
        return Err(format!("{target:?} has no value"));
    }
    Ok(Decl::Value {
        target,
        word,
        pointer,
    })
}

/// The commands of a shell block: a command goes on over lines ending in `\`, over open
/// quotes and over here-documents; blank lines and comment lines between commands are left
/// out. `Err` holds the line of a command that never ends.
fn shell_commands(content: &[(usize, String)]) -> Result<Vec<Command>, (usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<Command> = None;
    let mut quote: Option<char> = None;
    let mut heredocs: Vec<(String, bool)> = Vec::new();
    for (n, line) in content {
        if cur.is_none() && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            continue;
        }
        let c = cur.get_or_insert_with(|| Command {
            line: *n,
            text: String::new(),
            code: String::new(),
        });
        c.text.push_str(line);
        c.text.push('\n');
        if let Some((word, strip_tabs)) = heredocs.first() {
            let l = if *strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line.as_str()
            };
            if l == word {
                heredocs.remove(0);
            } else {
                c.code.push_str(line);
                c.code.push('\n');
            }
            if heredocs.is_empty() && quote.is_none() {
                out.extend(cur.take());
            }
            continue;
        }
        let (code, open, docs) = scan_line(line, quote);
        c.code.push_str(&code);
        c.code.push('\n');
        quote = open;
        heredocs.extend(docs);
        let continued = quote.is_some()
            || !heredocs.is_empty()
            || (code.ends_with('\\') && !code.ends_with("\\\\"));
        if !continued {
            out.extend(cur.take());
        }
    }
    if let Some(c) = cur {
        return Err((
            c.line,
            "a command that never ends (open quote, `\\` or here-document)".into(),
        ));
    }
    Ok(out)
}

/// Scans one line of shell from inside `quote` (if any): the line without its comment,
/// the quote still open at its end, and the here-documents it opens (their terminating
/// word, and whether `<<-` strips tabs).
fn scan_line(line: &str, mut quote: Option<char>) -> (String, Option<char>, Vec<(String, bool)>) {
    let chars: Vec<char> = line.chars().collect();
    let mut code = String::new();
    let mut docs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let ch = chars[i];
        match quote {
            Some('\'') => {
                if ch == '\'' {
                    quote = None;
                }
            }
            Some(_) => {
                if ch == '\\' && i + 1 < chars.len() {
                    code.push(ch);
                    i += 1;
                    code.push(chars[i]);
                    i += 1;
                    continue;
                }
                if ch == '"' {
                    quote = None;
                }
            }
            None => {
                if ch == '\\' && i + 1 < chars.len() {
                    code.push(ch);
                    i += 1;
                    code.push(chars[i]);
                    i += 1;
                    continue;
                }
                if ch == '\'' || ch == '"' {
                    quote = Some(ch);
                } else if ch == '#' && (i == 0 || chars[i - 1].is_whitespace()) {
                    break;
                } else if ch == '<'
                    && chars.get(i + 1) == Some(&'<')
                    && chars.get(i + 2) != Some(&'<')
                    && (i == 0 || chars[i - 1] != '<')
                {
                    let mut j = i + 2;
                    let strip = chars.get(j) == Some(&'-');
                    if strip {
                        j += 1;
                    }
                    while chars.get(j) == Some(&' ') {
                        j += 1;
                    }
                    let word: String = chars[j..]
                        .iter()
                        .take_while(|c| !c.is_whitespace() && !";|&<>()".contains(**c))
                        .collect();
                    let bare = word.trim_matches(|c| c == '\'' || c == '"').to_owned();
                    if !bare.is_empty() {
                        docs.push((bare, strip));
                    }
                    code.extend(&chars[i..j]);
                    code.push_str(&word);
                    i = j + word.chars().count();
                    continue;
                }
            }
        }
        code.push(ch);
        i += 1;
    }
    (code.trim_end().to_owned(), quote, docs)
}

/// A console block's commands: its `$ ` lines (a `\` at the end goes on to the next).
fn console_commands(content: &[(usize, String)]) -> Vec<Command> {
    let mut out: Vec<Command> = Vec::new();
    let mut continuing = false;
    for (n, line) in content {
        if continuing {
            if let Some(c) = out.last_mut() {
                c.text.push_str(line);
                c.text.push('\n');
                c.code.push_str(line);
                c.code.push('\n');
            }
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push(Command {
                line: *n,
                text: format!("{cmd}\n"),
                code: format!("{}\n", scan_line(cmd, None).0),
            });
        } else {
            continue;
        }
        continuing = line.ends_with('\\');
    }
    out
}

/// The placeholders in `code` that no target covers: `<name>`, any word holding `…`, and
/// (in shell) an unquoted word ending in `...`.
fn placeholders(code: &str, targets: &[&str], lang: Lang) -> Vec<String> {
    let mut code = code.to_owned();
    for t in targets {
        code = code.replace(t, " ");
    }
    let mut found = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    for (i, &ch) in chars.iter().enumerate() {
        if ch == '<' && (i == 0 || chars[i - 1] != '<') {
            let rest: String = chars[i + 1..].iter().take_while(|&&c| c != '>').collect();
            let closed = chars.get(i + 1 + rest.chars().count()) == Some(&'>');
            let name_like = rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == ' ')
                && !rest.ends_with(' ');
            if closed && name_like {
                found.push(format!("<{rest}>"));
            }
        }
    }
    let word_char = |c: char| !c.is_whitespace() && !"'\"`(){}[],=".contains(c);
    for (i, &ch) in chars.iter().enumerate() {
        if ch == '…' {
            let start = (0..i)
                .rev()
                .take_while(|&j| word_char(chars[j]))
                .last()
                .unwrap_or(i);
            let end = (i..chars.len())
                .take_while(|&j| word_char(chars[j]))
                .last()
                .unwrap_or(i);
            found.push(chars[start..=end].iter().collect());
        }
    }
    if lang != Lang::Python {
        for w in code.split_whitespace() {
            if w.ends_with("...") && !w.contains(['"', '\'']) {
                found.push(w.to_owned());
            }
        }
    }
    found.dedup();
    found
}

// ----------------------------------------------------------------------------------------
// Running a document

/// A `bash` in a process group of its own, fed one command at a time; its stdout carries
/// only the end marker of each command (the commands' own output goes to files).
struct Shell {
    child: Child,
    stdin: ChildStdin,
    marks: mpsc::Receiver<String>,
    dir: PathBuf,
    seq: usize,
}

/// A command's outcome.
struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
    /// Commands inside the line that failed (the shell's ERR trap), as the shell saw them.
    failed_inside: String,
}

impl Shell {
    fn start(dir: &Path, env: &[(&str, String)]) -> Shell {
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["--noprofile", "--norc"])
            .current_dir(dir.join("work"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        for (k, _) in std::env::vars_os()
            .filter(|(k, _)| k.to_string_lossy().starts_with("REDRIVE_"))
            .collect::<Vec<_>>()
        {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, marks) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell {
            child,
            stdin,
            marks,
            dir: dir.to_owned(),
            seq: 0,
        };
        // pipefail: `redrive … | head` fails when redrive does. The ERR trap records a
        // failing command inside a line (`a; b`), which the line's status would hide.
        // curl fails on an HTTP error answer (its body still printed), as the CLI does.
        shell.send(&format!(
            "set -o pipefail; trap 'printf \"%s\\n\" \"$BASH_COMMAND\" >> \"{}/trap\"' ERR; \
             curl() {{ command curl --fail-with-body \"$@\"; }}",
            dir.display()
        ));
        shell
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Runs `script` in the shell (sourced: its variables, exports and `cd` stay); its
    /// stdout becomes `$DOCS_TEST_STDOUT` for what comes next.
    fn run(&mut self, script: &str) -> Result<Ran, String> {
        self.seq += 1;
        let n = self.seq;
        let d = self.dir.display().to_string();
        std::fs::write(self.dir.join(format!("cmd.{n}")), script).unwrap();
        let _ = std::fs::remove_file(self.dir.join("trap"));
        self.send(&format!(
            ". \"{d}/cmd.{n}\" > \"{d}/out.{n}\" 2> \"{d}/err.{n}\" < /dev/null; \
             docs_test_status=$?; DOCS_TEST_STDOUT=\"{d}/out.{n}\"; \
             echo \"docs-test-done {n} $docs_test_status\""
        ));
        let started = Instant::now();
        let status = loop {
            let left = COMMAND_BOUND.saturating_sub(started.elapsed());
            match self.marks.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(&format!("docs-test-done {n} ")) {
                        break rest.trim().parse::<i32>().unwrap_or(-1);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "still running after {COMMAND_BOUND:?}\n  stderr so far:\n{}\n  \
                         stdout so far:\n{}",
                        indent(&self.read(&format!("err.{n}"))),
                        indent(&tail(&self.read(&format!("out.{n}")), 20))
                    ));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "the shell ended (an `exit`?)\nstderr:\n{}",
                        self.read(&format!("err.{n}"))
                    ));
                }
            }
        };
        // The trap also sees the line that sourced the command fail; that one is the
        // status.
        let failed_inside = self
            .read("trap")
            .lines()
            .filter(|l| !l.starts_with(&format!(". \"{d}/cmd.")))
            .map(|l| format!("{l}\n"))
            .collect();
        Ok(Ran {
            status,
            stdout: self.read(&format!("out.{n}")),
            stderr: self.read(&format!("err.{n}")),
            failed_inside,
        })
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }
}

impl Drop for Shell {
    /// Ends the shell and whatever it started in the background (its process group).
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// The server of one document and how it was started.
struct Stage {
    server: Option<Server>,
    data: PathBuf,
    sqs: String,
    schema: Option<redrive_testkit::postgres::SchemaGuard>,
}

impl Stage {
    fn start(&mut self, args: &[String]) -> Result<(), String> {
        if let Some(mut old) = self.server.take() {
            old.terminate();
        }
        let (data, sqs) = (self.data.clone(), self.sqs.clone());
        let args = args.to_vec();
        let started = std::panic::catch_unwind(move || {
            Server::start_with(move |c| {
                c.args(&args)
                    .env("REDRIVE_LISTEN", "127.0.0.1:0")
                    .env("REDRIVE_SQS_LISTEN", &sqs)
                    .env("REDRIVE_DATA_DIR", &data)
                    .env("REDRIVE_PUSH_ALLOWED_NETWORKS", "127.0.0.0/8");
            })
        });
        match started {
            Ok(s) => {
                self.server = Some(s);
                Ok(())
            }
            Err(e) => Err(e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "the server did not start".into())),
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("a running server")
    }
}

/// What a document's run found: failures, and blocks skipped for a missing tool.
#[derive(Default)]
struct Outcome {
    failures: Vec<String>,
    skipped: Vec<String>,
    commands: usize,
}

/// The local stand-in for the hosts the docs name: agrees to the CloudEvents validation
/// handshake; answers a GET (a dependency's probe) with a healthy reading and a POST (an
/// effect authority's question, a push delivery) with `absent`.
async fn stand_in() -> Receiver {
    Receiver::webhook(|_, req| {
        let body = if req.method == axum::http::Method::GET {
            r#"{"error_rate": 0.0, "latency_ms": 1}"#
        } else {
            r#"{"effect": "absent", "evidence": "the docs test's stand-in has no record"}"#
        };
        Reply {
            body: body.as_bytes().to_vec(),
            ..Reply::status(200).header("content-type", "application/json")
        }
    })
    .await
}

/// Runs one document's blocks; `text` is its content.
fn run_document(name: &str, text: &str) -> Outcome {
    let mut outcome = Outcome::default();
    let blocks = match read_document(name, text) {
        Ok(b) => b,
        Err(errors) => {
            outcome.failures = errors;
            return outcome;
        }
    };
    let runs = |b: &Block| !b.decls.iter().any(|(_, d)| matches!(d, Decl::Skip(_)));
    if !blocks.iter().any(runs) {
        return outcome;
    }

    let dir = tempfile::tempdir().unwrap();
    for sub in ["bin", "work", "data"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::os::unix::fs::symlink(BIN, dir.path().join("bin/redrive")).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let receiver = runtime.block_on(stand_in());
    let mut stage = Stage {
        server: None,
        data: dir.path().join("data"),
        sqs: format!("127.0.0.1:{}", free_port()),
        schema: None,
    };
    if let Err(e) = stage.start(&[]) {
        outcome
            .failures
            .push(format!("{name}: the server did not start: {e}"));
        return outcome;
    }
    let path = format!(
        "{}:{}",
        dir.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut shell = Shell::start(
        dir.path(),
        &[
            ("PATH", path),
            ("REDRIVE_URL", stage.server().url.clone()),
            ("DOCS_TEST_RECEIVER", receiver.base.clone()),
            ("DOCS_TEST_SQS_URL", format!("http://{}", stage.sqs)),
            (
                "DOCS_TEST_SERVER_LOG",
                stage.server().log_path().display().to_string(),
            ),
            ("DOCS_TEST_FIXTURES", FIXTURES.to_owned()),
        ],
    );

    for b in &blocks {
        if let Err(failure) = run_block(name, b, &mut shell, &mut stage, &mut outcome) {
            outcome.failures.push(failure);
            break;
        }
    }
    drop(shell);
    drop(stage);
    drop(receiver);
    outcome
}

/// How a failed step is told: where, what ran, and what it said.
fn failure(name: &str, line: usize, what: &str, ran: &str, r: Option<&Ran>) -> String {
    let mut s = format!(
        "{name}:{line}: {what}\n  ran: {}",
        ran.trim_end().replace('\n', "\n       ")
    );
    if let Some(r) = r {
        if r.status == 0 && !r.failed_inside.is_empty() {
            s.push_str(&format!(
                "\n  failed inside: {}",
                r.failed_inside.trim_end()
            ));
        }
        s.push_str(&format!("\n  exit status: {}", r.status));
        s.push_str(&format!("\n  stderr:\n{}", indent(&r.stderr)));
        s.push_str(&format!("\n  stdout:\n{}", indent(&tail(&r.stdout, 40))));
    }
    s
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn run_block(
    name: &str,
    b: &Block,
    shell: &mut Shell,
    stage: &mut Stage,
    outcome: &mut Outcome,
) -> Result<(), String> {
    if b.decls.iter().any(|(_, d)| matches!(d, Decl::Skip(_))) {
        return Ok(());
    }
    for (n, d) in &b.decls {
        if let Decl::Requires(names) = d {
            for req in names {
                let what = format!("{name}:{}: the block (it requires {req})", b.line);
                match requirement(req, &what, stage, shell) {
                    Ok(()) => {}
                    Err(Skip::Because(why)) => {
                        let msg = format!("{what} skipped: {why}");
                        if under_ci() {
                            return Err(format!("{msg}; under CI every block runs (line {n})"));
                        }
                        say(&msg);
                        outcome.skipped.push(msg);
                        return Ok(());
                    }
                    Err(Skip::Said) => {
                        outcome.skipped.push(what);
                        return Ok(());
                    }
                }
            }
        }
    }
    for (n, d) in &b.decls {
        if let Decl::Before(script) = d {
            let r = shell
                .run(script)
                .map_err(|e| failure(name, *n, &format!("`before:` {e}"), script, None))?;
            if r.status != 0 || !r.failed_inside.is_empty() {
                return Err(failure(name, *n, "`before:` failed", script, Some(&r)));
            }
        }
    }
    // Each value is taken when first needed, then used for the rest of the block.
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    for c in &b.commands {
        let mut text = c.text.clone();
        for (n, d) in &b.decls {
            let Decl::Value {
                target,
                word,
                pointer,
            } = d
            else {
                continue;
            };
            if !text.contains(target.as_str()) {
                continue;
            }
            if !values.contains_key(target) {
                let wait = b
                    .decls
                    .iter()
                    .any(|(_, d)| matches!(d, Decl::Wait(t) if t == target));
                let started = Instant::now();
                let v = loop {
                    match value(shell, word, pointer.as_deref()) {
                        Ok(v) => break v,
                        Err(e) if !wait || started.elapsed() > WAIT_BOUND => {
                            let waited = if wait {
                                format!(" (tried for {WAIT_BOUND:?})")
                            } else {
                                String::new()
                            };
                            return Err(format!(
                                "{name}:{n}: the value of {target:?}{waited}: {e}"
                            ));
                        }
                        Err(_) => std::thread::sleep(WAIT_STEP),
                    }
                };
                values.insert(target.clone(), v);
            }
            text = text.replace(target.as_str(), &values[target]);
        }
        let named = |pick: fn(&Decl) -> Option<&String>| {
            b.decls
                .iter()
                .filter_map(|(_, d)| pick(d))
                .any(|t| c.text.contains(t.as_str()))
        };
        let expected = b
            .decls
            .iter()
            .find_map(|(_, d)| match d {
                Decl::Exit { code, text: t } if c.text.contains(t.as_str()) => Some(*code),
                _ => None,
            })
            .unwrap_or(0);
        outcome.commands += 1;
        if named(|d| match d {
            Decl::Server(t) => Some(t),
            _ => None,
        }) {
            restart(name, c.line, &text, shell, stage)?;
            continue;
        }
        let script = match b.lang {
            Lang::Python => {
                let file = shell.dir.join(format!("block-{}.py", c.line));
                std::fs::write(&file, &text).unwrap();
                format!("python3 \"{}\"\n", file.display())
            }
            Lang::Shell | Lang::Console => text.clone(),
        };
        let retry = named(|d| match d {
            Decl::Wait(t) => Some(t),
            _ => None,
        });
        let started = Instant::now();
        let r = loop {
            let r = shell
                .run(&script)
                .map_err(|e| failure(name, c.line, &e, &text, None))?;
            let ok = r.status == expected && (expected != 0 || r.failed_inside.is_empty());
            if ok || !retry || started.elapsed() > WAIT_BOUND {
                break r;
            }
            std::thread::sleep(WAIT_STEP);
        };
        if verbose() {
            say(&failure(name, c.line, "ran", &text, Some(&r)));
        }
        if r.status != expected || (expected == 0 && !r.failed_inside.is_empty()) {
            let what = if expected == 0 {
                "the command failed".to_owned()
            } else {
                format!("the command was declared to exit {expected}")
            };
            let what = if retry {
                format!("{what} (tried for {WAIT_BOUND:?})")
            } else {
                what
            };
            return Err(failure(name, c.line, &what, &text, Some(&r)));
        }
    }
    Ok(())
}

/// A declared value: the shell word evaluated in the document's shell, or the JSON it
/// gives at `pointer`. One line, not empty.
fn value(shell: &mut Shell, word: &str, pointer: Option<&str>) -> Result<String, String> {
    let r = shell.run(&format!(
        "docs_test_value={word}\nprintf '%s' \"$docs_test_value\"\n"
    ))?;
    if r.status != 0 || !r.failed_inside.is_empty() {
        return Err(format!(
            "{word} failed (status {}): {}{}",
            r.status,
            r.failed_inside,
            r.stderr.trim_end()
        ));
    }
    let v = match pointer {
        None => r.stdout.trim().to_owned(),
        Some(p) => {
            let json: serde_json::Value = serde_json::from_str(&r.stdout)
                .map_err(|e| format!("{word} is not JSON ({e}):\n{}", tail(&r.stdout, 20)))?;
            match json.pointer(p) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                other => {
                    return Err(format!(
                        "{word} has no string or number at {p} ({other:?}):\n{}",
                        tail(&r.stdout, 20)
                    ));
                }
            }
        }
    };
    // Empty only when declared so (`""`: the text is left out); a command that printed
    // nothing has failed to give a value.
    if (v.is_empty() && word != "\"\"") || v.contains('\n') {
        return Err(format!("{word} gave {v:?}, not one line of text"));
    }
    Ok(v)
}

/// A `server:` command: `redrive serve ARGS`, run as the document's server.
fn restart(
    name: &str,
    line: usize,
    text: &str,
    shell: &mut Shell,
    stage: &mut Stage,
) -> Result<(), String> {
    let args = text.trim().strip_prefix("redrive serve").ok_or_else(|| {
        failure(
            name,
            line,
            "a `server:` command is `redrive serve ARGS`",
            text,
            None,
        )
    })?;
    // The shell splits and expands the arguments as it would have.
    let r = shell
        .run(&format!("printf '%s\\0' {args}\n"))
        .map_err(|e| failure(name, line, &e, text, None))?;
    if r.status != 0 {
        return Err(failure(name, line, "its arguments", text, Some(&r)));
    }
    let args: Vec<String> = r
        .stdout
        .split('\0')
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    stage.start(&args).map_err(|e| {
        failure(
            name,
            line,
            &format!("the server did not start: {e}"),
            text,
            None,
        )
    })?;
    let s = stage.server();
    let r = shell
        .run(&format!(
            "export REDRIVE_URL={} DOCS_TEST_SERVER_LOG=\"{}\"\n",
            s.url,
            s.log_path().display()
        ))
        .map_err(|e| failure(name, line, &e, text, None))?;
    assert_eq!(r.status, 0, "{}", r.stderr);
    Ok(())
}

/// Whether `req` is there; `Err` says why not.
fn requirement(req: &str, what: &str, stage: &mut Stage, shell: &mut Shell) -> Result<(), Skip> {
    let runs = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    match req {
        "aws" => runs("aws", &["--version"])
            .then_some(())
            .ok_or(Skip::Because(
                "`aws --version` does not run (pip install awscli)",
            )),
        "python3" => runs("python3", &["--version"])
            .then_some(())
            .ok_or(Skip::Because("`python3 --version` does not run")),
        "boto3" => runs("python3", &["-c", "import boto3"])
            .then_some(())
            .ok_or(Skip::Because(
                "python3 cannot import boto3 (pip install boto3)",
            )),
        "postgres" => {
            if stage.schema.is_none() {
                // Under CI a missing database fails here, with the testkit's reason.
                let Some(url) = redrive_testkit::postgres::url(what) else {
                    return Err(Skip::Said);
                };
                let schema = redrive_testkit::postgres::SchemaGuard::fresh(&url);
                let r = shell.run(&format!(
                    "export DOCS_TEST_POSTGRES_STORE='{}'\n",
                    schema.store_url()
                ));
                let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(r.status, 0, "{}", r.stderr);
                stage.schema = Some(schema);
            }
            Ok(())
        }
        other => unreachable!("requirement {other} passed the reading of the declaration"),
    }
}

/// Why a block's requirement is not met.
enum Skip {
    Because(&'static str),
    /// The PostgreSQL test database's own rule said it (and fails under CI).
    Said,
}

// ----------------------------------------------------------------------------------------
// The tests

#[test]
fn every_command_block_of_the_readme_and_the_docs_runs() {
    // DOCS_TEST_ONLY=docs/cases.md runs one document.
    let only = std::env::var("DOCS_TEST_ONLY")
        .ok()
        .filter(|o| !o.is_empty());
    let names: Vec<String> = documents()
        .into_iter()
        .filter(|n| only.as_deref().is_none_or(|o| o == n))
        .collect();
    assert!(
        !names.is_empty(),
        "DOCS_TEST_ONLY={only:?} names no document"
    );
    let outcomes: Vec<(String, Outcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                s.spawn(move || {
                    let text = std::fs::read_to_string(root().join(name)).unwrap();
                    (name.clone(), run_document(name, &text))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for (name, o) in &outcomes {
        say(&format!(
            "docs test: {name}: {} commands run, {} blocks skipped for a missing tool, {} failures",
            o.commands,
            o.skipped.len(),
            o.failures.len()
        ));
        failures.extend(o.failures.iter().cloned());
    }
    assert!(
        failures.is_empty(),
        "the docs test found {} problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A document's problems, read but not run.
fn problems(doc: &str) -> Vec<String> {
    read_document("t.md", doc).err().unwrap_or_default()
}

#[track_caller]
fn refused(doc: &str, line: usize, needle: &str) {
    let found = problems(doc);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with(&format!("t.md:{line}: ")) && p.contains(needle)),
        "expected t.md:{line}: …{needle}…, found {found:#?}\nin:\n{doc}"
    );
}

#[test]
fn the_docs_test_refuses_undeclared_placeholders_and_declarations_that_name_nothing() {
    refused(
        "```sh\nredrive dlq resubmit orders <dead-letter-id>\n```\n",
        2,
        "\"<dead-letter-id>\" is not declared",
    );
    refused(
        "```sh\nredrive token revoke tok_…\n```\n",
        2,
        "\"tok_…\" is not declared",
    );
    refused(
        "```sh\nexport REDRIVE_TOKEN=rdt_…   # the token\n```\n",
        2,
        "\"rdt_…\"",
    );
    refused(
        "```sh\nredrive case claim ...\n```\n",
        2,
        "\"...\" is not declared",
    );
    refused(
        "```sh\ncurl -d '{\"lock_token\":\"lk_…\"}' x\n```\n",
        2,
        "\"lk_…\" is not declared",
    );
    refused(
        "```python\nsqs.get(QueueUrl=\"<url>\")\n```\n",
        2,
        "\"<url>\"",
    );
    // Declared, the same text passes; prose in quotes and comments is not a placeholder.
    assert_eq!(
        problems(
            "<!-- docs-test: <id> = \"$(echo dl_1)\" -->\n```sh\n\
             redrive dlq resubmit orders <id>   # <not> a …placeholder\n\
             redrive case diagnose x --hypothesis \"...\"\n```\n"
        ),
        Vec::<String>::new()
    );

    refused(
        "<!-- docs-test: <id> = \"1\" -->\n```sh\nredrive stats\n```\n",
        1,
        "does not contain \"<id>\"",
    );
    refused(
        "<!-- docs-test: exit 4: replay start -->\n```sh\nredrive stats\n```\n",
        1,
        "names 0",
    );
    refused(
        "<!-- docs-test: wait: redrive -->\n```sh\nredrive stats\nredrive stats --json\n```\n",
        1,
        "names 2",
    );
    refused(
        "<!-- docs-test: exit 0: x -->\n```sh\nx\n```\n",
        1,
        "exit 0",
    );
    refused(
        "<!-- docs-test: requires: jq -->\n```sh\nx\n```\n",
        1,
        "requires: jq",
    );
    refused(
        "<!-- docs-test: frobnicate -->\n```sh\nx\n```\n",
        1,
        "not a docs-test declaration",
    );
    refused(
        "<!-- docs-test: skip: slow -->\n<!-- docs-test: before: true -->\n```sh\nx\n```\n",
        3,
        "skipped block",
    );
    // A declaration is right above its block: not above a blank line, prose, or a shown block.
    refused(
        "<!-- docs-test: skip: slow -->\n\n```sh\nx\n```\n",
        1,
        "right above",
    );
    refused(
        "<!-- docs-test: skip: slow -->\n```json\n{}\n```\n",
        1,
        "not run",
    );
    refused("<!-- docs-test: skip: slow -->\n", 1, "no block below");
    refused(
        "<!-- docs-test: skip: slow\n-->\n```sh\nx\n```\n",
        1,
        "one line",
    );
    // Every block says what it is, in a language the test knows.
    refused("```\nredrive stats\n```\n", 1, "without a language");
    refused("```zsh\nredrive stats\n```\n", 1, "`zsh`");
    refused("```sh\nredrive send q 'open\n```\n", 2, "never ends");
}

#[test]
fn the_docs_test_splits_a_shell_block_into_the_commands_a_reader_types() {
    let doc = "```sh\n\
               # a comment line\n\
               redrive send q \\\n  --message-id a 'x # not a comment'\n\
               \n\
               cat > f <<'TOML'\n[replay]\nmax = 1\nTOML\n\
               redrive send q 'two\nlines'   # a comment\n\
               ```\n";
    let blocks = read_document("t.md", doc).unwrap();
    let commands: Vec<(usize, &str)> = blocks[0]
        .commands
        .iter()
        .map(|c| (c.line, c.text.as_str()))
        .collect();
    assert_eq!(
        commands,
        [
            (
                3,
                "redrive send q \\\n  --message-id a 'x # not a comment'\n"
            ),
            (6, "cat > f <<'TOML'\n[replay]\nmax = 1\nTOML\n"),
            (10, "redrive send q 'two\nlines'   # a comment\n"),
        ]
    );

    // A console block runs its `$ ` lines; the rest is output.
    let doc = "```console\n$ redrive stats\nQUEUE  ACTIVE\n$ redrive send q \\\n  x\nsent\n```\n";
    let blocks = read_document("t.md", doc).unwrap();
    let commands: Vec<(usize, &str)> = blocks[0]
        .commands
        .iter()
        .map(|c| (c.line, c.text.as_str()))
        .collect();
    assert_eq!(
        commands,
        [(2, "redrive stats\n"), (4, "redrive send q \\\n  x\n")]
    );
}

/// Runs a document and returns its failures.
fn failures_of(doc: &str) -> Vec<String> {
    run_document("t.md", doc).failures
}

#[test]
fn the_docs_test_fails_a_command_that_fails_and_keeps_the_shell_from_block_to_block() {
    // State carries over: a variable, a queue, the last command's output.
    let ok = "<!-- docs-test: exit 3: sh -c -->\n\
              ```sh\n\
              Q=docs-q\n\
              redrive queue create \"$Q\"\n\
              sh -c 'exit 3'\n\
              ```\n\
              <!-- docs-test: <seq> = \"$(cat \"$DOCS_TEST_STDOUT\")\" at /results/0/sequence_number -->\n\
              ```bash\n\
              redrive send \"$Q\" hello --json\n\
              redrive peek \"$Q\" --from <seq>\n\
              ```\n";
    assert_eq!(failures_of(ok), Vec::<String>::new());

    // A failing command stops the document, named by its line and shown with its stderr;
    // one that fails inside a line is found as well.
    let bad = "```sh\nredrive stats\nredrive queue show nope; true\nredrive stats\n```\n";
    let found = failures_of(bad);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("t.md:3: the command failed"),
        "{}",
        found[0]
    );
    assert!(found[0].contains("queue_not_found"), "{}", found[0]);

    // A declared exit status is held to: another one fails.
    let wrong = "<!-- docs-test: exit 4: sh -c -->\n```sh\nsh -c 'exit 3'\n```\n";
    let found = failures_of(wrong);
    assert!(
        found[0].starts_with("t.md:3: the command was declared to exit 4"),
        "{found:#?}"
    );
    assert!(found[0].contains("exit status: 3"), "{found:#?}");
}
