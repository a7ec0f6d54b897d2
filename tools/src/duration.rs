//! `--duration` values: `500ms`, `5s`, `2m`, or plain seconds.

use std::time::Duration;

/// Parses a duration.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (s, 1000.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v * mult_ms / 1000.0)),
        _ => Err(format!("invalid duration \"{s}\" (e.g. 500ms, 5s, 2m)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("2").unwrap(), Duration::from_secs(2));
        assert!(parse("x").is_err());
    }
}
