//! A leaf wrapper that injects faults: failing reads or writes, silently corrupted reads,
//! or vanishing altogether. Tests use it to prove the layers above survive bad disks.
//!
//! Besides the on/off switches, a `FaultLeaf` injects faults with a probability per I/O
//! (failed reads and writes, corrupted reads, torn writes), adds latency, limits bandwidth,
//! and can drop writes while reporting them done (the device later comes back stale).
//! `FaultSettings` is the text form of all of it (`fail_reads=0.01&delay_ms=5&…`, see
//! docs/torture.md); a control file re-read at most every 100 ms flips faults on a leaf
//! that another process opened.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::leaf::Leaf;

/// Switches for the faults a `FaultLeaf` injects; flip them at any time.
#[derive(Debug, Default)]
pub struct FaultSwitches {
    /// Every read returns EIO.
    pub fail_reads: AtomicBool,
    /// Every write returns EIO.
    pub fail_writes: AtomicBool,
    /// Reads succeed but return flipped bits (silent corruption).
    pub corrupt_reads: AtomicBool,
    /// The device is gone: every I/O fails with ENXIO.
    pub vanished: AtomicBool,
    /// Reads that were failed or corrupted.
    pub injected: AtomicU64,
    /// Chance, in parts per million, that a read fails with EIO.
    pub read_error_ppm: AtomicU32,
    /// Chance, in parts per million, that a write fails with EIO (nothing is written).
    pub write_error_ppm: AtomicU32,
    /// The same, for writes into the data area only (not the labels, nor the reserved area
    /// after the front labels): a disk that fails in the middle of a txg, after it took
    /// `failmode=continue`'s probe.
    pub data_write_error_ppm: AtomicU32,
    /// Chance, in parts per million, that a read returns flipped bits.
    pub corrupt_read_ppm: AtomicU32,
    /// Chance, in parts per million, that a write persists only its first half (whole
    /// 512-byte sectors) yet reports success: a torn write.
    pub torn_write_ppm: AtomicU32,
    /// Writes report success but are not persisted: the device keeps stale contents.
    pub drop_writes: AtomicBool,
    /// Latency added to every I/O, in microseconds.
    pub delay_us: AtomicU64,
    /// Bandwidth limit in bytes per second (0 = none): each I/O sleeps `len / limit`.
    pub throttle_bytes_per_sec: AtomicU64,
    /// The device serves one I/O at a time: the delay and bandwidth sleeps of concurrent
    /// I/Os queue behind each other (a busy disk), instead of overlapping.
    pub serial: AtomicBool,
    /// Held through an I/O's sleeps when `serial`.
    busy: std::sync::Mutex<()>,
    /// State of the generator that draws the random faults (xorshift; never 0).
    pub rng_state: AtomicU64,
    /// Writes that were failed, torn or dropped.
    pub injected_writes: AtomicU64,
}

/// Parts per million of a probability in 0..=1.
const PPM: u32 = 1_000_000;

