//! Strict JSON intake: the only way untrusted bytes become a `serde_json::Value`.
//!
//! It takes raw bytes and gives a value, or a [`RequestError`] with a stable code. On top of
//! RFC 8259 it rejects what would let two different requests share one fingerprint, or let a
//! body exhaust the gateway: duplicate object keys, integer literals outside ±(2^53−1), numbers
//! that are not finite, nesting deeper than a limit, invalid UTF-8 and lone surrogates.
//!
//! It does not enforce the body size (the HTTP layer does, before reading) and does not know
//! what a tool call looks like: [`crate::call`] does that on top of this.

use serde_json::{Map, Number, Value};

use crate::error::RequestError;

/// The largest integer magnitude that an IEEE-754 double holds exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Doubles whose canonical form is an integer literal outside ±(2^53−1).
const UNSAFE_INTEGRAL_DOUBLES: std::ops::Range<f64> = (MAX_SAFE_INTEGER as f64 + 1.0)..1e21;

/// Parses `input` as one JSON value whose containers nest at most `max_depth` deep.
///
/// The outermost container counts as level 1.
pub fn parse(input: &[u8], max_depth: usize) -> Result<Value, RequestError> {
    let text = std::str::from_utf8(input).map_err(|e| RequestError::InvalidJson {
        offset: e.valid_up_to(),
        reason: "invalid UTF-8",
    })?;
    let mut parser = Parser {
        text,
        bytes: input,
        pos: 0,
        max_depth,
    };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != input.len() {
        return Err(parser.invalid("trailing characters after the JSON value"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
}

impl Parser<'_> {
    fn invalid(&self, reason: &'static str) -> RequestError {
        RequestError::InvalidJson {
            offset: self.pos,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(
        &mut self,
        literal: &'static str,
        value: Value,
    ) -> Result<Value, RequestError> {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            Ok(value)
        } else {
            Err(self.invalid("unexpected characters"))
        }
    }

    /// `depth` is the number of containers already open around this value.
    fn value(&mut self, depth: usize) -> Result<Value, RequestError> {
        match self.peek() {
            None => Err(self.invalid("unexpected end of input")),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal("true", Value::Bool(true)),
            Some(b'f') => self.expect_literal("false", Value::Bool(false)),
            Some(b'n') => self.expect_literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.invalid("expected a JSON value")),
        }
    }

    fn enter(&self, depth: usize) -> Result<(), RequestError> {
        if depth > self.max_depth {
            Err(RequestError::TooDeep {
                limit: self.max_depth,
            })
        } else {
            Ok(())
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, RequestError> {
        self.enter(depth)?;
        self.pos += 1; // '{'
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.invalid("expected an object key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.invalid("expected `:` after an object key"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth)?;
            // INVARIANT: keys are compared after escapes are decoded, so `"a"` and `"\u0061"`
            // are the same key and the second one is refused.
            if map.contains_key(&key) {
                return Err(RequestError::DuplicateKey { key });
            }
            map.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.invalid("expected `,` or `}` in an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, RequestError> {
        self.enter(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.invalid("expected `,` or `]` in an array")),
            }
        }
    }

    fn string(&mut self) -> Result<String, RequestError> {
        self.pos += 1; // opening quote
        let start = self.pos;
        // Fast path: no escapes.
        while let Some(b) = self.peek() {
            match b {
                b'"' => {
                    let s = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(s.to_owned());
                }
                b'\\' => break,
                0x00..=0x1f => return Err(self.invalid("control character in a string")),
                _ => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.text[run_start..self.pos]);
            match self.peek() {
                None => return Err(self.invalid("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escaped = self
                        .peek()
                        .ok_or_else(|| self.invalid("unterminated string"))?;
                    self.pos += 1;
                    match escaped {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return Err(self.invalid("invalid escape sequence")),
                    }
                }
                Some(_) => return Err(self.invalid("control character in a string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, RequestError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.invalid("truncated \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let n = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.invalid("invalid \\u escape"))?;
            v = v * 16 + n;
        }
        self.pos += 4;
        Ok(v)
    }

    /// Decodes the `XXXX` after `\u`, joining a surrogate pair; a lone surrogate is refused,
    /// since no UTF-8 string (and so no canonical form) can hold it.
    fn unicode_escape(&mut self) -> Result<char, RequestError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(self.invalid("lone surrogate in \\u escape"));
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.invalid("lone surrogate in \\u escape"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.invalid("lone surrogate in \\u escape")),
            c => c,
        };
        char::from_u32(code).ok_or_else(|| self.invalid("invalid \\u escape"))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, RequestError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.invalid("invalid number")),
        }
        let int_end = self.pos;
        let mut fraction_is_zero = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let frac_start = self.pos;
            if self.digits() == 0 {
                return Err(self.invalid("invalid number: digits expected after `.`"));
            }
            fraction_is_zero = self.bytes[frac_start..self.pos].iter().all(|&b| b == b'0');
        }
        let mut has_exponent = false;
        if let Some(b'e' | b'E') = self.peek() {
            has_exponent = true;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.invalid("invalid number: digits expected in the exponent"));
            }
        }
        let literal = &self.text[start..self.pos];
        if !has_exponent && fraction_is_zero {
            // An integer literal: it must survive the trip through a double unchanged.
            let magnitude = &self.text[int_start..int_end];
            let value = if magnitude.len() > 16 {
                None
            } else {
                magnitude
                    .parse::<u64>()
                    .ok()
                    .filter(|v| *v <= MAX_SAFE_INTEGER)
            };
            let Some(value) = value else {
                return Err(RequestError::UnsafeNumber {
                    literal: literal.to_owned(),
                });
            };
            // MAX_SAFE_INTEGER fits an i64, so the cast is lossless.
            let value = value as i64;
            let signed = if start == int_start { value } else { -value };
            return Ok(Value::Number(Number::from(signed)));
        }
        let parsed: f64 = literal
            .parse()
            .map_err(|_| self.invalid("invalid number"))?;
        // INVARIANT: a double between 2^53 and 1e21 prints (per RFC 8785) as a plain integer
        // beyond 2^53, which a backend reading integers would take for a different value than
        // the one approved. Such numbers are refused like unsafe integer literals.
        if UNSAFE_INTEGRAL_DOUBLES.contains(&parsed.abs()) {
            return Err(RequestError::UnsafeNumber {
                literal: literal.to_owned(),
            });
        }
        match Number::from_f64(parsed) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(RequestError::UnsafeNumber {
                literal: literal.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(input: &str) -> &'static str {
        parse(input.as_bytes(), 64)
            .map(|_| "ok")
            .unwrap_or_else(|e| e.code())
    }

    #[test]
    fn parses_ordinary_json() {
        let v = parse(
            br#" {"a": [1, -2.5, "x\u00e9\n", true, null, {}], "b": {"c": 1e3}} "#,
            64,
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"a": [1, -2.5, "xé\n", true, null, {}], "b": {"c": 1000.0}})
        );
    }

    #[test]
    fn integer_literals_are_integers_and_fractions_of_zero_count_as_integers() {
        assert_eq!(parse(b"1.000", 64).unwrap().as_i64(), Some(1));
        assert_eq!(
            parse(b"-9007199254740991", 64).unwrap().as_i64(),
            Some(-9007199254740991)
        );
        assert!(parse(b"1e0", 64).unwrap().is_f64());
    }

    #[test]
    fn each_bad_input_has_its_code() {
        assert_eq!(code(r#"{"a":1,"a":2}"#), "request.duplicate_key");
        assert_eq!(code(r#"{"a":1,"\u0061":2}"#), "request.duplicate_key");
        assert_eq!(code("9007199254740992"), "request.unsafe_number");
        assert_eq!(code("-9007199254740992"), "request.unsafe_number");
        assert_eq!(code("9007199254740992.0"), "request.unsafe_number");
        assert_eq!(
            code("123456789012345678901234567890"),
            "request.unsafe_number"
        );
        assert_eq!(code("1e400"), "request.unsafe_number");
        assert_eq!(code("-1e400"), "request.unsafe_number");
        assert_eq!(code("9007199254740992e0"), "request.unsafe_number");
        assert_eq!(code("333333333333333333.3"), "request.unsafe_number");
        assert_eq!(code("-1e20"), "request.unsafe_number");
        assert_eq!(code("9007199254740991e0"), "ok");
        assert_eq!(code("1e21"), "ok");
        assert_eq!(code("123456.5"), "ok");
        assert_eq!(code("1e-400"), "ok");
        assert_eq!(code(""), "request.invalid_json");
        assert_eq!(code("{"), "request.invalid_json");
        assert_eq!(code("[1,]"), "request.invalid_json");
        assert_eq!(code("01"), "request.invalid_json");
        assert_eq!(code("1."), "request.invalid_json");
        assert_eq!(code("NaN"), "request.invalid_json");
        assert_eq!(code("\"\\ud800\""), "request.invalid_json");
        assert_eq!(code("\"\\udc00\\ud800\""), "request.invalid_json");
        assert_eq!(code("\"a\u{1}\""), "request.invalid_json");
        assert_eq!(code("{} x"), "request.invalid_json");
        assert_eq!(
            parse(b"\"\xff\"", 64).unwrap_err().code(),
            "request.invalid_json"
        );
    }

    #[test]
    fn depth_counts_the_outermost_container_as_one() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(nested(64).as_bytes(), 64).is_ok());
        assert_eq!(
            parse(nested(65).as_bytes(), 64).unwrap_err().code(),
            "request.too_deep"
        );
        // A depth far beyond the limit fails fast instead of exhausting the stack.
        assert_eq!(
            parse(nested(100_000).as_bytes(), 64).unwrap_err().code(),
            "request.too_deep"
        );
    }

    #[test]
    fn surrogate_pairs_decode() {
        assert_eq!(parse(br#""\ud83d\ude00""#, 64).unwrap(), json!("😀"));
    }
}
