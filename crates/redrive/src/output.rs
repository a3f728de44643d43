//! Human-readable output: aligned tables, key/value blocks, body previews, and the JSON
//! printer used by `--json`.

use std::fmt::Write as _;

use serde::Serialize;

/// A table with a header row; numeric-looking cells are right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<I, S>(headers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are empty, extra cells are dropped).
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns and no trailing spaces.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        let mut numeric = vec![true; n];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
                if !cell.is_empty() && !looks_numeric(cell) {
                    numeric[i] = false;
                }
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                let pad = widths[i].saturating_sub(cell.chars().count());
                if numeric[i] {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.headers, &mut out);
        for row in &self.rows {
            line(row, &mut out);
        }
        out
    }
}

fn looks_numeric(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b',')
}

/// A block of `key: value` lines, keys aligned.
#[derive(Debug, Default)]
pub struct KeyValues {
    pairs: Vec<(String, String)>,
}

impl KeyValues {
    /// An empty block.
    pub fn new() -> Self {
        KeyValues::default()
    }

    /// Appends a pair.
    pub fn add(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.pairs.push((key.into(), value.into()));
        self
    }

    /// Appends a pair when the value is present.
    pub fn add_opt(
        &mut self,
        key: impl Into<String>,
        value: Option<impl Into<String>>,
    ) -> &mut Self {
        if let Some(v) = value {
            self.pairs.push((key.into(), v.into()));
        }
        self
    }

    /// Renders, one pair per line.
    pub fn render(&self) -> String {
        let width = self
            .pairs
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (k, v) in &self.pairs {
            let _ = writeln!(
                out,
                "{k:<width$}  {v}",
                width = width + 1,
                k = format!("{k}:")
            );
        }
        out
    }
}

/// A one-line preview of a body: newlines and tabs escaped, cut at `max` characters.
pub fn preview(body: &str, max: usize) -> String {
    let escaped: String = body
        .chars()
        .flat_map(|c| match c {
            '\n' => vec!['\\', 'n'],
            '\r' => vec!['\\', 'r'],
            '\t' => vec!['\\', 't'],
            c if c.is_control() => vec!['?'],
            c => vec![c],
        })
        .collect();
    if escaped.chars().count() <= max {
        escaped
    } else {
        let cut: String = escaped.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// A preview of a body carried with its encoding (`base64` bodies are not decoded).
pub fn body_preview(body: &str, encoding: redrive_api::message::BodyEncoding) -> String {
    match encoding {
        redrive_api::message::BodyEncoding::Utf8 => preview(body, 40),
        redrive_api::message::BodyEncoding::Base64 => format!("<base64, {} chars>", body.len()),
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{text}");
    Ok(())
}

/// An optional value or `-`.
pub fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_text_left_and_numbers_right() {
        let mut t = Table::new(["NAME", "ACTIVE", "NOTE"]);
        t.row(["orders", "12", "x"]);
        t.row(["a", "3", ""]);
        assert_eq!(
            t.render(),
            "NAME    ACTIVE  NOTE\norders      12  x\na            3\n"
        );
    }

    #[test]
    fn rows_are_padded_to_the_header_width() {
        let mut t = Table::new(["A", "B"]);
        t.row(["1"]);
        assert_eq!(t.render(), "A  B\n1\n");
    }

    #[test]
    fn key_values_align_keys() {
        let mut kv = KeyValues::new();
        kv.add("name", "orders").add("max_delivery_count", "10");
        kv.add_opt("absent", None::<String>);
        assert_eq!(
            kv.render(),
            "name:                orders\nmax_delivery_count:  10\n"
        );
    }

    #[test]
    fn previews_escape_and_cut() {
        assert_eq!(preview("a\nb", 10), "a\\nb");
        assert_eq!(preview("abcdefghij", 5), "abcd…");
        assert_eq!(preview("abc", 3), "abc");
    }
}
