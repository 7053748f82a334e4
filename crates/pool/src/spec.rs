//! Parsing of the zpool-style vdev grammar: `[DEV…] [mirror|raidz[1-3] DEV…]…`.

use std::path::{Path, PathBuf};

use cairn_geometry::VdevShape;

use crate::error::PoolError;

/// Kind of top-level vdev a group keyword asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopKind {
    Disk,
    Mirror,
    Raidz(usize),
}

/// One top-level vdev as written on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopSpec {
    pub kind: TopKind,
    /// Device specs: absolute paths, or NBD URLs.
    pub devices: Vec<String>,
}

impl TopSpec {
    pub fn shape(&self) -> VdevShape {
        let n = self.devices.len();
        match self.kind {
            TopKind::Disk => VdevShape::Disk,
            TopKind::Mirror => VdevShape::Mirror { children: n },
            TopKind::Raidz(parity) => VdevShape::Raidz { width: n, parity },
        }
    }
}

fn keyword(token: &str) -> Option<TopKind> {
    match token {
        "mirror" => Some(TopKind::Mirror),
        "raidz" | "raidz1" => Some(TopKind::Raidz(1)),
        "raidz2" => Some(TopKind::Raidz(2)),
        "raidz3" => Some(TopKind::Raidz(3)),
        _ => None,
    }
}

/// Words zpool knows that cairn does not support yet.
const UNSUPPORTED_KEYWORDS: &[&str] = &["cache", "special", "dedup", "draid"];

/// Every vdev keyword zpool knows, for spotting typos.
const ALL_KEYWORDS: &[&str] = &[
    "mirror", "raidz", "raidz1", "raidz2", "raidz3", "draid", "spare", "log", "cache", "special",
    "dedup",
];

/// Looks like a (mistyped or unknown) vdev keyword rather than a device path: a bare word
/// that is not an existing file and starts like a keyword or is within two edits of one.
fn looks_like_keyword(token: &str) -> bool {
    if token.contains('/') || token.contains(':') || Path::new(token).exists() {
        return false;
    }
    ["raidz", "mirr", "draid"]
        .iter()
        .any(|k| token.starts_with(k))
        || ALL_KEYWORDS.iter().any(|k| edit_distance(token, k) <= 2)
}

/// Levenshtein distance (small strings only).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Takes the `spare DEV…` groups out of a vdev specification: (the rest, spare devices).
pub fn split_spares(tokens: &[String]) -> Result<(Vec<String>, Vec<String>), PoolError> {
    let mut rest = Vec::new();
    let mut spares = Vec::new();
    let mut in_spares = false;
    for token in tokens {
        if token == "spare" {
            in_spares = true;
        } else if keyword(token).is_some()
            || token == "log"
            || UNSUPPORTED_KEYWORDS.contains(&token.as_str())
        {
            in_spares = false;
            rest.push(token.clone());
        } else if in_spares {
            spares.push(crate::leaves::absolute_spec(token));
        } else {
            rest.push(token.clone());
        }
    }
    if spares.is_empty() && tokens.iter().any(|t| t == "spare") {
        return Err(PoolError::BadSpec(
            "'spare' needs at least one device after it, e.g. `spare /dev/sdx`".into(),
        ));
    }
    Ok((rest, spares))
}

/// Takes the `log [mirror] DEV…` groups out of a vdev specification (spares already taken
/// out): (the rest, the log groups' tokens). As in zpool, every group after `log` is a log.
pub fn split_logs(tokens: &[String]) -> (Vec<String>, Vec<String>) {
    match tokens.iter().position(|t| t == "log") {
        Some(at) => (tokens[..at].to_vec(), tokens[at + 1..].to_vec()),
        None => (tokens.to_vec(), Vec::new()),
    }
}

/// The data and log top-level vdevs of a specification (spares taken out); `add` may give
/// only logs, `create` needs data vdevs.
pub fn parse_with_logs(
    tokens: &[String],
    logs_alone: bool,
) -> Result<(Vec<TopSpec>, Vec<TopSpec>), PoolError> {
    let (data, logs) = split_logs(tokens);
    if logs.iter().any(|t| t == "log") {
        return Err(PoolError::BadSpec(
            "'log' is given twice: put every log group after one 'log'".into(),
        ));
    }
    let has_log = tokens.iter().any(|t| t == "log");
    if has_log && logs.is_empty() {
        return Err(PoolError::BadSpec(
            "'log' needs a device after it, e.g. `log /dev/nvme0n1` or `log mirror D1 D2`".into(),
        ));
    }
    let data = match (data.is_empty(), has_log, logs_alone) {
        (true, true, true) => Vec::new(),
        (true, true, false) => return Err(PoolError::BadSpec(
            "a pool needs data devices before 'log', e.g. `cairn create tank mirror d0 d1 log d2`"
                .into(),
        )),
        _ => parse_vdevs(&data)?,
    };
    let logs = if logs.is_empty() {
        Vec::new()
    } else {
        parse_vdevs(&logs)?
    };
    if logs.iter().any(|t| matches!(t.kind, TopKind::Raidz(_))) {
        return Err(PoolError::BadSpec(
            "a log device is a disk or a mirror (raidz is not supported for logs, as in zpool)"
                .into(),
        ));
    }
    let all: Vec<TopSpec> = data.iter().chain(&logs).cloned().collect();
    check_duplicates(&all)?;
    Ok((data, logs))
}

