//! Size formatting as `zfs list` and `df -h` print it.

const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];

/// `zfs list` style (OpenZFS `zfs_nicebytes`): 1024-based, at most 5 characters, as many
/// decimals (2, 1, 0) as fit, rounded to nearest; exact multiples print without decimals.
/// Examples: `"82.0T"`, `"3.62T"`, `"464G"`, `"512B"`, `"1K"`.
pub fn format_zfs_size(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let (unit_index, divisor) = unit_for(bytes);
    let unit = UNITS[unit_index];
    if bytes % divisor == 0 {
        return format!("{}{unit}", bytes / divisor);
    }
    let value = bytes as f64 / divisor as f64;
    for decimals in (0..=2).rev() {
        let text = format!("{value:.decimals$}{unit}");
        if text.len() <= 5 {
            return text;
        }
    }
    format!("{value:.0}{unit}")
}

/// `df -h` style (GNU coreutils): 1024-based, rounded up; one decimal below 10, none above.
/// Examples: `"3.7T"`, `"82T"`, `"465G"`, `"512"`.
pub fn format_df_size(bytes: u64) -> String {
    if bytes < 1024 {
        return bytes.to_string();
    }
    let (mut unit_index, divisor) = unit_for(bytes);
    let bytes = u128::from(bytes);
    let divisor = u128::from(divisor);
    let tenths = (bytes * 10).div_ceil(divisor);
    if tenths < 100 {
        return format!("{}.{}{}", tenths / 10, tenths % 10, UNITS[unit_index]);
    }
    let mut whole = bytes.div_ceil(divisor);
    if whole >= 1024 && unit_index + 1 < UNITS.len() {
        // Rounding up reached the next unit: 1023.9G is shown as 1.0T.
        unit_index += 1;
        whole = whole.div_ceil(1024);
        return format!("{whole}.0{}", UNITS[unit_index]);
    }
    format!("{whole}{}", UNITS[unit_index])
}

/// Largest unit (index into `UNITS`) with `bytes ≥ 1024^(index+1)`, and its size in bytes.
fn unit_for(bytes: u64) -> (usize, u64) {
    let mut index = 0;
    let mut divisor = 1024u64;
    while index + 1 < UNITS.len() && bytes / divisor >= 1024 {
        divisor *= 1024;
        index += 1;
    }
    (index, divisor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    #[test]
    fn zfs_style() {
        assert_eq!(format_zfs_size(0), "0B");
        assert_eq!(format_zfs_size(512), "512B");
        assert_eq!(format_zfs_size(KIB), "1K");
        assert_eq!(format_zfs_size(1536), "1.50K");
        assert_eq!(format_zfs_size(4 * TIB), "4T");
        assert_eq!(format_zfs_size(81_980 * GIB), "80.1T");
        assert_eq!(format_zfs_size((81.98 * TIB as f64) as u64), "82.0T");
        assert_eq!(format_zfs_size((3.6231 * TIB as f64) as u64), "3.62T");
        assert_eq!(format_zfs_size((464.3 * GIB as f64) as u64), "464G");
        assert_eq!(format_zfs_size(1023 * KIB + 1000), "1024K");
        assert_eq!(format_zfs_size(u64::MAX), "16.0E");
    }

    #[test]
    fn df_style() {
        assert_eq!(format_df_size(0), "0");
        assert_eq!(format_df_size(1000), "1000");
        assert_eq!(format_df_size(KIB), "1.0K");
        assert_eq!(format_df_size(KIB + 1), "1.1K");
        assert_eq!(format_df_size((3.6231 * TIB as f64) as u64), "3.7T");
        assert_eq!(format_df_size((81.98 * TIB as f64) as u64), "82T");
        assert_eq!(format_df_size((464.3 * GIB as f64) as u64), "465G");
        assert_eq!(format_df_size(10 * GIB - 1), "10G");
        assert_eq!(format_df_size(1024 * GIB - 1), "1.0T");
        assert_eq!(format_df_size(99 * GIB + 1), "100G");
    }
}
