//! RFC 8785 (JCS) canonical JSON and the call fingerprint of DESIGN §3.
//!
//! It takes a `serde_json::Value` and gives canonical bytes: ECMAScript number formatting,
//! object keys sorted by UTF-16 code units, minimal string escaping, no whitespace. The
//! fingerprint is `sha256:` + hex(SHA-256("airlock.call.v1\n" + tool + "\n" + JCS(args))).
//!
//! It does not validate: values should come from [`crate::json::parse`], which refuses the
//! numbers that would make two different calls share one canonical form.

use std::cmp::Ordering;
use std::fmt;
use std::io::Write as _;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::error::RequestError;

/// The domain-separation prefix of every call fingerprint.
const FINGERPRINT_DOMAIN: &[u8] = b"airlock.call.v1\n";

/// Appends the RFC 8785 canonical form of `value` to `out`.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            write_object(map, None, out);
        }
    }
}

/// Appends the canonical form of `map`; returns where in `out` a member keyed `slot` would
/// go: the start of the first member that sorts after it, or the closing brace.
fn write_object(map: &Map<String, Value>, slot: Option<&str>, out: &mut Vec<u8>) -> usize {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    // serde_json's map is usually ordered by UTF-8 bytes already, which agrees with
    // UTF-16 order except between U+E000..U+FFFF and astral characters.
    if !entries.is_sorted_by(|a, b| key_cmp(a.0, b.0) != Ordering::Greater) {
        entries.sort_by(|a, b| key_cmp(a.0, b.0));
    }
    let mut at = None;
    out.push(b'{');
    for (i, (key, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if at.is_none() && slot.is_some_and(|s| key_cmp(key, s) == Ordering::Greater) {
            at = Some(out.len());
        }
        write_string(key, out);
        out.push(b':');
        write_canonical(item, out);
    }
    let end = out.len();
    out.push(b'}');
    at.unwrap_or(end)
}

/// Appends the canonical form of `map` plus one string member `key` whose value is computed
/// from the canonical form of `map` alone (a hash over the record it is added to): one pass
/// instead of canonicalizing the record twice. `key` must not be in `map`.
pub fn write_canonical_with(
    map: &Map<String, Value>,
    key: &str,
    value_of: impl FnOnce(&[u8]) -> String,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let at = write_object(map, Some(key), out);
    let value = value_of(&out[start..]);
    let mut member = Vec::with_capacity(key.len() + value.len() + 8);
    // A member goes before the one at `at` (a comma after it), or last (a comma before it).
    let last = out[at] == b'}';
    if last && !map.is_empty() {
        member.push(b',');
    }
    write_string(key, &mut member);
    member.push(b':');
    write_string(&value, &mut member);
    if !last {
        member.push(b',');
    }
    out.splice(at..at, member);
}

/// The canonical form of `value` as a string.
pub fn canonicalize(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    // write_canonical only ever writes valid UTF-8: ASCII punctuation and whole `str`s.
    String::from_utf8(out).unwrap_or_default()
}

/// Orders keys by UTF-16 code units, as RFC 8785 §3.2.3 requires.
fn key_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

fn write_number(n: &Number, out: &mut Vec<u8>) {
    const SAFE: u64 = crate::json::MAX_SAFE_INTEGER;
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= SAFE {
            let _ = write!(out, "{i}");
            return;
        }
    } else if let Some(u) = n.as_u64() {
        if u <= SAFE {
            let _ = write!(out, "{u}");
            return;
        }
    }
    // Everything else is an IEEE-754 double, printed as ECMAScript's Number.toString does.
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 {
        // Covers -0, which JCS prints as 0.
        out.push(b'0');
    } else {
        let mut buf = ryu_js::Buffer::new();
        out.extend_from_slice(buf.format_finite(f).as_bytes());
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\x08' => b"\\b",
            b'\x0c' => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run_start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        run_start = i + 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

/// A call fingerprint: `sha256:` and 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The fingerprint of `tool` called with the canonical args `canonical_args`.
pub fn fingerprint_canonical(tool: &str, canonical_args: &[u8]) -> Fingerprint {
    let mut hasher = Sha256::new();
    hasher.update(FINGERPRINT_DOMAIN);
    hasher.update(tool.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical_args);
    Fingerprint(format!("sha256:{}", hex(&hasher.finalize())))
}

/// The fingerprint of an MCP request other than a tool call: `sha256:` + the hex SHA-256 of
/// the RFC 8785 form of `{"kind", "target", "params"}` (target: the URI, the prompt's name,
/// or a completion's reference).
pub fn request_fingerprint(kind: &str, target: &str, params: &Value) -> Fingerprint {
    let whole = serde_json::json!({"kind": kind, "target": target, "params": params});
    Fingerprint(format!(
        "sha256:{}",
        hex(&Sha256::digest(canonicalize(&whole).as_bytes()))
    ))
}

/// Canonicalizes `args` and fingerprints the call; returns both, since the canonical bytes are
/// what the backend must receive.
pub fn fingerprint(tool: &str, args: &Value) -> (String, Fingerprint) {
    let canonical = canonicalize(args);
    let fp = fingerprint_canonical(tool, canonical.as_bytes());
    (canonical, fp)
}

/// The definition fingerprint of an MCP tool (DESIGN §20): `sha256:` + the hex SHA-256 of the
/// RFC 8785 form of the tool object exactly as its upstream listed it, `_meta` left out (every
/// other field counts: name, title, description, schemas, annotations, `execution`, …).
pub fn definition_fingerprint(tool: &Value) -> String {
    let digest = match tool {
        Value::Object(fields) if fields.contains_key("_meta") => {
            let mut fields = fields.clone();
            fields.remove("_meta");
            Sha256::digest(canonicalize(&Value::Object(fields)).as_bytes())
        }
        _ => Sha256::digest(canonicalize(tool).as_bytes()),
    };
    format!("sha256:{}", hex(&digest))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xf) as usize] as char);
    }
    s
}