/// Parses vdev tokens into top-level vdev specs, checking group sizes and duplicates.
pub fn parse_vdevs(tokens: &[String]) -> Result<Vec<TopSpec>, PoolError> {
    let mut tops: Vec<TopSpec> = Vec::new();
    let mut group: Option<TopSpec> = None;
    for token in tokens {
        if let Some(kind) = keyword(token) {
            tops.extend(group.take());
            group = Some(TopSpec {
                kind,
                devices: Vec::new(),
            });
        } else if UNSUPPORTED_KEYWORDS.contains(&token.as_str()) {
            return Err(PoolError::BadSpec(format!(
                "'{token}' vdevs are not supported yet; use disks, mirror or raidz1/2/3"
            )));
        } else if looks_like_keyword(token) {
            return Err(PoolError::BadSpec(format!(
                "unknown vdev type '{token}': use mirror, raidz (= raidz1), raidz2 or raidz3, or give a device path"
            )));
        } else {
            let dev = crate::leaves::absolute_spec(token);
            match group.as_mut() {
                Some(g) => g.devices.push(dev),
                None => tops.push(TopSpec {
                    kind: TopKind::Disk,
                    devices: vec![dev],
                }),
            }
        }
    }
    tops.extend(group.take());
    if tops.is_empty() {
        return Err(PoolError::BadSpec(
            "no devices given; e.g. `cairn create tank raidz2 d0 d1 d2 d3 d4 d5`".into(),
        ));
    }
    for top in &tops {
        check_group_size(top)?;
    }
    check_duplicates(&tops)?;
    Ok(tops)
}

fn check_group_size(top: &TopSpec) -> Result<(), PoolError> {
    let n = top.devices.len();
    match top.kind {
        TopKind::Disk => Ok(()),
        TopKind::Mirror if n < 2 => Err(PoolError::BadSpec(format!(
            "a mirror needs at least 2 devices, got {n}"
        ))),
        TopKind::Raidz(p) if n < p + 1 => Err(PoolError::BadSpec(format!(
            "raidz{p} needs at least {} devices (parity + 1), got {n}",
            p + 1
        ))),
        TopKind::Raidz(p) if n > 255 => Err(PoolError::BadSpec(format!(
            "raidz{p} supports at most 255 devices, got {n}"
        ))),
        _ => Ok(()),
    }
}

fn check_duplicates(tops: &[TopSpec]) -> Result<(), PoolError> {
    let mut seen = std::collections::HashSet::new();
    for dev in tops.iter().flat_map(|t| t.devices.iter()) {
        let key = std::fs::canonicalize(dev).unwrap_or_else(|_| PathBuf::from(dev));
        if !seen.insert(key) {
            return Err(PoolError::BadSpec(format!(
                "device '{dev}' is given more than once"
            )));
        }
    }
    Ok(())
}

/// Replication level of a top-level vdev, as zpool compares them.
fn replication(top: &TopSpec) -> (String, usize) {
    let n = top.devices.len();
    match top.kind {
        TopKind::Disk => ("disk".into(), 1),
        TopKind::Mirror => ("mirror".into(), n),
        TopKind::Raidz(p) => (format!("raidz{p}"), n),
    }
}

/// zpool refuses pools whose top-level vdevs differ in redundancy (type, parity or
/// width) unless forced; so does cairn.
pub fn check_replication(tops: &[TopSpec]) -> Result<(), PoolError> {
    let (kind0, n0) = replication(&tops[0]);
    for top in &tops[1..] {
        let (kind, n) = replication(top);
        if kind != kind0 {
            return Err(PoolError::MismatchedReplication(format!(
                "mismatched replication level: both {kind0} and {kind} vdevs are present"
            )));
        }
        if n != n0 && kind != "disk" {
            return Err(PoolError::MismatchedReplication(format!(
                "mismatched replication level: both {n0}-way and {n}-way {kind} vdevs are present"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_groups_and_disks() {
        let t = parse_vdevs(&toks("/a /b raidz2 /c /d /e /f mirror /g /h")).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].kind, TopKind::Disk);
        assert_eq!(
            t[2].shape(),
            VdevShape::Raidz {
                width: 4,
                parity: 2
            }
        );
        assert_eq!(t[3].shape(), VdevShape::Mirror { children: 2 });
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(parse_vdevs(&toks("raidz2 /a /b")).is_err());
        assert!(parse_vdevs(&toks("mirror /a")).is_err());
        assert!(parse_vdevs(&toks("raidz4 /a /b")).is_err());
        assert!(parse_vdevs(&toks("/a /a")).is_err());
        assert!(parse_vdevs(&toks("")).is_err());
        let e = parse_vdevs(&toks("mirrror /a /b")).unwrap_err().to_string();
        assert!(e.contains("unknown vdev type"), "{e}");
    }

    #[test]
    fn replication_mismatch() {
        let t = parse_vdevs(&toks("mirror /a /b raidz /c /d /e")).unwrap();
        assert!(check_replication(&t).is_err());
        let t = parse_vdevs(&toks("raidz1 /a /b /c raidz2 /d /e /f")).unwrap();
        assert!(check_replication(&t).is_err());
        let t = parse_vdevs(&toks("mirror /a /b mirror /c /d")).unwrap();
        assert!(check_replication(&t).is_ok());
        let t = parse_vdevs(&toks("/a /b /c")).unwrap();
        assert!(check_replication(&t).is_ok());
    }
}
