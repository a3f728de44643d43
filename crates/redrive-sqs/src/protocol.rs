//! The two wire protocols of SQS, reduced to one: every request becomes a JSON object in the
//! shape of the AWS JSON 1.0 input, every answer is built as the JSON 1.0 output and then
//! written either as JSON or as the query protocol's XML.
//!
//! - AWS JSON 1.0: `X-Amz-Target: AmazonSQS.<Action>`, body `application/x-amz-json-1.0`.
//! - Query: form-encoded `Action=<Action>&...` (POST body or GET query string). Lists and
//!   maps are flattened (`Attribute.1.Name`, `MessageAttribute.1.Value.StringValue`,
//!   `SendMessageBatchRequestEntry.2.Id`); they are folded back into the JSON shapes here.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::error::{ErrorKind, SqsError, SqsResult};

/// The XML namespace of SQS query responses.
pub const XMLNS: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

/// Which protocol a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0.
    Json,
    /// The query protocol (XML answers).
    Query,
}

/// A decoded request: the protocol, the action and its input in the JSON 1.0 shape.
#[derive(Debug, Clone)]
pub struct Request {
    /// The protocol, which decides the answer's format.
    pub protocol: Protocol,
    /// The action name (`SendMessage`).
    pub action: String,
    /// The input.
    pub input: Map<String, Value>,
}

/// Decodes a request; errors are answered in the protocol the request looked like.
pub fn decode(
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Request, (Protocol, SqsError)> {
    if let Some(target) = headers.get("x-amz-target") {
        let target = target.to_str().unwrap_or_default();
        let action = target
            .strip_prefix("AmazonSQS.")
            .ok_or_else(|| {
                (
                    Protocol::Json,
                    SqsError::new(
                        ErrorKind::UnsupportedOperation,
                        format!("Unknown target {target:?}: this endpoint serves AmazonSQS only."),
                    ),
                )
            })?
            .to_owned();
        let input = if body.iter().all(u8::is_ascii_whitespace) {
            Map::new()
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(m)) => m,
                Ok(_) | Err(_) => {
                    return Err((
                        Protocol::Json,
                        SqsError::new(
                            ErrorKind::MalformedRequest,
                            "The request body is not a JSON object.",
                        ),
                    ));
                }
            }
        };
        return Ok(Request {
            protocol: Protocol::Json,
            action,
            input,
        });
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(q) = query {
        parse_form(q.as_bytes(), &mut pairs).map_err(|e| (Protocol::Query, e))?;
    }
    parse_form(body, &mut pairs).map_err(|e| (Protocol::Query, e))?;
    let Some(action) = pairs
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
    else {
        return Err((Protocol::Query, SqsError::missing("Action")));
    };
    let input = form_to_json(pairs.into_iter().filter(|(k, _)| k != "Action"))
        .map_err(|e| (Protocol::Query, e))?;
    Ok(Request {
        protocol: Protocol::Query,
        action,
        input,
    })
}

/// Most parameters in one query-protocol request (query string and body together). The
/// largest real request, a `SendMessageBatch` of 10 entries with 10 message attributes
/// each, has about 350.
pub const MAX_PARAMETERS: usize = 2_000;

/// Longest parameter name, in bytes after percent-decoding. Real names are under 80.
pub const MAX_KEY_BYTES: usize = 256;

/// Most dot-separated segments in a parameter name. The deepest real name,
/// `SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue`, has 6.
pub const MAX_KEY_SEGMENTS: usize = 8;

