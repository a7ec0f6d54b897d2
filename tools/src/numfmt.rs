//! Numbers for people: thousands separators (`1,116,434,749,712`, as
//! `perf stat` prints them) and SI-scaled values (`1.35 T`) for columns
//! too narrow for every digit. A number is never cut: it fits, is scaled
//! with its prefix, or the column grows.

/// SI prefixes from 10^3 up.
const PREFIXES: [&str; 6] = ["k", "M", "G", "T", "P", "E"];

/// `v` with a comma between groups of three digits.
pub fn thousands(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `v` with two significant digits, never in e-notation: `0.48`, `4.8`,
/// `37`, `148` (above 100 every integer digit is kept). Non-finite values
/// print as `-`.
pub fn two_significant(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Digits after the point that leave two significant ones; the
    // magnitude of a finite non-zero f64 is within ±324.
    #[allow(clippy::cast_possible_truncation)]
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = usize::try_from(1 - magnitude).unwrap_or(0);
    format!("{v:.decimals$}")
}

/// `v` with an SI prefix and three significant digits (`1.35 T`, `512 k`,
/// `7.00`); values below 1000 keep `decimals` decimals. Non-finite values
/// print as `-`.
pub fn si(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let mut scaled = v;
    let mut prefix = None;
    for p in PREFIXES {
        if scaled.abs() < 999.5 {
            break;
        }
        scaled /= 1000.0;
        prefix = Some(p);
    }
    match prefix {
        None => format!("{v:.decimals$}"),
        Some(p) => {
            // Three significant digits: 1.35, 13.5, 135.
            let prec = if scaled.abs() < 9.995 {
                2
            } else if scaled.abs() < 99.95 {
                1
            } else {
                0
            };
            format!("{scaled:.prec$} {p}")
        }
    }
}

/// A count in at most `width` characters: with separators when they fit,
/// plain digits when those fit, SI-scaled otherwise (`1.35 T`).
pub fn fit_count(v: u64, width: usize) -> String {
    let grouped = thousands(v);
    if grouped.len() <= width {
        return grouped;
    }
    let plain = v.to_string();
    if plain.len() <= width {
        return plain;
    }
    #[allow(clippy::cast_precision_loss)] // three significant digits are shown
    si(v as f64, 0)
}

/// A non-negative quantity in at most `width` characters: `decimals`
/// decimals when that fits, SI-scaled otherwise.
pub fn fit_f64(v: f64, width: usize, decimals: usize) -> String {
    let plain = format!("{v:.decimals$}");
    if plain.len() <= width || !v.is_finite() {
        return if v.is_finite() { plain } else { "-".into() };
    }
    si(v, decimals)
}

/// Parses what [`thousands`], [`si`] and [`fit_count`] print back into a
/// value and the largest error the printing may have made (half a unit
/// in the last shown place). For tests of everything that shows numbers.
#[cfg(test)]
pub fn parse_shown(s: &str) -> Option<(f64, f64)> {
    let s = s.trim();
    let (num, mult) = match s.rsplit_once(' ') {
        Some((n, p)) => {
            let i = PREFIXES.iter().position(|x| *x == p)?;
            (n, 1000f64.powi(i32::try_from(i).ok()? + 1))
        }
        None => (s, 1.0),
    };
    let num = num.replace(',', "");
    let value: f64 = num.parse().ok()?;
    let decimals = num.split_once('.').map_or(0, |(_, d)| d.len());
    let half_ulp = 0.5 * 10f64.powi(-i32::try_from(decimals).ok()?) * mult;
    Some((value * mult, half_ulp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_group_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_116_434_749_712), "1,116,434,749,712");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn scaled_values_keep_three_significant_digits() {
        assert_eq!(si(1_351_873_171_624.0, 0), "1.35 T");
        assert_eq!(si(13_518_731_716.0, 0), "13.5 G");
        assert_eq!(si(999.0, 1), "999.0");
        assert_eq!(si(999_600.0, 0), "1.00 M");
        assert_eq!(si(f64::NAN, 0), "-");
    }

    #[test]
    fn real_time_factors_keep_two_significant_digits() {
        assert_eq!(two_significant(0.4812), "0.48");
        assert_eq!(two_significant(0.04812), "0.048");
        assert_eq!(two_significant(4.812), "4.8");
        assert_eq!(two_significant(37.4), "37");
        assert_eq!(two_significant(148.2), "148");
        assert_eq!(two_significant(0.0), "0");
        assert_eq!(two_significant(f64::INFINITY), "-");
    }

    #[test]
    fn a_count_fits_its_width_and_reads_back() {
        for (v, w) in [
            (1_351_873_171_624u64, 14),
            (1_351_873_171_624, 13),
            (1_351_873_171_624, 8),
            (u64::MAX, 7),
            (42, 3),
        ] {
            let s = fit_count(v, w);
            assert!(s.len() <= w.max(7), "{s} wider than {w}");
            let (shown, err) = parse_shown(&s).unwrap();
            #[allow(clippy::cast_precision_loss)]
            let v = v as f64;
            assert!((shown - v).abs() <= err * 1.000_001 + 1.0, "{s} is not {v}");
        }
    }
}
