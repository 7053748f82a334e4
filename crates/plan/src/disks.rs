//! Disks: `--disks` specifications and the built-in model table.

use crate::parse::parse_size;
use crate::PlanError;

/// Rotating or solid-state: sets default speed, AFR and BER when a size is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskKind {
    Hdd,
    Ssd,
}

impl DiskKind {
    pub fn name(self) -> &'static str {
        match self {
            DiskKind::Hdd => "hdd",
            DiskKind::Ssd => "ssd",
        }
    }
}

/// Everything the planner needs to know about one disk.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Disk {
    /// Model name, or the size as given.
    pub name: String,
    pub kind: DiskKind,
    pub bytes: u64,
    /// Physical sector size (sets the default ashift).
    pub sector_bytes: u64,
    /// Sustained sequential throughput, MB/s (10^6 B/s).
    pub seq_mbs: f64,
    pub rand_read_iops: f64,
    pub rand_write_iops: f64,
    /// Annualised failure rate (0.015 = 1.5 %).
    pub afr: f64,
    /// Unrecoverable read errors per bit read.
    pub ber: f64,
}

/// Queue depth at which a generic disk's random figures are measured: what datasheets
/// state (4 KiB, QD 32), and about what ZFS keeps queued at a busy leaf.
pub const GENERIC_QUEUE_DEPTH: usize = 32;

/// A disk given only by size: its speeds are the bench lab's disk model's, measured on the
/// simulator (`cairn_lab::figures`: the WD Re 4 TB 7200 rpm mechanics of the RAID1 study
/// at this capacity, or the lab's SATA SSD), so the planner and the lab describe one disk.
/// AFR and BER are typical datasheet and fleet values of 2015–2024 drives.
pub fn generic_disk(kind: DiskKind, bytes: u64, name: &str) -> Disk {
    use cairn_lab::spec::DiskModel;
    let (lab, sector_bytes, afr, ber) = match kind {
        // AFR 1.5 % (Backblaze fleet average), BER 1e-15 (enterprise datasheets).
        DiskKind::Hdd => (
            DiskModel::Hdd(cairn_lab::HddParams::wd_re_4tb().with_capacity(bytes)),
            4096,
            0.015,
            1e-15,
        ),
        // AFR 0.5 %, BER 1e-17.
        DiskKind::Ssd => (
            DiskModel::Ssd(cairn_lab::SsdParams::with_capacity(bytes)),
            4096,
            0.005,
            1e-17,
        ),
    };
    let figures = cairn_lab::figures::measure(&lab, GENERIC_QUEUE_DEPTH);
    Disk {
        name: name.to_string(),
        kind,
        bytes,
        sector_bytes,
        seq_mbs: figures.seq_mbs.round(),
        rand_read_iops: figures.rand_read_iops.round(),
        rand_write_iops: figures.rand_write_iops.round(),
        afr,
        ber,
    }
}

/// A built-in disk model: datasheet figures.
struct Model {
    /// The name the model is known by (upper case).
    name: &'static str,
    /// Other names it answers to (upper case), such as the vendor's part number.
    aliases: &'static [&'static str],
    kind: DiskKind,
    /// The drive's real count of 512-byte sectors.
    sectors: u64,
    sector_bytes: u64,
    seq_mbs: f64,
    rand_read_iops: f64,
    rand_write_iops: f64,
    afr: f64,
    ber: f64,
}

impl Model {
    fn disk(&self) -> Disk {
        Disk {
            name: self.name.to_string(),
            kind: self.kind,
            bytes: self.sectors * 512,
            sector_bytes: self.sector_bytes,
            seq_mbs: self.seq_mbs,
            rand_read_iops: self.rand_read_iops,
            rand_write_iops: self.rand_write_iops,
            afr: self.afr,
            ber: self.ber,
        }
    }
}