impl FaultSwitches {
    /// Draws one event of probability `ppm` / 1e6.
    pub fn chance(&self, ppm: &AtomicU32) -> bool {
        let ppm = ppm.load(Ordering::Relaxed);
        if ppm == 0 {
            return false;
        }
        if ppm >= PPM {
            return true;
        }
        let mut x = self.rng_state.load(Ordering::Relaxed);
        if x == 0 {
            x = 0x9E37_79B9_7F4A_7C15;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng_state.store(x, Ordering::Relaxed);
        (x % u64::from(PPM)) < u64::from(ppm)
    }

    /// Sleeps for the configured delay and the bandwidth limit of an I/O of `len` bytes.
    fn pace(&self, len: usize) {
        let mut wait = Duration::from_micros(self.delay_us.load(Ordering::Relaxed));
        let bw = self.throttle_bytes_per_sec.load(Ordering::Relaxed);
        if bw > 0 {
            wait += Duration::from_secs_f64(len as f64 / bw as f64);
        }
        if !wait.is_zero() {
            let _busy = self
                .serial
                .load(Ordering::Relaxed)
                .then(|| self.busy.lock().unwrap_or_else(|p| p.into_inner()));
            std::thread::sleep(wait);
        }
    }

    /// Sets every switch from `s` (all of them: what `s` leaves out is switched off).
    pub fn apply(&self, s: &FaultSettings) {
        let ppm = |p: f64| (p.clamp(0.0, 1.0) * f64::from(PPM)).round() as u32;
        self.fail_reads.store(false, Ordering::Relaxed);
        self.fail_writes.store(false, Ordering::Relaxed);
        self.corrupt_reads.store(false, Ordering::Relaxed);
        self.vanished.store(s.vanish, Ordering::Relaxed);
        self.read_error_ppm
            .store(ppm(s.fail_reads), Ordering::Relaxed);
        self.write_error_ppm
            .store(ppm(s.fail_writes), Ordering::Relaxed);
        self.data_write_error_ppm
            .store(ppm(s.fail_data_writes), Ordering::Relaxed);
        self.corrupt_read_ppm
            .store(ppm(s.corrupt), Ordering::Relaxed);
        self.torn_write_ppm.store(ppm(s.tear), Ordering::Relaxed);
        self.drop_writes.store(s.stale, Ordering::Relaxed);
        self.serial.store(s.serial, Ordering::Relaxed);
        self.delay_us.store(s.delay_us, Ordering::Relaxed);
        self.throttle_bytes_per_sec
            .store(s.bandwidth, Ordering::Relaxed);
        if let Some(seed) = s.seed {
            self.rng_state.store(seed.max(1), Ordering::Relaxed);
        }
    }
}

/// The faults of a leaf in text form: `key=value` pairs separated by `&`, `,`, spaces or
/// new lines (`#` starts a comment). Probabilities are in 0..=1.
///
/// | key | meaning |
/// |-----|---------|
/// | `fail_reads=P` | a read fails with EIO with probability P |
/// | `fail_writes=P` | a write fails with EIO with probability P |
/// | `fail_data_writes=P` | the same, for writes into the data area only (not labels) |
/// | `corrupt=P` | a read returns flipped bits with probability P |
/// | `tear=P` | a write persists only its first half, reporting success, with probability P |
/// | `delay_ms=N`, `delay_us=N` | latency added to every I/O |
/// | `bw=N[K|M|G]` | bandwidth limit in bytes per second |
/// | `vanish=1` | the device is gone: every I/O fails with ENXIO |
/// | `stale=1` | writes report success but are dropped (the device comes back stale) |
/// | `serial=1` | one I/O at a time: delays and bandwidth sleeps queue (a busy disk) |
/// | `seed=N` | seed of the fault generator (default: fixed) |
/// | `control=PATH` | control file (only in a `fault:` device spec, see `open_leaf`) |
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultSettings {
    pub fail_reads: f64,
    pub fail_writes: f64,
    pub fail_data_writes: f64,
    pub corrupt: f64,
    pub tear: f64,
    pub delay_us: u64,
    pub bandwidth: u64,
    pub vanish: bool,
    pub stale: bool,
    pub serial: bool,
    pub seed: Option<u64>,
    pub control: Option<PathBuf>,
}

/// A fault setting that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    #[error("unknown fault setting '{0}' (known: fail_reads, fail_writes, fail_data_writes, corrupt, tear, delay_ms, delay_us, bw, vanish, stale, serial, seed, control)")]
    UnknownKey(String),
    #[error("fault setting '{key}': bad value '{value}' ({why})")]
    BadValue {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("fault setting '{0}' needs a value: KEY=VALUE")]
    MissingValue(String),
}

impl FaultSettings {
    /// Parses `key=value` pairs (see the type's docs).
    pub fn parse(text: &str) -> Result<FaultSettings, FaultSpecError> {
        let mut s = FaultSettings::default();
        let body: String = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for pair in body
            .split(|c: char| c == '&' || c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| FaultSpecError::MissingValue(pair.to_string()))?;
            s.set(key, value)?;
        }
        Ok(s)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), FaultSpecError> {
        let bad = |why| FaultSpecError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            why,
        };
        let probability = || -> Result<f64, FaultSpecError> {
            match value.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(bad("a probability from 0 to 1")),
            }
        };
        let flag = || -> Result<bool, FaultSpecError> {
            match value {
                "1" | "true" | "on" | "yes" => Ok(true),
                "0" | "false" | "off" | "no" => Ok(false),
                _ => Err(bad("1 or 0")),
            }
        };
        let number = || value.parse::<u64>().map_err(|_| bad("a whole number"));
        match key {
            "fail_reads" => self.fail_reads = probability()?,
            "fail_writes" => self.fail_writes = probability()?,
            "fail_data_writes" => self.fail_data_writes = probability()?,
            "corrupt" => self.corrupt = probability()?,
            "tear" => self.tear = probability()?,
            "delay_ms" => {
                self.delay_us = number()?
                    .checked_mul(1000)
                    .ok_or_else(|| bad("too large"))?
            }
            "delay_us" => self.delay_us = number()?,
            "bw" => {
                self.bandwidth =
                    parse_bytes(value).ok_or_else(|| bad("bytes per second, e.g. 100M"))?
            }
            "vanish" => self.vanish = flag()?,
            "stale" => self.stale = flag()?,
            "serial" => self.serial = flag()?,
            "seed" => self.seed = Some(number()?),
            "control" => self.control = Some(PathBuf::from(value)),
            _ => return Err(FaultSpecError::UnknownKey(key.to_string())),
        }
        Ok(())
    }
}

