//! A completion report as the SMTP sink received it, parsed: its text part and its JSON
//! attachment.

use mail_parser::{MessageParser, MimeHeaders};
use serde_json::Value;

pub fn parse(raw: &str) -> mail_parser::Message<'_> {
    MessageParser::default()
        .parse(raw.as_bytes())
        .expect("a parsable message")
}

/// The text part and the JSON attachment of a report, decoded.
pub fn parts(raw: &str) -> (String, Value, String) {
    let m = parse(raw);
    let body = m.body_text(0).expect("a text part").to_string();
    let att = m.attachment(0).expect("a JSON attachment");
    assert_eq!(
        att.content_type()
            .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or(""))),
        Some("application/json".to_string())
    );
    let json: Value = serde_json::from_slice(att.contents()).expect("the attachment is JSON");
    (body, json, att.attachment_name().unwrap_or("").to_string())
}
