//! Byte sizes on the command line: `67108864`, `64MiB`, `512k`, `1.5GiB`.

/// Parses a byte count with an optional unit: `B`; `K`/`KiB`, `M`/`MiB`, `G`/`GiB` (powers of
/// 1024); `KB`, `MB`, `GB` (powers of 1000). Units are case-insensitive; fractions are allowed
/// with a unit (`1.5GiB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number = number.replace('_', "");
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use B, KiB, MiB, GiB (or KB, MB, GB), \
                 e.g. 64MiB"
            ))
        }
    };
    let expected = || format!("expected a size like 67108864, 64MiB or 512KiB, got {text:?}");
    if number.is_empty() {
        return Err(expected());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n
            .checked_mul(multiplier)
            .ok_or_else(|| format!("{text:?} is too large"));
    }
    let fraction: f64 = number.parse().map_err(|_| expected())?;
    let bytes = fraction * multiplier as f64;
    if multiplier == 1 || !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(expected());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_with_and_without_units() {
        assert_eq!(parse_size("67108864"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("1_000"), Ok(1000));
    }

    #[test]
    fn bad_sizes_say_what_is_expected() {
        assert!(parse_size("64 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("MiB").unwrap_err().contains("expected a size"));
        assert!(parse_size("").unwrap_err().contains("expected a size"));
        assert!(parse_size("1.5").unwrap_err().contains("expected a size"));
        assert!(parse_size("99999999999GiB")
            .unwrap_err()
            .contains("too large"));
    }
}
