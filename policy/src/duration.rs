//! Durations as policy and config files write them: `90s`, `15m`, `1h`, `7d`.
//!
//! Parsing takes one whole number and one unit (`ms`, `s`, `m`, `h`, `d`); formatting writes
//! the largest unit that divides the value evenly, so a round trip is exact.

use std::time::Duration;

/// Parses `"15m"` and friends. Zero and compound forms (`1h30m`) are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let n: u64 = number.parse().map_err(|_| {
        format!("invalid duration `{text}`: expected a whole number and a unit, like `15m`")
    })?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "invalid duration `{text}`: the unit must be one of ms, s, m, h, d"
            ))
        }
    };
    let millis = n
        .checked_mul(millis_per_unit)
        .filter(|m| *m > 0)
        .ok_or_else(|| {
            format!("invalid duration `{text}`: it must be positive and at most u64 milliseconds")
        })?;
    Ok(Duration::from_millis(millis))
}

/// Writes `d` in the largest whole unit: `90s`, `15m`, `1h`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_the_largest_unit() {
        for (text, canonical) in [
            ("90s", "90s"),
            ("60s", "1m"),
            ("15m", "15m"),
            ("120m", "2h"),
            ("1500ms", "1500ms"),
            ("24h", "1d"),
        ] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), canonical);
        }
        for bad in ["", "15", "m", "1h30m", "0s", "-1s", "1.5h", "10w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
