//! The signature of a failure description: the description with its variable parts (ids,
//! numbers, timestamps) masked, so that dead letters that failed the same way compare
//! equal (`no amount in order ord_7Hx91KzQ` and `no amount in order ord_3Jd82LpA` are both
//! `no amount in order <id>`). A case group selects cases by it.
//!
//! The rule, per token (a run of letters, digits and `_ . : - /`, other characters kept
//! as they are):
//! 1. a token with no digit is kept;
//! 2. a token with digits and no letter (`42`, `3.14`, `2026-12-06`, `10:00:01`) is `<n>`;
//! 3. a token with digits and letters of at least six characters (`ord_7Hx91KzQ`, a UUID,
//!    `2026-12-06T10:00:00Z`) is `<id>`;
//! 4. a shorter token with digits and letters (`v2`, `5xx`, `s3`) is kept: it names a
//!    kind, not an instance.
//!
//! Runs of white space become one space and the ends are trimmed. The longest signature
//! is [`MAX_SIGNATURE_LEN`] bytes (a longer one is cut at a character boundary).

/// The longest signature, bytes.
pub const MAX_SIGNATURE_LEN: usize = 512;

fn is_token_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '-' | '/')
}

fn mask(token: &str, out: &mut String) {
    let digits = token.chars().any(|c| c.is_ascii_digit());
    let letters = token.chars().any(char::is_alphabetic);
    if !digits {
        out.push_str(token);
    } else if !letters {
        // Trailing punctuation of a sentence stays outside the mask.
        let trimmed = token.trim_end_matches(['.', ':', '-', '/']);
        out.push_str("<n>");
        out.push_str(&token[trimmed.len()..]);
    } else if token.chars().count() >= 6 {
        out.push_str("<id>");
    } else {
        out.push_str(token);
    }
}

/// The signature of `description` (empty for none).
pub fn signature(description: Option<&str>) -> String {
    let Some(d) = description else {
        return String::new();
    };
    let mut out = String::with_capacity(d.len().min(MAX_SIGNATURE_LEN));
    let mut token = String::new();
    let mut space = false;
    for c in d.chars() {
        if is_token_char(c) {
            if token.is_empty() && space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            token.push(c);
            continue;
        }
        if !token.is_empty() {
            mask(&token, &mut out);
            token.clear();
        }
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        out.push(c);
    }
    if !token.is_empty() {
        mask(&token, &mut out);
    }
    // Spaces are written before what follows them, never at the ends.
    cut(out)
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_SIGNATURE_LEN {
        let mut end = MAX_SIGNATURE_LEN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sig(s: &str) -> String {
        signature(Some(s))
    }

    #[test]
    fn instances_of_one_failure_share_a_signature() {
        assert_eq!(
            sig("no amount in order ord_7Hx91KzQ"),
            "no amount in order <id>"
        );
        assert_eq!(
            sig("no amount in order ord_7Hx91KzQ"),
            sig("no amount in order ord_3Jd82LpA")
        );
        assert_eq!(
            sig("timeout after 3012 ms at 2026-12-06T10:00:00Z"),
            "timeout after <n> ms at <id>"
        );
        assert_eq!(
            sig("row 3 of 17: 'amount' is 4.5, expected an integer."),
            "row <n> of <n>: 'amount' is <n>, expected an integer."
        );
        assert_eq!(
            sig("payment 0f8fad5b-d9cb-469f-a165-70867728950e declined"),
            "payment <id> declined"
        );
    }

    #[test]
    fn kinds_and_words_are_kept() {
        assert_eq!(
            sig("upstream 5xx from s3 (v2 api)"),
            "upstream 5xx from s3 (v2 api)"
        );
        assert_eq!(sig("HTTP 503"), "HTTP <n>");
        assert_eq!(sig("bad payload"), "bad payload");
    }

    #[test]
    fn white_space_is_folded_and_trimmed_and_none_is_empty() {
        assert_eq!(sig("  no   amount\n\tin 42  "), "no amount in <n>");
        assert_eq!(signature(None), "");
        assert_eq!(sig(""), "");
    }

    #[test]
    fn a_long_description_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_SIGNATURE_LEN);
        let s = sig(&long);
        assert!(s.len() <= MAX_SIGNATURE_LEN && s.len() >= MAX_SIGNATURE_LEN - 1);
    }

    proptest! {
        /// A signature is stable: masking it again changes nothing, and it never holds a
        /// token of six or more characters with a digit in it.
        #[test]
        fn a_signature_is_its_own_signature(d in "[ -~]{0,200}") {
            let s = sig(&d);
            prop_assert_eq!(sig(&s), s.clone());
            for t in s.split(|c: char| !is_token_char(c)) {
                prop_assert!(!(t.chars().count() >= 6 && t.chars().any(|c| c.is_ascii_digit())));
            }
        }

        /// Numbers in the same places give the same signature.
        #[test]
        fn numbers_do_not_change_a_signature(a in 0u64..1_000_000, b in 0u64..1_000_000) {
            prop_assert_eq!(
                sig(&format!("order {a} failed after {b} tries")),
                sig(&format!("order {b} failed after {a} tries"))
            );
        }
    }
}