/// Splits a form-encoded text (`a=1&b=2`) into decoded pairs, appending to `pairs`. Every
/// bound is checked on the raw bytes of a pair before it is decoded; names and values must
/// be UTF-8 once percent-decoded (nothing is replaced). A value is bounded by the request
/// body limit only, since a message body is one value.
pub fn parse_form(raw: &[u8], pairs: &mut Vec<(String, String)>) -> SqsResult<()> {
    for part in raw.split(|b| *b == b'&') {
        if part.is_empty() {
            continue;
        }
        if pairs.len() >= MAX_PARAMETERS {
            return Err(SqsError::new(
                ErrorKind::MalformedRequest,
                format!("The request has more than {MAX_PARAMETERS} parameters."),
            ));
        }
        let (k, v) = match part.iter().position(|b| *b == b'=') {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => (part, &[][..]),
        };
        // A percent-encoded byte takes 3 raw bytes.
        if k.len() > 3 * MAX_KEY_BYTES {
            return Err(key_too_long());
        }
        let key = percent_decode(k).ok_or_else(|| {
            SqsError::new(
                ErrorKind::MalformedRequest,
                "A parameter name is not valid UTF-8 once percent-decoded.",
            )
        })?;
        if key.len() > MAX_KEY_BYTES {
            return Err(key_too_long());
        }
        check_segments(&key)?;
        let value = percent_decode(v).ok_or_else(|| not_utf8(&key))?;
        pairs.push((key, value));
    }
    Ok(())
}

fn key_too_long() -> SqsError {
    SqsError::new(
        ErrorKind::MalformedRequest,
        format!("A parameter name is longer than {MAX_KEY_BYTES} bytes."),
    )
}

fn check_segments(key: &str) -> SqsResult<()> {
    if key.bytes().filter(|b| *b == b'.').count() >= MAX_KEY_SEGMENTS {
        return Err(SqsError::new(
            ErrorKind::MalformedRequest,
            format!(
                "The parameter name {key} has more than {MAX_KEY_SEGMENTS} dot-separated parts."
            ),
        ));
    }
    Ok(())
}

/// The refusal of a value that is not UTF-8: SQS's `InvalidMessageContents` for a message
/// body, `InvalidParameterValue` for any other parameter.
fn not_utf8(key: &str) -> SqsError {
    if key == "MessageBody" || key.ends_with(".MessageBody") {
        SqsError::new(
            ErrorKind::InvalidMessageContents,
            "Invalid binary character in the message body: it is not valid UTF-8.",
        )
    } else {
        SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!("Value for parameter {key} is invalid. Reason: it is not valid UTF-8."),
        )
    }
}

/// Decodes one form component to text; `None` when the bytes are not UTF-8.
fn percent_decode(raw: &[u8]) -> Option<String> {
    String::from_utf8(form_bytes(raw)).ok()
}

/// Decodes one form component to bytes: `+` is a space, `%XX` a byte (a `%` not followed
/// by two hex digits stays as it is, as browsers do).
pub(crate) fn form_bytes(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'+' {
            out.push(b' ');
        } else if b == b'%'
            && let Some(&[h, l]) = raw.get(i + 1..i + 3)
            && let (Some(h), Some(l)) = (hex_digit(h), hex_digit(l))
        {
            out.push(h << 4 | l);
            i += 2;
        } else {
            out.push(b);
        }
        i += 1;
    }
    out
}

/// The value of an ASCII hex digit.
pub(crate) fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Folds flattened query parameters into the JSON 1.0 input shape. Names deeper than
/// [`MAX_KEY_SEGMENTS`] are refused, which bounds the depth of the folding.
pub fn form_to_json(
    pairs: impl Iterator<Item = (String, String)>,
) -> SqsResult<Map<String, Value>> {
    let mut root = Map::new();
    for (k, v) in pairs {
        check_segments(&k)?;
        let parts: Vec<&str> = k.split('.').collect();
        insert_path(&mut root, &parts, v);
    }
    let Value::Object(m) = normalize(Value::Object(root)) else {
        return Ok(Map::new());
    };
    Ok(m)
}

fn insert_path(obj: &mut Map<String, Value>, parts: &[&str], v: String) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    if rest.is_empty() {
        obj.insert((*first).to_owned(), Value::String(v));
        return;
    }
    let slot = obj
        .entry((*first).to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(m) = slot {
        insert_path(m, rest, v);
    }
}