/// `123`, `64K`, `100M`, `2G` (powers of 1024) → bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// How often a `FaultLeaf` looks at its control file.
pub const CONTROL_POLL: Duration = Duration::from_millis(100);

/// A control file: when its contents change, they replace the leaf's fault settings; when
/// it is removed, the settings the leaf was opened with come back.
#[derive(Debug)]
struct ControlFile {
    path: PathBuf,
    base: FaultSettings,
    seen: Mutex<ControlSeen>,
}

#[derive(Debug)]
struct ControlSeen {
    checked: Option<Instant>,
    /// (modification time, length) of the contents applied last; `None` = no file.
    stamp: Option<(SystemTime, u64)>,
}

/// A leaf that passes I/O through to `inner` unless a fault is switched on.
#[derive(Debug)]
pub struct FaultLeaf {
    inner: Arc<dyn Leaf>,
    pub switches: Arc<FaultSwitches>,
    /// What `path()` reports (the `fault:` spec when opened from one, so a reopen of the
    /// pool wraps the device again); `None` = the inner leaf's path.
    shown_path: Option<String>,
    control: Option<ControlFile>,
}

impl FaultLeaf {
    pub fn new(inner: Arc<dyn Leaf>) -> FaultLeaf {
        FaultLeaf {
            inner,
            switches: Arc::new(FaultSwitches::default()),
            shown_path: None,
            control: None,
        }
    }

    /// A fault leaf with `settings` applied, reporting `shown_path` as its path, and
    /// watching `settings.control` (if any) for new settings.
    pub fn with_settings(
        inner: Arc<dyn Leaf>,
        settings: FaultSettings,
        shown_path: Option<String>,
    ) -> FaultLeaf {
        let mut leaf = FaultLeaf::new(inner);
        leaf.switches.apply(&settings);
        leaf.shown_path = shown_path;
        leaf.control = settings.control.clone().map(|path| ControlFile {
            path,
            base: settings,
            seen: Mutex::new(ControlSeen {
                checked: None,
                stamp: None,
            }),
        });
        leaf
    }