/// The built-in models (datasheet figures; sizes are the drives' real sector counts).
const MODELS: [Model; 6] = [
    // WD Re SAS 4 TB, the calomel.org test disk: 512 B sectors, MTBF 1.2 Mh, BER 1e-15.
    Model {
        name: "WD4001FYYG",
        aliases: &[],
        kind: DiskKind::Hdd,
        sectors: 7_814_037_168,
        sector_bytes: 512,
        seq_mbs: 182.0,
        rand_read_iops: 80.0,
        rand_write_iops: 80.0,
        afr: 0.0073,
        ber: 1e-15,
    },
    // WD Red 4 TB (5400 rpm class, 512e), BER 1e-14.
    Model {
        name: "WD40EFRX",
        aliases: &[],
        kind: DiskKind::Hdd,
        sectors: 7_814_037_168,
        sector_bytes: 4096,
        seq_mbs: 150.0,
        rand_read_iops: 60.0,
        rand_write_iops: 60.0,
        afr: 0.015,
        ber: 1e-14,
    },
    // Seagate Exos 7E8 4 TB (512e), BER 1e-15.
    Model {
        name: "ST4000NM0035",
        aliases: &[],
        kind: DiskKind::Hdd,
        sectors: 7_814_037_168,
        sector_bytes: 4096,
        seq_mbs: 226.0,
        rand_read_iops: 80.0,
        rand_write_iops: 80.0,
        afr: 0.0044,
        ber: 1e-15,
    },
    // Seagate Exos X16 16 TB (512e), BER 1e-15.
    Model {
        name: "ST16000NM001G",
        aliases: &[],
        kind: DiskKind::Hdd,
        sectors: 31_251_759_104,
        sector_bytes: 4096,
        seq_mbs: 261.0,
        rand_read_iops: 170.0,
        rand_write_iops: 550.0,
        afr: 0.0035,
        ber: 1e-15,
    },
    // Samsung 840 PRO 256 GB, the calomel.org SSD.
    Model {
        name: "840PRO",
        aliases: &["MZ-7PD256"],
        kind: DiskKind::Ssd,
        sectors: 500_118_192,
        sector_bytes: 4096,
        seq_mbs: 520.0,
        rand_read_iops: 97_000.0,
        rand_write_iops: 90_000.0,
        afr: 0.005,
        ber: 1e-17,
    },
    // Samsung 870 EVO 1 TB.
    Model {
        name: "870EVO",
        aliases: &["MZ-77E1T0"],
        kind: DiskKind::Ssd,
        sectors: 1_953_525_168,
        sector_bytes: 4096,
        seq_mbs: 530.0,
        rand_read_iops: 98_000.0,
        rand_write_iops: 88_000.0,
        afr: 0.005,
        ber: 1e-17,
    },
];

/// The built-in model of this name or alias (any case).
pub fn model(name: &str) -> Option<Disk> {
    let name = name.to_ascii_uppercase();
    MODELS
        .iter()
        .find(|m| m.name == name || m.aliases.contains(&name.as_str()))
        .map(Model::disk)
}

/// Names of the built-in models (for error messages and docs).
pub const MODEL_NAMES: [&str; MODELS.len()] = {
    let mut names = [""; MODELS.len()];
    let mut i = 0;
    while i < MODELS.len() {
        names[i] = MODELS[i].name;
        i += 1;
    }
    names
};

/// One `--disks` argument: `COUNTxSIZE`, `COUNTxMODEL`, or a single `SIZE`/`MODEL`.
pub fn parse_disk_spec(spec: &str, kind: DiskKind) -> Result<(usize, Disk), PlanError> {
    let (count, what) = match spec.split_once(['x', 'X', '×', '*']) {
        Some((count, what))
            if count.trim().chars().all(|c| c.is_ascii_digit()) && !count.trim().is_empty() =>
        {
            let count = count
                .trim()
                .parse::<usize>()
                .map_err(|_| PlanError::BadDiskSpec(spec.to_string()))?;
            (count, what.trim())
        }
        _ => (1, spec.trim()),
    };
    if count == 0 {
        return Err(PlanError::BadDiskSpec(spec.to_string()));
    }
    if count > crate::MAX_DISKS {
        return Err(PlanError::TooManyDisks(count));
    }
    if let Some(disk) = model(what) {
        return Ok((count, disk));
    }
    let bytes = parse_size(what).map_err(|_| PlanError::BadDiskSpec(spec.to_string()))?;
    Ok((count, generic_disk(kind, bytes, what)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let (count, disk) = parse_disk_spec("24x4TB", DiskKind::Hdd).unwrap();
        assert_eq!(count, 24);
        assert_eq!(disk.bytes, 4_000_787_030_016);
        let (count, disk) = parse_disk_spec("28x1000194703360B", DiskKind::Hdd).unwrap();
        assert_eq!((count, disk.bytes), (28, 1_000_194_703_360));
        let (count, disk) = parse_disk_spec("12xWD4001FYYG", DiskKind::Ssd).unwrap();
        assert_eq!(
            (count, disk.sector_bytes, disk.kind),
            (12, 512, DiskKind::Hdd)
        );
        let (count, disk) = parse_disk_spec("3TB", DiskKind::Ssd).unwrap();
        assert_eq!((count, disk.kind), (1, DiskKind::Ssd));
        assert!(parse_disk_spec("0x4TB", DiskKind::Hdd).is_err());
        assert!(parse_disk_spec("24xfoo", DiskKind::Hdd).is_err());
    }

    #[test]
    fn every_model_resolves() {
        for name in MODEL_NAMES {
            assert_eq!(model(name).unwrap().name, name);
        }
    }
}
