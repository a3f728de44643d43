//! The progress of a long operation (a replay plan followed, a move task, an export):
//! on a terminal, one bar fitted to its width and redrawn in place; when the output is
//! piped, one plain line per [`PIPED_INTERVAL`] (and the last one), so a log or a script
//! reads it a line at a time. An operation whose result goes to standard output (an
//! export) shows a bar on standard error when that is a terminal, and nothing otherwise.
//! Times here are the client's wall time, for display only.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The least time between two lines when the output is not a terminal.
pub const PIPED_INTERVAL: Duration = Duration::from_secs(5);

/// One long operation's progress on standard output.
pub struct Progress {
    out: Out,
}

enum Out {
    /// A terminal: the bar redraws in place.
    Bar(ProgressBar),
    /// Piped: a line at most every [`PIPED_INTERVAL`], only when it changed.
    Lines { last: String, at: Option<Instant> },
    /// Nothing: `--json` (which prints the result once at the end), or progress on a
    /// standard error that is not a terminal.
    Quiet,
}

/// Where a long operation stands: done of total, in what unit, and the rest in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// What the operation is (a plan id, "export orders").
    pub name: String,
    /// Units done.
    pub done: u64,
    /// Units in all, if known.
    pub total: Option<u64>,
    /// The unit ("items", "messages", "records").
    pub unit: &'static str,
    /// Rates, window, ETA, status: what follows the count.
    pub detail: String,
}

impl Step {
    /// The step as one plain line: `name: done/total unit; detail`.
    pub fn line(&self) -> String {
        let count = match self.total {
            Some(t) => format!("{}/{t}", self.done),
            None => self.done.to_string(),
        };
        if self.detail.is_empty() {
            format!("{}: {count} {}", self.name, self.unit)
        } else {
            format!("{}: {count} {}; {}", self.name, self.unit, self.detail)
        }
    }
}

impl Progress {
    /// A progress display on standard output: a bar on a terminal, lines otherwise,
    /// nothing with `quiet` (`--json`, which prints the result once at the end).
    pub fn stdout(quiet: bool) -> Progress {
        let out = if quiet {
            Out::Quiet
        } else if std::io::stdout().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
            bar.set_style(style(false));
            Out::Bar(bar)
        } else {
            Out::Lines {
                last: String::new(),
                at: None,
            }
        };
        Progress { out }
    }

    /// A progress display on standard error, for an operation whose result goes to
    /// standard output or a file and that says what it did when it ends (an export): a
    /// bar when standard error is a terminal, nothing otherwise (a script reading standard
    /// error takes a line there for a warning).
    pub fn stderr() -> Progress {
        let out = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(style(false));
            Out::Bar(bar)
        } else {
            Out::Quiet
        };
        Progress { out }
    }

    /// Shows `step`: the bar redrawn, or a line when the last one is old enough and this
    /// one says something new.
    pub fn show(&mut self, step: &Step) {
        match &mut self.out {
            Out::Bar(bar) => {
                if let Some(t) = step.total.filter(|t| bar.length() != Some(*t)) {
                    bar.set_style(style(true));
                    bar.set_length(t);
                }
                bar.set_prefix(format!("{} ", step.name));
                bar.set_position(step.done);
                bar.set_message(format!("{} {}", step.unit, step.detail));
            }
            Out::Lines { last, at } => {
                let line = step.line();
                let due = at.is_none_or(|t| t.elapsed() >= PIPED_INTERVAL);
                if due && line != *last {
                    println_flushed(&line);
                    *last = line;
                    *at = Some(Instant::now());
                }
            }
            Out::Quiet => {}
        }
    }

    /// Ends the display with `step` as its last state, always shown (the bar is left on
    /// the screen; piped, the last line is printed unless it was the one before).
    pub fn finish(self, step: &Step) {
        match self.out {
            Out::Bar(bar) => {
                if let Some(t) = step.total {
                    bar.set_length(t);
                }
                bar.set_position(step.done);
                bar.set_message(format!("{} {}", step.unit, step.detail));
                bar.finish();
            }
            Out::Lines { last, .. } => {
                let line = step.line();
                if line != last {
                    println_flushed(&line);
                }
            }
            Out::Quiet => {}
        }
    }
}

fn println_flushed(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The bar when the total is known.
const WITH_TOTAL: &str = "{prefix}[{bar:24}] {pos}/{len} {wide_msg}";
/// A spinner and the count when it is not.
const COUNT_ONLY: &str = "{prefix}{spinner} {pos} {wide_msg}";

/// The bar's look: the name, then a bar with done/total when the total is known, else
/// a spinner and the count; the detail takes the rest of the width and is cut to fit.
fn style(with_total: bool) -> ProgressStyle {
    let template = if with_total { WITH_TOTAL } else { COUNT_ONLY };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_reads_as_one_line_with_or_without_a_total() {
        let mut s = Step {
            name: "plan_1".into(),
            done: 3,
            total: Some(10),
            unit: "items",
            detail: "2 in flight; eta 7s; running".into(),
        };
        assert_eq!(s.line(), "plan_1: 3/10 items; 2 in flight; eta 7s; running");
        s.total = None;
        s.detail.clear();
        assert_eq!(s.line(), "plan_1: 3 items");
    }

    #[test]
    fn both_bar_templates_are_valid() {
        for t in [WITH_TOTAL, COUNT_ONLY] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }
}