/// Objects keyed by indexes become arrays (ordered by index); flattened names get their
/// JSON names; `{Name, Value}` / `{Key, Value}` lists become maps.
fn normalize(v: Value) -> Value {
    let Value::Object(m) = v else { return v };
    if !m.is_empty() && m.keys().all(|k| k.parse::<u32>().is_ok()) {
        let mut items: Vec<(u32, Value)> = m
            .into_iter()
            .filter_map(|(k, v)| k.parse().ok().map(|i| (i, normalize(v))))
            .collect();
        items.sort_by_key(|(i, _)| *i);
        return Value::Array(items.into_iter().map(|(_, v)| v).collect());
    }
    let mut out = Map::new();
    for (k, v) in m {
        let v = normalize(v);
        let (name, v) = match k.as_str() {
            "Attribute" => ("Attributes".to_owned(), pairs_to_map(v, "Name")),
            "Tag" => ("Tags".to_owned(), pairs_to_map(v, "Key")),
            "MessageAttribute" => ("MessageAttributes".to_owned(), pairs_to_map(v, "Name")),
            "MessageSystemAttribute" => (
                "MessageSystemAttributes".to_owned(),
                pairs_to_map(v, "Name"),
            ),
            "AttributeName" => ("AttributeNames".to_owned(), to_list(v)),
            "MessageAttributeName" => ("MessageAttributeNames".to_owned(), to_list(v)),
            "MessageSystemAttributeName" => ("MessageSystemAttributeNames".to_owned(), to_list(v)),
            "TagKey" => ("TagKeys".to_owned(), to_list(v)),
            k if k.ends_with("BatchRequestEntry") => ("Entries".to_owned(), to_list(v)),
            _ => (k, v),
        };
        out.insert(name, v);
    }
    Value::Object(out)
}

fn to_list(v: Value) -> Value {
    match v {
        Value::Array(_) => v,
        other => Value::Array(vec![other]),
    }
}

fn pairs_to_map(v: Value, key: &str) -> Value {
    let items = match v {
        Value::Array(a) => a,
        other => vec![other],
    };
    let mut m = Map::new();
    for it in items {
        if let Value::Object(mut o) = it
            && let Some(Value::String(k)) = o.remove(key)
        {
            m.insert(k, o.remove("Value").unwrap_or(Value::Null));
        }
    }
    Value::Object(m)
}

/// A new request id in the UUID form AWS uses.
pub fn request_id() -> String {
    redrive_core::id::new_message_id()
}

/// Renders a successful answer.
pub fn success(protocol: Protocol, action: &str, out: Value, request_id: &str) -> Response {
    match protocol {
        Protocol::Json => {
            let body = serde_json::to_vec(&out).unwrap_or_else(|_| b"{}".to_vec());
            let mut resp = (StatusCode::OK, body).into_response();
            set(&mut resp, header::CONTENT_TYPE.as_str(), JSON_CT);
            set(&mut resp, "x-amzn-requestid", request_id);
            resp
        }
        Protocol::Query => {
            let mut xml = String::with_capacity(256);
            xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
            xml.push_str(&format!("<{action}Response xmlns=\"{XMLNS}\">"));
            if !NO_RESULT.contains(&action) {
                xml.push_str(&format!("<{action}Result>"));
                if let Value::Object(m) = &out {
                    write_members(&mut xml, action, m);
                }
                xml.push_str(&format!("</{action}Result>"));
            }
            xml.push_str("<ResponseMetadata><RequestId>");
            xml.push_str(&escape(request_id));
            xml.push_str("</RequestId></ResponseMetadata>");
            xml.push_str(&format!("</{action}Response>"));
            let mut resp = (StatusCode::OK, xml).into_response();
            set(&mut resp, header::CONTENT_TYPE.as_str(), "text/xml");
            set(&mut resp, "x-amzn-requestid", request_id);
            resp
        }
    }
}

const JSON_CT: &str = "application/x-amz-json-1.0";

/// Actions whose query answer has no `<…Result>` element.
const NO_RESULT: &[&str] = &[
    "DeleteQueue",
    "SetQueueAttributes",
    "DeleteMessage",
    "ChangeMessageVisibility",
    "PurgeQueue",
    "TagQueue",
    "UntagQueue",
    "AddPermission",
    "RemovePermission",
];