/// Checks `tool` against `^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`.
pub fn validate_tool_name(tool: &str) -> Result<(), RequestError> {
    let bytes = tool.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RequestError::InvalidTool {
            tool: tool.chars().take(200).collect(),
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn one_member_computed_from_the_rest_lands_where_canonical_order_puts_it() {
        use serde_json::json;
        for (record, key) in [
            (json!({}), "hash"),
            (json!({"a": 1}), "hash"),
            (json!({"z": 1}), "hash"),
            (
                json!({"a": [1, {"y": 2, "b": null}], "kind": "x", "z": "\u{e9}"}),
                "hash",
            ),
            (json!({"a": 1, "\u{e000}": 2, "\u{1f600}": 3}), "\u{f000}"),
        ] {
            let map = record.as_object().unwrap();
            let mut out = b"prefix".to_vec();
            let mut seen = Vec::new();
            write_canonical_with(
                map,
                key,
                |without| {
                    seen = without.to_vec();
                    "v\"1".into()
                },
                &mut out,
            );
            assert_eq!(seen, canonicalize(&record).into_bytes(), "{record}");
            let mut with = map.clone();
            with.insert(key.into(), Value::from("v\"1"));
            assert_eq!(
                &out[6..],
                canonicalize(&Value::Object(with)).as_bytes(),
                "{record}"
            );
        }
    }

    use super::*;
    use crate::json::parse;

    fn jcs(input: &str) -> String {
        canonicalize(&parse(input.as_bytes(), 64).unwrap())
    }

    #[test]
    fn awkward_numbers() {
        assert_eq!(
            jcs("[1e21, 1e-7, -0, 5e-324, 0.1, 1e-6, 1.5e300, -0.0, 100]"),
            "[1e+21,1e-7,0,5e-324,0.1,0.000001,1.5e+300,0,100]"
        );
        assert_eq!(
            jcs("[1.0, 1e0, 10e-1, 0.00001, 123456789012.5]"),
            "[1,1,1,0.00001,123456789012.5]"
        );
        assert_eq!(
            jcs("[9007199254740991, -9007199254740991, 9007199254740991e0]"),
            "[9007199254740991,-9007199254740991,9007199254740991]"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+FB01 sorts after U+1F600 in UTF-16 (0xD83D < 0xFB01) but before it in UTF-8.
        assert_eq!(
            jcs(r#"{"\ufb01":1,"😀":2,"a":3}"#),
            r#"{"a":3,"😀":2,"ﬁ":1}"#
        );
    }

    #[test]
    fn minimal_escapes() {
        assert_eq!(
            jcs(r#""\u0041\/\u00e9\u001f\u007f\b\f\n\r\t\"\\""#),
            "\"A/é\\u001f\u{7f}\\b\\f\\n\\r\\t\\\"\\\\\""
        );
    }

    #[test]
    fn fingerprint_is_domain_separated_and_hex() {
        let (canonical, fp) = fingerprint("db.query", &parse(br#"{"b":1,"a":"x"}"#, 64).unwrap());
        assert_eq!(canonical, r#"{"a":"x","b":1}"#);
        let mut h = Sha256::new();
        h.update(b"airlock.call.v1\ndb.query\n{\"a\":\"x\",\"b\":1}");
        assert_eq!(fp.as_str(), format!("sha256:{}", hex(&h.finalize())));
        assert_eq!(fp.as_str().len(), 7 + 64);
    }

    #[test]
    fn tool_names() {
        for ok in ["a", "shell.exec", "db/pg:query-1_x", &"a".repeat(128)] {
            assert!(validate_tool_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".a", "-a", "a b", "a\n", "é", &"a".repeat(129), "a*"] {
            assert_eq!(
                validate_tool_name(bad).unwrap_err().code(),
                "request.invalid_tool",
                "{bad}"
            );
        }
    }
}
