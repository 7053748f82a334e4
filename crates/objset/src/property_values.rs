//! Property values a user may set: each checked against what its property accepts and put
//! in canonical form (`validate_property`). The list of properties and their defaults is
//! `crate::dataset::PROPERTIES`; inheritance is `DatasetTable::property`.

use cairn_pool::io::checksum::ChecksumKind;
use cairn_pool::io::compress::CompressionSetting;

use crate::dataset::{format_size, parse_size, PROPERTIES};
use crate::error::StoreError;

/// Properties that take one of a few words, with those words.
const CHOICES: &[(&str, &[&str])] = &[
    ("copies", &["1", "2", "3"]),
    ("readonly", &["on", "off"]),
    ("xattr", &["on", "off"]),
    ("atime", &["on", "off", "relatime"]),
    ("sync", &["standard", "always", "disabled"]),
    ("logbias", &["latency", "throughput"]),
    ("snapdir", &["hidden", "visible"]),
    ("canmount", &["on", "off", "noauto"]),
];

/// "a, b or c".
fn one_of(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Checks a property value; returns its canonical form.
pub fn validate_property(key: &str, value: &str) -> Result<String, StoreError> {
    let bad = |why: &str| Err(StoreError::BadProperty(format!("{key}={value}: {why}")));
    if let Some((_, words)) = CHOICES.iter().find(|(k, _)| *k == key) {
        return match words.contains(&value) {
            true => Ok(value.into()),
            false => bad(&one_of(words)),
        };
    }
    match key {
        "compression" => match CompressionSetting::parse(value) {
            Some(_) => Ok(if value == "on" {
                "lz4".into()
            } else {
                value.into()
            }),
            None => bad("use off, lz4, zstd or zstd-1..19"),
        },
        "checksum" => match ChecksumKind::from_name(value) {
            Some(k) => Ok(k.name().into()),
            None => bad("use fletcher4 (or on), blake3 or sha256"),
        },
        "recordsize" | "volblocksize" => match parse_size(value) {
            Some(n) if n.is_power_of_two() && (512..=1 << 20).contains(&n) => Ok(format_size(n)),
            _ => bad("a power of two from 512 to 1M"),
        },
        crate::autosnap::SCHEDULE_PROPERTY => {
            crate::autosnap::Schedule::parse(value).map(|_| value.to_string())
        }
        "mountpoint" => match value {
            "none" | "legacy" => Ok(value.into()),
            v if v.starts_with('/') && !v.contains("//") && !v.contains('\0') => {
                Ok(if v.len() > 1 {
                    v.trim_end_matches('/')
                } else {
                    v
                }
                .into())
            }
            _ => bad("an absolute path, none or legacy"),
        },
        "quota" | "refquota" | "reservation" => match value {
            "none" => Ok(value.into()),
            v => match parse_size(v) {
                Some(n) if n > 0 => Ok(n.to_string()),
                _ => bad("a size such as 10G, or none"),
            },
        },
        "volsize" => match parse_size(value) {
            Some(n) if n > 0 => Ok(n.to_string()),
            _ => bad("a size such as 10G"),
        },
        _ => Err(StoreError::BadProperty(format!(
            "unknown property '{key}'; known: {}",
            PROPERTIES
                .iter()
                .map(|p| p.0)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_and_canonical() {
        assert_eq!(validate_property("recordsize", "1M").unwrap(), "1M");
        assert!(validate_property("recordsize", "3K").is_err());
        assert!(validate_property("compression", "gzip").is_err());
        assert!(validate_property("nope", "1").is_err());
        assert_eq!(validate_property("sync", "always").unwrap(), "always");
        let e = validate_property("sync", "sometimes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("standard, always or disabled"), "{e}");
        assert!(validate_property("logbias", "throughput").is_ok());
        let e = validate_property("readonly", "yes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("on or off"), "{e}");
    }
}
