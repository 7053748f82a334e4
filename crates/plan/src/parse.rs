//! Parsing of user-supplied quantities: sizes, rates, percentages, counts.

use crate::PlanError;

/// IDEMA LBA1-03: the sector count of a drive sold as `gb` decimal gigabytes (≥ 50 GB)
/// is `97,696,368 + 1,953,504 × (gb − 50)` sectors of 512 B. A "4TB" disk is therefore
/// 7,814,037,168 × 512 B = 4,000,787,030,016 B, not 4·10^12.
pub fn idema_bytes(gigabytes: f64) -> u64 {
    if gigabytes < 50.0 {
        return (gigabytes * 1e9) as u64;
    }
    let sectors = 97_696_368.0 + (1_953_504.0 * (gigabytes - 50.0)).round();
    // Saturating float → integer conversion; callers reject sizes above MAX_DISK_BYTES.
    (sectors * 512.0) as u64
}

/// Largest disk accepted (1 PiB): keeps every sum over 4096 disks far from overflow.
pub const MAX_DISK_BYTES: u64 = 1 << 50;

/// Splits `"4.5TB"` into `(4.5, "TB")`.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-'))
        .unwrap_or(text.len());
    // "1e-15" is all number; "4E" would be exabytes, so only take e/E followed by a digit.
    let (mut number, mut unit) = text.split_at(end);
    if let Some(pos) = number.find(['e', 'E']) {
        let after = &number[pos + 1..];
        if after.is_empty()
            || !after
                .trim_start_matches('-')
                .starts_with(|c: char| c.is_ascii_digit())
        {
            unit = &text[pos..];
            number = &text[..pos];
        }
    }
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some((value, unit.trim()))
}

/// A disk size: `4TB`/`4T`/`500GB` (decimal, rounded to the IDEMA sector count), `4TiB`,
/// `3.5GiB` (binary), `1000194703360B` or a plain byte count.
pub fn parse_size(text: &str) -> Result<u64, PlanError> {
    let bad = || PlanError::BadSize(text.to_string());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let bytes = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => value,
        "K" | "KB" => value * 1e3,
        "M" | "MB" => value * 1e6,
        "G" | "GB" => idema_bytes(value) as f64,
        "T" | "TB" => idema_bytes(value * 1e3) as f64,
        "P" | "PB" => idema_bytes(value * 1e6) as f64,
        "KIB" => value * 1024.0,
        "MIB" => value * 1024f64.powi(2),
        "GIB" => value * 1024f64.powi(3),
        "TIB" => value * 1024f64.powi(4),
        "PIB" => value * 1024f64.powi(5),
        _ => return Err(bad()),
    };
    if bytes > MAX_DISK_BYTES as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

/// A block size such as `128K`, `1M`, `4096` (1024-based, as ZFS's recordsize).
pub fn parse_block_size(text: &str) -> Result<u64, PlanError> {
    let bad = || PlanError::BadRecordSize(text.to_string());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let multiplier = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = (value * multiplier).round() as u64;
    if bytes == 0 || bytes > 16 << 20 {
        return Err(bad());
    }
    Ok(bytes)
}

/// A transfer rate in MB/s (10^6 B/s): `150MB/s`, `150`, `1.2GB/s`, `100MiB/s`.
pub fn parse_rate_mbs(text: &str) -> Result<f64, PlanError> {
    let bad = || PlanError::BadRate(text.to_string());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let unit = unit.to_ascii_uppercase();
    let factor = match unit.trim_end_matches("/S") {
        "" | "MB" => 1.0,
        "KB" => 1e-3,
        "GB" => 1e3,
        "MIB" => 1.048_576,
        "GIB" => 1_073.741_824,
        _ => return Err(bad()),
    };
    let mbs = value * factor;
    if mbs <= 0.0 {
        return Err(bad());
    }
    Ok(mbs)
}

/// A probability as `1.5%` or `0.015`.
pub fn parse_fraction(text: &str) -> Result<f64, PlanError> {
    let bad = || PlanError::BadFraction(text.to_string());
    let trimmed = text.trim();
    let value = match trimmed.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map_err(|_| bad())? / 100.0,
        None => trimmed.parse::<f64>().map_err(|_| bad())?,
    };
    if !(0.0..=1.0).contains(&value) || !value.is_finite() {
        return Err(bad());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4TB").unwrap(), 7_814_037_168 * 512);
        assert_eq!(parse_size("4T").unwrap(), 7_814_037_168 * 512);
        assert_eq!(parse_size("256GB").unwrap(), 500_118_192 * 512);
        assert_eq!(parse_size("1000194703360B").unwrap(), 1_000_194_703_360);
        assert_eq!(parse_size("1000194703360").unwrap(), 1_000_194_703_360);
        assert_eq!(parse_size("4TiB").unwrap(), 4 << 40);
        assert_eq!(parse_size("1.5TiB").unwrap(), 3 << 39);
        assert!(parse_size("4XB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-4TB").is_err());
        assert!(parse_size("1e30TB").is_err());
        assert!(parse_size("2PiB").is_err());
    }

    #[test]
    fn record_sizes() {
        assert_eq!(parse_block_size("128K").unwrap(), 128 << 10);
        assert_eq!(parse_block_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_block_size("4096").unwrap(), 4096);
        assert_eq!(parse_block_size("16KiB").unwrap(), 16 << 10);
        assert!(parse_block_size("0").is_err());
        assert!(parse_block_size("32M").is_err());
    }

    #[test]
    fn rates_and_fractions() {
        assert_eq!(parse_rate_mbs("150MB/s").unwrap(), 150.0);
        assert_eq!(parse_rate_mbs("150").unwrap(), 150.0);
        assert_eq!(parse_rate_mbs("1.5GB/s").unwrap(), 1500.0);
        assert!(parse_rate_mbs("fast").is_err());
        assert!((parse_fraction("1.5%").unwrap() - 0.015).abs() < 1e-12);
        assert!((parse_fraction("0.02").unwrap() - 0.02).abs() < 1e-12);
        assert!(parse_fraction("150%").is_err());
        assert!((parse_fraction("1e-15").unwrap() - 1e-15).abs() < 1e-25);
    }
}