/// Renders an error answer.
pub fn failure(protocol: Protocol, e: &SqsError, request_id: &str) -> Response {
    let status = StatusCode::from_u16(e.kind.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let query_error = format!("{};{}", e.kind.code(), e.kind.fault());
    let mut resp = match protocol {
        Protocol::Json => {
            let body = serde_json::json!({
                "__type": format!("com.amazonaws.sqs#{}", e.kind.shape()),
                "message": e.message,
            });
            let mut r = (status, body.to_string()).into_response();
            set(&mut r, header::CONTENT_TYPE.as_str(), JSON_CT);
            r
        }
        Protocol::Query => {
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ErrorResponse xmlns=\"{XMLNS}\">\
                 <Error><Type>{}</Type><Code>{}</Code><Message>{}</Message><Detail/></Error>\
                 <RequestId>{}</RequestId></ErrorResponse>",
                e.kind.fault(),
                escape(e.kind.code()),
                escape(&e.message),
                escape(request_id)
            );
            let mut r = (status, xml).into_response();
            set(&mut r, header::CONTENT_TYPE.as_str(), "text/xml");
            r
        }
    };
    set(&mut resp, "x-amzn-query-error", &query_error);
    set(&mut resp, "x-amzn-requestid", request_id);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        set(&mut resp, header::RETRY_AFTER.as_str(), "1");
    }
    resp
}

fn set(resp: &mut Response, name: &str, value: &str) {
    if let (Ok(n), Ok(v)) = (
        axum::http::HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        resp.headers_mut().insert(n, v);
    }
}

/// Escapes text for XML. `\r` is written as a character reference so that XML parsers
/// keep it (they would normalise a literal CR away); other characters SQS allows are
/// written as they are.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
    out
}

fn write_members(xml: &mut String, action: &str, m: &Map<String, Value>) {
    for (k, v) in m {
        write_member(xml, action, k, v);
    }
}

fn element(xml: &mut String, name: &str, inner: &str) {
    xml.push('<');
    xml.push_str(name);
    xml.push('>');
    xml.push_str(inner);
    xml.push_str("</");
    xml.push_str(name);
    xml.push('>');
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => escape(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

fn write_member(xml: &mut String, action: &str, key: &str, v: &Value) {
    match (key, v) {
        ("QueueUrls" | "queueUrls", Value::Array(items)) => {
            for it in items {
                element(xml, "QueueUrl", &scalar(it));
            }
        }
        ("Attributes", Value::Object(m)) => {
            for (name, val) in m {
                xml.push_str("<Attribute>");
                element(xml, "Name", &escape(name));
                element(xml, "Value", &scalar(val));
                xml.push_str("</Attribute>");
            }
        }
        ("Tags", Value::Object(m)) => {
            for (name, val) in m {
                xml.push_str("<Tag>");
                element(xml, "Key", &escape(name));
                element(xml, "Value", &scalar(val));
                xml.push_str("</Tag>");
            }
        }
        ("MessageAttributes", Value::Object(m)) => {
            for (name, val) in m {
                xml.push_str("<MessageAttribute>");
                element(xml, "Name", &escape(name));
                xml.push_str("<Value>");
                if let Value::Object(inner) = val {
                    write_members(xml, action, inner);
                }
                xml.push_str("</Value>");
                xml.push_str("</MessageAttribute>");
            }
        }
        (list, Value::Array(items)) => {
            let item_name = match list {
                "Messages" => "Message".to_owned(),
                "Successful" => format!("{action}ResultEntry"),
                "Failed" => "BatchResultErrorEntry".to_owned(),
                "Results" => format!("{action}ResultEntry"),
                other => other.to_owned(),
            };
            for it in items {
                match it {
                    Value::Object(m) => {
                        xml.push('<');
                        xml.push_str(&item_name);
                        xml.push('>');
                        write_members(xml, action, m);
                        xml.push_str("</");
                        xml.push_str(&item_name);
                        xml.push('>');
                    }
                    other => element(xml, &item_name, &scalar(other)),
                }
            }
        }
        (name, Value::Object(m)) => {
            xml.push('<');
            xml.push_str(name);
            xml.push('>');
            write_members(xml, action, m);
            xml.push_str("</");
            xml.push_str(name);
            xml.push('>');
        }
        (_, Value::Null) => {}
        (name, other) => element(xml, name, &scalar(other)),
    }
}

// ---- reading parameters -----------------------------------------------------------------

/// A string parameter.
pub fn opt_str<'a>(input: &'a Map<String, Value>, key: &str) -> SqsResult<Option<&'a str>> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(SqsError::invalid_param(key, other, "must be a string")),
    }
}

