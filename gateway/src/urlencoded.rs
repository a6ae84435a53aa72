//! `application/x-www-form-urlencoded` and URL components: decoding `%XX` and `+`, and
//! splitting `a=b&c=d` pairs. Shared by the front ends; it knows nothing else.

/// Decodes `%XX` escapes and `+` in a query or path component.
pub fn decode_component(s: &str) -> String {
    decode(s, true)
}

/// `%XX` escapes decoded, a `+` kept as it is: a URL's userinfo or path, not a form.
pub fn decode_percent(s: &str) -> String {
    decode(s, false)
}

fn decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The decoded `name=value` pairs of a query string or form body.
pub fn pairs(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode_component(k), decode_component(v))
        })
        .collect()
}

/// The first value of `name` among `pairs`.
pub fn get<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Encodes a component for a URL (everything but unreserved characters).
pub fn encode_component(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_decode_and_encode_round_trips() {
        let p = pairs("a=1&b=x+y%21&c&d=%E2%82%AC");
        assert_eq!(get(&p, "a"), Some("1"));
        assert_eq!(get(&p, "b"), Some("x y!"));
        assert_eq!(get(&p, "c"), Some(""));
        assert_eq!(get(&p, "d"), Some("€"));
        assert_eq!(
            decode_component(&encode_component("run/1 €&=")),
            "run/1 €&="
        );
    }
}