    /// Re-reads the control file if it changed and `CONTROL_POLL` has passed since the
    /// last look. A file that does not parse is ignored (the previous settings stay).
    fn poll_control(&self) {
        let Some(ctl) = &self.control else { return };
        let Ok(mut seen) = ctl.seen.try_lock() else {
            return;
        };
        let now = Instant::now();
        if seen
            .checked
            .is_some_and(|t| now.duration_since(t) < CONTROL_POLL)
        {
            return;
        }
        seen.checked = Some(now);
        let stamp = std::fs::metadata(&ctl.path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        if stamp == seen.stamp {
            return;
        }
        let settings = match stamp {
            None => Some(ctl.base.clone()),
            Some(_) => std::fs::read_to_string(&ctl.path)
                .ok()
                .and_then(|t| FaultSettings::parse(&t).ok()),
        };
        if let Some(settings) = settings {
            self.switches.apply(&settings);
            seen.stamp = stamp;
        }
    }

    /// Injected read fault, if one is drawn: EIO or (after the read) corruption.
    fn read_fault(&self) -> Option<io::Error> {
        self.poll_control();
        if let Some(e) = self.gone() {
            return Some(e);
        }
        let sw = &self.switches;
        if sw.fail_reads.load(Ordering::Relaxed) || sw.chance(&sw.read_error_ppm) {
            sw.injected.fetch_add(1, Ordering::Relaxed);
            return Some(eio());
        }
        None
    }

    fn corrupts_read(&self) -> bool {
        let sw = &self.switches;
        sw.corrupt_reads.load(Ordering::Relaxed) || sw.chance(&sw.corrupt_read_ppm)
    }

    fn gone(&self) -> Option<io::Error> {
        if self.switches.vanished.load(Ordering::Relaxed) {
            self.switches.injected.fetch_add(1, Ordering::Relaxed);
            return Some(io::Error::from_raw_os_error(libc::ENXIO));
        }
        None
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl Leaf for FaultLeaf {
    fn refresh_size(&self) -> io::Result<u64> {
        self.inner.refresh_size()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn path(&self) -> &str {
        self.shown_path
            .as_deref()
            .unwrap_or_else(|| self.inner.path())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn nonrot(&self) -> bool {
        self.inner.nonrot()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if let Some(e) = self.read_fault() {
            return Err(e);
        }
        self.switches.pace(buf.len());
        self.inner.read_at(buf, offset)?;
        if self.corrupts_read() {
            self.switches.injected.fetch_add(1, Ordering::Relaxed);
            for b in buf.iter_mut().step_by(97) {
                *b ^= 0x5a;
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.poll_control();
        if let Some(e) = self.gone() {
            return Err(e);
        }
        let sw = &self.switches;
        let data_area =
            cairn_geometry::LEAF_DATA_START..cairn_geometry::label_offset(self.inner.size(), 2);
        if sw.fail_writes.load(Ordering::Relaxed)
            || sw.chance(&sw.write_error_ppm)
            || (data_area.contains(&offset) && sw.chance(&sw.data_write_error_ppm))
        {
            sw.injected_writes.fetch_add(1, Ordering::Relaxed);
            return Err(eio());
        }
        sw.pace(buf.len());
        if sw.drop_writes.load(Ordering::Relaxed) {
            sw.injected_writes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if sw.chance(&sw.torn_write_ppm) {
            sw.injected_writes.fetch_add(1, Ordering::Relaxed);
            let half = (buf.len() / 2) & !511;
            return self.inner.write_at(&buf[..half], offset);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.poll_control();
        if let Some(e) = self.gone() {
            return Err(e);
        }
        self.inner.flush()
    }
}

/// Shared "power" of a set of `CrashLeaf`s: writes are numbered across all of them; from
/// write number `persist_limit` on nothing reaches the disk (writes still report success,
/// as a volatile cache would before a power cut). With `tear`, that one write is persisted
/// only in its first half.
#[derive(Debug)]
pub struct PowerCut {
    pub writes: AtomicU64,
    pub persist_limit: AtomicU64,
    pub tear: AtomicBool,
}

impl PowerCut {
    pub fn new(persist_limit: u64, tear: bool) -> Arc<PowerCut> {
        Arc::new(PowerCut {
            writes: AtomicU64::new(0),
            persist_limit: AtomicU64::new(persist_limit),
            tear: AtomicBool::new(tear),
        })
    }
}

/// A leaf that stops persisting writes after a given write number (crash tests).
#[derive(Debug)]
pub struct CrashLeaf {
    inner: Arc<dyn Leaf>,
    power: Arc<PowerCut>,
}

impl CrashLeaf {
    pub fn new(inner: Arc<dyn Leaf>, power: Arc<PowerCut>) -> CrashLeaf {
        CrashLeaf { inner, power }
    }
}

impl Leaf for CrashLeaf {
    fn refresh_size(&self) -> io::Result<u64> {
        self.inner.refresh_size()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn nonrot(&self) -> bool {
        self.inner.nonrot()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let n = self.power.writes.fetch_add(1, Ordering::SeqCst);
        let limit = self.power.persist_limit.load(Ordering::SeqCst);
        if n < limit {
            return self.inner.write_at(buf, offset);
        }
        if n == limit && self.power.tear.load(Ordering::SeqCst) {
            let half = (buf.len() / 2) & !511;
            return self.inner.write_at(&buf[..half], offset);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::{FileLeaf, LeafOptions};

    fn file_leaf(dir: &std::path::Path) -> Arc<dyn Leaf> {
        let path = dir.join("leaf");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(cairn_geometry::MIN_LEAF_SIZE)
            .unwrap();
        Arc::new(FileLeaf::open(&path, LeafOptions::default()).unwrap())
    }

    #[test]
    fn settings_parse_every_key_and_reject_bad_input() {
        let s = FaultSettings::parse(
            "fail_reads=0.5&fail_writes=1,corrupt=0.25 tear=0\ndelay_ms=3 bw=100M vanish=1 stale=on seed=7 # comment",
        )
        .unwrap();
        assert_eq!(s.fail_reads, 0.5);
        assert_eq!(s.fail_writes, 1.0);
        assert_eq!(s.corrupt, 0.25);
        assert_eq!(s.delay_us, 3000);
        assert_eq!(s.bandwidth, 100 << 20);
        assert!(s.vanish && s.stale);
        assert_eq!(s.seed, Some(7));
        assert_eq!(FaultSettings::parse("").unwrap(), FaultSettings::default());
        assert!(matches!(
            FaultSettings::parse("fail_reads=2"),
            Err(FaultSpecError::BadValue { .. })
        ));
        assert!(matches!(
            FaultSettings::parse("explode=1"),
            Err(FaultSpecError::UnknownKey(_))
        ));
        assert!(matches!(
            FaultSettings::parse("vanish"),
            Err(FaultSpecError::MissingValue(_))
        ));
        assert!(FaultSettings::parse("bw=12Q").is_err());
        assert!(FaultSettings::parse("delay_ms=99999999999999999999").is_err());
    }

    #[test]
    fn probabilities_fire_at_about_their_rate() {
        let sw = FaultSwitches::default();
        sw.apply(&FaultSettings {
            fail_reads: 0.1,
            seed: Some(3),
            ..FaultSettings::default()
        });
        let hits = (0..100_000)
            .filter(|_| sw.chance(&sw.read_error_ppm))
            .count();
        assert!((8_000..12_000).contains(&hits), "{hits}");
        assert!(!sw.chance(&sw.write_error_ppm));
    }

    #[test]
    fn a_serial_device_queues_its_delays() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = FaultLeaf::new(file_leaf(dir.path()));
        let four_reads = |leaf: &FaultLeaf| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for i in 0..4u64 {
                    s.spawn(move || leaf.read_at(&mut [0u8; 4096], i * 4096).unwrap());
                }
            });
            start.elapsed()
        };
        leaf.switches
            .apply(&FaultSettings::parse("delay_ms=50").unwrap());
        let overlapping = four_reads(&leaf);
        assert!(overlapping < Duration::from_millis(150), "{overlapping:?}");
        leaf.switches
            .apply(&FaultSettings::parse("delay_ms=50&serial=1").unwrap());
        let queued = four_reads(&leaf);
        assert!(queued >= Duration::from_millis(200), "{queued:?}");
        assert!(FaultSettings::parse("serial=2").is_err());
    }

    #[test]
    fn stale_drops_writes_and_tear_keeps_the_first_half() {
        let dir = tempfile::tempdir().unwrap();
        let inner = file_leaf(dir.path());
        let leaf = FaultLeaf::new(inner.clone());
        let old = vec![1u8; 8192];
        leaf.write_at(&old, 0).unwrap();
        leaf.switches.drop_writes.store(true, Ordering::Relaxed);
        leaf.write_at(&[2u8; 8192], 0).unwrap();
        let mut back = vec![0u8; 8192];
        inner.read_at(&mut back, 0).unwrap();
        assert_eq!(back, old, "a dropped write reached the disk");
        leaf.switches.apply(&FaultSettings {
            tear: 1.0,
            ..FaultSettings::default()
        });
        leaf.write_at(&[3u8; 8192], 0).unwrap();
        inner.read_at(&mut back, 0).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 3));
        assert!(back[4096..].iter().all(|&b| b == 1));
        assert_eq!(leaf.switches.injected_writes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn fail_data_writes_spares_the_labels_and_the_reserved_area() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = FaultLeaf::new(file_leaf(dir.path()));
        leaf.switches
            .apply(&FaultSettings::parse("fail_data_writes=1").unwrap());
        let size = leaf.size();
        let end_labels = cairn_geometry::label_offset(size, 2);
        for (at, fails) in [
            (0, false),
            (2 * cairn_geometry::LABEL_SIZE, false),
            (cairn_geometry::LEAF_DATA_START, true),
            (end_labels - 4096, true),
            (end_labels, false),
        ] {
            assert_eq!(leaf.write_at(&[7u8; 4096], at).is_err(), fails, "at {at}");
        }
    }

    #[test]
    fn control_file_flips_faults_and_its_removal_restores_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let ctl = dir.path().join("leaf.fault");
        let settings = FaultSettings {
            control: Some(ctl.clone()),
            ..FaultSettings::default()
        };
        let leaf = FaultLeaf::with_settings(file_leaf(dir.path()), settings, Some("x".into()));
        assert_eq!(leaf.path(), "x");
        let mut buf = vec![0u8; 4096];
        leaf.read_at(&mut buf, 0).unwrap();
        std::fs::write(&ctl, "vanish=1\n").unwrap();
        std::thread::sleep(CONTROL_POLL + Duration::from_millis(20));
        let err = leaf.read_at(&mut buf, 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENXIO));
        std::fs::remove_file(&ctl).unwrap();
        std::thread::sleep(CONTROL_POLL + Duration::from_millis(20));
        leaf.read_at(&mut buf, 0).unwrap();
    }
}