/// A required string parameter.
pub fn req_str<'a>(input: &'a Map<String, Value>, key: &str) -> SqsResult<&'a str> {
    opt_str(input, key)?.ok_or_else(|| SqsError::missing(key))
}

/// An integer parameter: a JSON number, or a decimal string (query protocol).
pub fn opt_int(input: &Map<String, Value>, key: &str) -> SqsResult<Option<i64>> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| SqsError::invalid_param(key, n, "must be an integer")),
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| SqsError::invalid_param(key, s, "must be an integer")),
        Some(other) => Err(SqsError::invalid_param(key, other, "must be an integer")),
    }
}

/// A list of strings (absent = empty).
pub fn str_list(input: &Map<String, Value>, key: &str) -> SqsResult<Vec<String>> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(SqsError::invalid_param(
                    key,
                    other,
                    "must be a list of strings",
                )),
            })
            .collect(),
        Some(other) => Err(SqsError::invalid_param(
            key,
            other,
            "must be a list of strings",
        )),
    }
}

/// A map of strings to strings (absent = empty), in the request's order.
pub fn str_map(input: &Map<String, Value>, key: &str) -> SqsResult<Vec<(String, String)>> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(n) => Ok((k.clone(), n.to_string())),
                Value::Bool(b) => Ok((k.clone(), b.to_string())),
                other => Err(SqsError::invalid_param(
                    key,
                    other,
                    "values must be strings",
                )),
            })
            .collect(),
        Some(other) => Err(SqsError::invalid_param(key, other, "must be a map")),
    }
}

/// A list of objects (absent = empty).
pub fn obj_list<'a>(
    input: &'a Map<String, Value>,
    key: &str,
) -> SqsResult<Vec<&'a Map<String, Value>>> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Object(m) => Ok(m),
                other => Err(SqsError::invalid_param(
                    key,
                    other,
                    "must be a list of structures",
                )),
            })
            .collect(),
        Some(other) => Err(SqsError::invalid_param(key, other, "must be a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattened_query_parameters_fold_into_json_shapes() {
        let pairs = [
            ("QueueName", "q"),
            ("Attribute.1.Name", "VisibilityTimeout"),
            ("Attribute.1.Value", "40"),
            ("Attribute.2.Name", "DelaySeconds"),
            ("Attribute.2.Value", "1"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "a"),
            ("AttributeName.1", "All"),
            ("SendMessageBatchRequestEntry.2.Id", "b"),
            ("SendMessageBatchRequestEntry.1.Id", "a"),
            (
                "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name",
                "color",
            ),
            (
                "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue",
                "red",
            ),
            (
                "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType",
                "String",
            ),
        ];
        let m = form_to_json(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
        .unwrap();
        let v = Value::Object(m);
        assert_eq!(v["Attributes"]["VisibilityTimeout"], "40");
        assert_eq!(v["Tags"]["team"], "a");
        assert_eq!(v["AttributeNames"][0], "All");
        assert_eq!(v["Entries"][0]["Id"], "a");
        assert_eq!(v["Entries"][1]["Id"], "b");
        assert_eq!(
            v["Entries"][0]["MessageAttributes"]["color"]["StringValue"],
            "red"
        );
    }

    #[test]
    fn xml_escapes_markup_and_carriage_returns() {
        assert_eq!(escape("a<b>&\"'\r\n"), "a&lt;b&gt;&amp;&quot;&apos;&#xD;\n");
    }
}
