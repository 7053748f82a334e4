//! Opening a leaf from its device spec: a file or block device path, an NBD URL, a
//! `fault:` wrapper around either, or a simulated disk `sim:FILE?disk=…` (the bench lab's
//! disk model timing a sparse file: `cairn_lab::sim_leaf`).
//!
//! `fault:INNER[?SETTINGS]` opens `INNER` and wraps it in a `FaultLeaf` with the settings
//! (`fail_reads=0.01&delay_ms=5&…`, see `cairn_vdev::fault::FaultSettings` and
//! docs/torture.md). The leaf watches a control file, `INNER.fault` unless
//! `control=PATH` names another, so a running test can flip faults on it.

use std::path::Path;
use std::sync::Arc;

use cairn_lab::sim_leaf::{SimLeaf, SIM_PREFIX};
use cairn_vdev::fault::FaultSettings;
use cairn_vdev::{FaultLeaf, FileLeaf, Leaf, LeafOptions, VdevError};

/// Prefix of a fault-injecting device spec.
pub const FAULT_PREFIX: &str = "fault:";

/// Opens the leaf a device spec names. A relative path is made absolute first, so the
/// path the pool records (the leaf's `path()`) finds the device from any directory.
pub fn open_leaf(spec: &str, opts: LeafOptions) -> Result<Arc<dyn Leaf>, VdevError> {
    let spec = &absolute_spec(spec);
    if let Some(rest) = spec.strip_prefix(FAULT_PREFIX) {
        return open_fault_leaf(spec, rest, opts);
    }
    if cairn_nbd::is_nbd_url(spec) {
        return cairn_nbd::open_nbd_leaf(spec).map(Arc::from);
    }
    if spec.starts_with(SIM_PREFIX) {
        return Ok(Arc::new(SimLeaf::open(spec, opts)?));
    }
    Ok(Arc::new(FileLeaf::open(Path::new(spec), opts)?))
}

/// A device spec with its path made absolute (against the current directory, without
/// resolving symlinks, so `/dev/disk/by-id/…` names stay as given); NBD URLs unchanged, and
/// `fault:PATH?…` and `sim:PATH?…` keep their settings around the absolute path.
pub fn absolute_spec(spec: &str) -> String {
    for prefix in [FAULT_PREFIX, SIM_PREFIX] {
        let Some(rest) = spec.strip_prefix(prefix) else {
            continue;
        };
        let (inner, query) = match rest.split_once('?') {
            Some((inner, query)) => (inner, Some(query)),
            None => (rest, None),
        };
        let inner = absolute_spec(inner);
        return match query {
            Some(q) => format!("{prefix}{inner}?{q}"),
            None => format!("{prefix}{inner}"),
        };
    }
    if spec.is_empty() || cairn_nbd::is_nbd_url(spec) || spec.starts_with('/') {
        return spec.to_string();
    }
    match std::path::absolute(spec) {
        // `absolute` keeps inner `.` components; drop them (`..` stays: symlinks).
        Ok(p) => p
            .components()
            .filter(|c| *c != std::path::Component::CurDir)
            .collect::<std::path::PathBuf>()
            .display()
            .to_string(),
        Err(_) => spec.to_string(),
    }
}

/// Splits `INNER[?SETTINGS]` and parses the settings; the control file defaults to
/// `INNER.fault` for a file path.
pub fn parse_fault_spec(rest: &str) -> Result<(&str, FaultSettings), VdevError> {
    let (inner, query) = rest.split_once('?').unwrap_or((rest, ""));
    if inner.is_empty() || inner.starts_with(FAULT_PREFIX) {
        return Err(bad_spec(rest, "expected fault:DEVICE[?KEY=VALUE&…]".into()));
    }
    let mut settings = FaultSettings::parse(query).map_err(|e| bad_spec(rest, e.to_string()))?;
    if settings.control.is_none() && !cairn_nbd::is_nbd_url(inner) {
        settings.control = Some(format!("{inner}.fault").into());
    }
    Ok((inner, settings))
}

fn open_fault_leaf(spec: &str, rest: &str, opts: LeafOptions) -> Result<Arc<dyn Leaf>, VdevError> {
    let (inner, settings) = parse_fault_spec(rest)?;
    let leaf = open_leaf(inner, opts)?;
    Ok(Arc::new(FaultLeaf::with_settings(
        leaf,
        settings,
        Some(spec.to_string()),
    )))
}

fn bad_spec(spec: &str, why: String) -> VdevError {
    VdevError::Io {
        path: format!("{FAULT_PREFIX}{spec}"),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_spec_wraps_a_file_and_names_its_control_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d0");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let spec = format!("fault:{}?fail_writes=1&delay_us=1", file.display());
        let leaf = open_leaf(&spec, LeafOptions::default()).unwrap();
        assert_eq!(leaf.path(), spec);
        assert!(leaf.write_at(&[0u8; 4096], 1 << 20).is_err());
        let (_, s) = parse_fault_spec(&spec[FAULT_PREFIX.len()..]).unwrap();
        assert_eq!(
            s.control.unwrap(),
            std::path::PathBuf::from(format!("{}.fault", file.display()))
        );
    }

    #[test]
    fn relative_specs_become_absolute_and_others_stay() {
        let cwd = std::env::current_dir().unwrap().display().to_string();
        assert_eq!(absolute_spec("d0"), format!("{cwd}/d0"));
        assert_eq!(absolute_spec("./d0"), format!("{cwd}/d0"));
        assert_eq!(absolute_spec("/dev/sda"), "/dev/sda");
        assert_eq!(
            absolute_spec("fault:d1?fail_reads=1"),
            format!("fault:{cwd}/d1?fail_reads=1")
        );
        assert_eq!(absolute_spec("fault:d1"), format!("fault:{cwd}/d1"));
        assert_eq!(
            absolute_spec("sim:d2?disk=1TB"),
            format!("sim:{cwd}/d2?disk=1TB")
        );
        let url = "nbd://127.0.0.1:10809/x";
        assert_eq!(absolute_spec(url), url);
    }

    #[test]
    fn bad_fault_specs_are_errors() {
        for spec in [
            "fault:",
            "fault:?x=1",
            "fault:/nope?fail_reads=7",
            "fault:fault:/x",
        ] {
            assert!(open_leaf(spec, LeafOptions::default()).is_err(), "{spec}");
        }
    }
}
