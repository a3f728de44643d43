//! The MD5 digests SQS returns so that clients can check what was stored:
//! `MD5OfMessageBody` (of the body's UTF-8 bytes), and `MD5OfMessageAttributes` /
//! `MD5OfMessageSystemAttributes`, over the attributes sorted by name, each encoded as
//! name length (4-byte big-endian) + name + data type length + data type + transport type
//! byte (1 for String and Number types, 2 for Binary) + value length + value.

use md5::{Digest, Md5};

/// A message attribute as SQS defines it: a name, a data type (`String`, `Number`,
/// `Binary`, optionally with a `.label`) and a string or binary value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// Attribute name.
    pub name: String,
    /// Data type, with its custom label if any (`Number.int`).
    pub data_type: String,
    /// The value.
    pub value: AttrValue,
}

/// The value of a message attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    /// `StringValue` (String and Number types).
    String(String),
    /// `BinaryValue` (Binary types).
    Binary(Vec<u8>),
}

/// Lower-case hex MD5 of `bytes`.
pub fn md5_hex(bytes: &[u8]) -> String {
    let digest = Md5::digest(bytes);
    let mut out = String::with_capacity(32);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// `MD5OfMessageBody`.
pub fn body_md5(body: &str) -> String {
    md5_hex(body.as_bytes())
}

fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
    // SQS sizes are far below 4 GiB; a longer field cannot occur in a valid message.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(bytes);
}

/// `MD5OfMessageAttributes` (and `MD5OfMessageSystemAttributes`): `None` when there are
/// no attributes, as SQS then omits the field.
pub fn attributes_md5(attrs: &[Attribute]) -> Option<String> {
    if attrs.is_empty() {
        return None;
    }
    let mut sorted: Vec<&Attribute> = attrs.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut buf = Vec::new();
    for a in sorted {
        put(&mut buf, a.name.as_bytes());
        put(&mut buf, a.data_type.as_bytes());
        match &a.value {
            AttrValue::String(s) => {
                buf.push(1);
                put(&mut buf, s.as_bytes());
            }
            AttrValue::Binary(b) => {
                buf.push(2);
                put(&mut buf, b);
            }
        }
    }
    Some(md5_hex(&buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_digest_is_plain_md5() {
        assert_eq!(body_md5(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(body_md5("hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn no_attributes_no_digest() {
        assert_eq!(attributes_md5(&[]), None);
    }
}
