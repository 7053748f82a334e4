//! `sim:PATH?disk=SPEC[&pace=real]`: a pool leaf that stores real data and is timed by the
//! lab's disk model.
//!
//! ```text
//!  pool ── read_at / write_at / flush ──► SimLeaf ──► FileLeaf(PATH): the bytes (a sparse
//!                                            │         file: a 4 TB disk costs what is written)
//!                                            └──► Device (Hdd or Ssd, DiskModel::build):
//!                                                  submit at the leaf's clock, advance to the
//!                                                  command's completion; the clock moves there
//!   leaf clock (virtual ms) ─┬─ read 128K ─┬─ write 4K ─┬─ flush ──────────┬─►
//!                            0            8.3          8.4               21.7
//! ```
//!
//! `SPEC` is one disk of the lab's `--disks` grammar without the count
//! (`SIZE[,hdd|ssd][,512n|512e|4kn][,RPM]`, e.g. `2TB,512e`); the leaf is that big and
//! reports the model's physical sector (512e and 4Kn: 4 KiB) and whether it rotates. PATH
//! is made (sparse) when missing or empty.
//!
//! Timing, virtual (the default): requests to one leaf are taken one at a time (queue
//! depth 1 per leaf: the pool's threads still overlap different leaves), each submitted
//! when the previous one completed, so the clock is the leaf's busy time. Opening builds a
//! fresh device (cold cache, heads parked), as after a power cycle. Busy time adds up per
//! PATH for the whole process (`busy_ms`), across reopens: a run's virtual time is the
//! busiest leaf's share.
//!
//! With `pace=real` the model's clock is the wall clock since the leaf opened: each
//! request is submitted at the time it arrives, the requests of all the threads using the
//! leaf wait in the model's queue together (so NCQ reorders them, as the lab's fio runs
//! do), and each caller returns when its request completes in real time; fio or iostat on
//! such a pool see the disk's latencies and queueing. Busy time then counts overlapping
//! requests once (approximately: in the order their completions are seen).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cairn_vdev::{FileLeaf, Leaf, LeafOptions, VdevError};

use crate::device::{Cmd, Device, Done, Op};
use crate::spec::{parse_disks, DiskModel};

/// Prefix of a simulated device spec.
pub const SIM_PREFIX: &str = "sim:";

/// Events one request may take before the model is declared stuck (an error, not a hang).
const MAX_EVENTS_PER_REQUEST: usize = 1 << 20;

/// What a `sim:` spec asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSettings {
    pub model: DiskModel,
    /// Requests also take their model time in real time.
    pub pace: bool,
}

/// Splits `PATH?disk=SPEC[&pace=real]` (the part after `sim:`) and parses the settings.
pub fn parse_sim_spec(rest: &str) -> Result<(&str, SimSettings), String> {
    let usage = "write sim:PATH?disk=SIZE[,hdd|ssd][,512n|512e|4kn][,RPM][&pace=real], \
                 e.g. sim:/tmp/d0?disk=2TB,512e";
    let (path, query) = rest
        .split_once('?')
        .ok_or_else(|| format!("no disk given; {usage}"))?;
    if path.is_empty() {
        return Err(format!("no backing file given; {usage}"));
    }
    let (mut model, mut pace) = (None, false);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("disk", spec)) => {
                let disks = parse_disks(&format!("1x{spec}")).map_err(|e| e.to_string())?;
                model = disks.into_iter().next();
            }
            Some(("pace", "real")) => pace = true,
            Some(("pace", "virtual")) => pace = false,
            _ => {
                return Err(format!(
                    "{pair:?} is not disk=… or pace=real|virtual; {usage}"
                ))
            }
        }
    }
    let model = model.ok_or_else(|| format!("no disk= given; {usage}"))?;
    Ok((path, SimSettings { model, pace }))
}

/// The `sim:` specs of the disks one `--disks` value names (`N x REST` gives N leaves
/// `sim:DIR/dK?disk=REST`, numbered from `first`).
pub fn leaf_specs(dir: &Path, disks: &str, first: usize) -> Result<Vec<String>, String> {
    let n = parse_disks(disks).map_err(|e| e.to_string())?.len();
    let (_, rest) = disks
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("--disks {disks:?}: no count"))?;
    let rest = rest.trim();
    Ok((first..first + n)
        .map(|k| {
            format!(
                "{SIM_PREFIX}{}?disk={rest}",
                dir.join(format!("d{k}")).display()
            )
        })
        .collect())
}

/// The backing file of a `sim:` spec.
pub fn backing_of(spec: &str) -> Option<&str> {
    let rest = spec.strip_prefix(SIM_PREFIX)?;
    Some(rest.split_once('?').map_or(rest, |(path, _)| path))
}

/// Busy time (virtual ms) of every backing file a `SimLeaf` was opened on, this process.
fn busy_table() -> &'static Mutex<HashMap<String, f64>> {
    static TABLE: OnceLock<Mutex<HashMap<String, f64>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Virtual milliseconds the leaves on backing file `path` have been busy in this process
/// (0 for a path never opened).
pub fn busy_ms(path: &str) -> f64 {
    let table = busy_table().lock().unwrap_or_else(|p| p.into_inner());
    table.get(path).copied().unwrap_or(0.0)
}

/// The model's state while the leaf is open.
struct Clocked {
    device: Box<dyn Device + Send>,
    /// Virtual ms: when the last request completed.
    clock: f64,
    next_id: u64,
    done: Vec<Done>,
    /// `pace=real`: the latest completion counted in the busy time (commands overlap).
    busy_until: f64,
    /// The most commands the device has held at once.
    deepest_queue: usize,
}

/// A leaf whose bytes live in a sparse file and whose time comes from a disk model.
pub struct SimLeaf {
    spec: String,
    backing: String,
    data: FileLeaf,
    settings: SimSettings,
    clocked: Mutex<Clocked>,
    /// Signalled when the model completes commands (`pace=real`: callers wait on it).
    completed: Condvar,
    /// Real time of virtual 0 (`pace=real`).
    opened: Instant,
}

impl fmt::Debug for SimLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLeaf")
            .field("spec", &self.spec)
            .field("pace", &self.settings.pace)
            .finish()
    }
}

impl SimLeaf {
    /// Opens `sim:PATH?…` (`spec` whole, as the pool records it).
    pub fn open(spec: &str, opts: LeafOptions) -> Result<SimLeaf, VdevError> {
        let rest = spec.strip_prefix(SIM_PREFIX).unwrap_or(spec);
        let (path, settings) = parse_sim_spec(rest).map_err(|why| bad_spec(spec, why))?;
        prepare_backing(path, settings.model.capacity(), opts.read_only)?;
        let data = FileLeaf::open(Path::new(path), opts)?;
        let device = settings.model.build();
        Ok(SimLeaf {
            spec: spec.to_string(),
            backing: path.to_string(),
            data,
            clocked: Mutex::new(Clocked {
                device,
                clock: 0.0,
                next_id: 0,
                done: Vec::new(),
                busy_until: 0.0,
                deepest_queue: 0,
            }),
            completed: Condvar::new(),
            settings,
            opened: Instant::now(),
        })
    }

    /// Runs one command through the model; with `pace=real`, waits out its time.
    fn time(&self, op: Op, offset: u64, len: u64) -> io::Result<()> {
        if self.settings.pace {
            return self.time_paced(op, offset, len);
        }
        let mut c = self.clocked.lock().unwrap_or_else(|p| p.into_inner());
        let now = c.clock;
        let id = c.submit(now, op, offset, len);
        let end = run_until_done(&mut c, id).ok_or_else(|| self.stuck())?;
        c.clock = end;
        drop(c);
        self.add_busy(end - now);
        Ok(())
    }

    /// `pace=real`: the commands of every thread using the leaf are queued in the model
    /// together, submitted at the wall clock's time, so the drive's NCQ reorders them as a
    /// real one would. Whichever caller holds the lock moves the model to the wall clock,
    /// event by event, waking the others; each returns once its own command completed.
    fn time_paced(&self, op: Op, offset: u64, len: u64) -> io::Result<()> {
        let mut c = self.clocked.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.wall_ms();
        advance_to(&mut c, now);
        let id = c.submit(now, op, offset, len);
        for _ in 0..MAX_EVENTS_PER_REQUEST {
            if let Some(at) = c.done.iter().position(|d| d.id == id) {
                let end = c.done.swap_remove(at).time;
                let busy = end - now.max(c.busy_until);
                c.busy_until = c.busy_until.max(end);
                drop(c);
                self.add_busy(busy.max(0.0));
                return Ok(());
            }
            let next = c.device.next_event().ok_or_else(|| self.stuck())?;
            let wall = self.wall_ms();
            if next <= wall {
                let Clocked { device, done, .. } = &mut *c;
                device.advance(next, done);
                self.completed.notify_all();
                continue;
            }
            let wait = Duration::from_secs_f64((next - wall) / 1e3);
            c = match self.completed.wait_timeout(c, wait) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        Err(self.stuck())
    }

    /// The most commands the disk model held at once since the leaf opened (above 1 only
    /// with `pace=real` and several threads).
    pub fn deepest_queue(&self) -> usize {
        let c = self.clocked.lock().unwrap_or_else(|p| p.into_inner());
        c.deepest_queue
    }

    /// Real milliseconds since the leaf opened (virtual time under `pace=real`).
    fn wall_ms(&self) -> f64 {
        self.opened.elapsed().as_secs_f64() * 1e3
    }

    fn stuck(&self) -> io::Error {
        io::Error::other(format!(
            "{}: the disk model did not complete a request",
            self.spec
        ))
    }

    /// Adds `ms` to the backing file's busy time.
    fn add_busy(&self, ms: f64) {
        let mut table = busy_table().lock().unwrap_or_else(|p| p.into_inner());
        *table.entry(self.backing.clone()).or_default() += ms;
    }
}

impl Clocked {
    /// Submits a command at `now`; its id.
    fn submit(&mut self, now: f64, op: Op, offset: u64, len: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let cmd = Cmd {
            id,
            op,
            offset,
            len,
        };
        self.device.submit(now, cmd);
        self.deepest_queue = self.deepest_queue.max(self.device.outstanding());
        id
    }
}

/// Moves the device through its events up to `now` (their completions into `done`).
fn advance_to(c: &mut Clocked, now: f64) {
    for _ in 0..MAX_EVENTS_PER_REQUEST {
        match c.device.next_event() {
            Some(t) if t <= now => {
                let Clocked { device, done, .. } = c;
                device.advance(t, done);
            }
            _ => return,
        }
    }
}

/// Advances the device event by event until command `id` completes; its time.
fn run_until_done(c: &mut Clocked, id: u64) -> Option<f64> {
    for _ in 0..MAX_EVENTS_PER_REQUEST {
        if let Some(at) = c.done.iter().position(|d| d.id == id) {
            return Some(c.done.swap_remove(at).time);
        }
        let t = c.device.next_event()?;
        let Clocked { device, done, .. } = c;
        device.advance(t, done);
    }
    None
}

/// Makes the backing file `size` bytes (sparse) when missing or empty; refuses one of
/// another size.
fn prepare_backing(path: &str, size: u64, read_only: bool) -> Result<(), VdevError> {
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io_error(path, e)),
    };
    if len == size {
        return Ok(());
    }
    if len != 0 || read_only {
        return Err(bad_spec(
            path,
            format!(
                "the backing file holds {len} bytes but the disk model is {size}; give \
                 the disk= it was made with, or a new file"
            ),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    file.set_len(size).map_err(|e| io_error(path, e))
}

fn bad_spec(spec: &str, why: String) -> VdevError {
    io_error(spec, io::Error::new(io::ErrorKind::InvalidInput, why))
}

fn io_error(path: &str, source: io::Error) -> VdevError {
    VdevError::Io {
        path: path.to_string(),
        source,
    }
}

impl Leaf for SimLeaf {
    fn path(&self) -> &str {
        &self.spec
    }
    fn release(&self) {
        self.data.release()
    }
    fn size(&self) -> u64 {
        self.data.size()
    }
    fn physical_sector_size(&self) -> u32 {
        match &self.settings.model {
            DiskModel::Hdd(p) => p.format.physical() as u32,
            DiskModel::Ssd(_) => 4096,
        }
    }
    fn nonrot(&self) -> bool {
        matches!(self.settings.model, DiskModel::Ssd(_))
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.data.read_at(buf, offset)?;
        self.time(Op::Read, offset, buf.len() as u64)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.data.write_at(buf, offset)?;
        self.time(Op::Write, offset, buf.len() as u64)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.data.write_vectored_at(bufs, offset)?;
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.time(Op::Write, offset, len)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.data.read_vectored_at(bufs, offset)?;
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.time(Op::Read, offset, len)
    }
    fn flush(&self) -> io::Result<()> {
        self.data.flush()?;
        self.time(Op::Flush, 0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_in(dir: &Path, name: &str, disk: &str) -> String {
        format!("sim:{}?disk={disk}", dir.join(name).display())
    }

    /// `pace=real`: requests of several threads wait in the model's queue together (where
    /// NCQ reorders them), and each still completes with its own data.
    #[test]
    fn paced_requests_of_several_threads_queue_in_the_model_together() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("{}&pace=real", spec_in(dir.path(), "d0", "2TB"));
        let leaf = SimLeaf::open(&spec, LeafOptions::default()).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let leaf = &leaf;
                s.spawn(move || {
                    for k in 0..4u64 {
                        let offset = ((t * 4 + k) * 37 % 32) * (60 << 30);
                        let block = vec![(t * 4 + k) as u8; 4096];
                        leaf.write_at(&block, offset).unwrap();
                        let mut back = vec![0u8; 4096];
                        leaf.read_at(&mut back, offset).unwrap();
                        assert_eq!(back, block);
                    }
                });
            }
        });
        assert!(leaf.deepest_queue() > 1, "{}", leaf.deepest_queue());
    }

    #[test]
    fn stores_data_sparsely_and_reports_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path(), "d0", "2TB,512e");
        let leaf = SimLeaf::open(&spec, LeafOptions::default()).unwrap();
        assert_eq!(leaf.size(), 2_000_000_000_000);
        assert_eq!(leaf.physical_sector_size(), 4096);
        assert!(!leaf.nonrot());
        assert_eq!(leaf.path(), spec);
        let block = vec![7u8; 128 << 10];
        leaf.write_at(&block, 1 << 40).unwrap();
        leaf.flush().unwrap();
        let mut back = vec![0u8; 128 << 10];
        leaf.read_at(&mut back, 1 << 40).unwrap();
        assert_eq!(back, block);
        let used = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(dir.path().join("d0")).unwrap().blocks() * 512
        };
        assert!(
            used < 16 << 20,
            "a 2 TB disk with 128 KiB written uses {used} bytes"
        );
    }

    #[test]
    fn time_follows_the_model_random_reads_cost_a_seek_sequential_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_in(dir.path(), "d1", "1TB");
        let backing = dir.path().join("d1").display().to_string();
        let leaf = SimLeaf::open(&spec, LeafOptions::default()).unwrap();
        let mut buf = vec![0u8; 4096];
        let t0 = busy_ms(&backing);
        for i in 0..100u64 {
            leaf.read_at(&mut buf, (i * 7_919_993 % 200_000) * (4 << 20))
                .unwrap();
        }
        let random = (busy_ms(&backing) - t0) / 100.0;
        let t1 = busy_ms(&backing);
        for i in 0..100u64 {
            leaf.read_at(&mut buf, (512 << 30) + i * 4096).unwrap();
        }
        let sequential = (busy_ms(&backing) - t1) / 100.0;
        // A 7200 rpm disk: ~8.5 ms seek plus ~4.2 ms rotation per random read.
        assert!((6.0..25.0).contains(&random), "random read {random} ms");
        assert!(sequential < 1.0, "sequential read {sequential} ms");
    }

    #[test]
    fn an_ssd_is_fast_and_nonrot() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = SimLeaf::open(
            &spec_in(dir.path(), "s", "256GB,ssd"),
            LeafOptions::default(),
        )
        .unwrap();
        assert!(leaf.nonrot());
        let backing = dir.path().join("s").display().to_string();
        let mut buf = vec![0u8; 4096];
        for i in 0..50u64 {
            leaf.read_at(&mut buf, i * (1 << 30)).unwrap();
        }
        let per = busy_ms(&backing) / 50.0;
        assert!(per < 0.5, "ssd read {per} ms");
    }

    #[test]
    fn disks_expand_to_one_leaf_spec_each() {
        let specs = leaf_specs(Path::new("/s"), "3x2TB,512e", 1).unwrap();
        assert_eq!(
            specs,
            [
                "sim:/s/d1?disk=2TB,512e",
                "sim:/s/d2?disk=2TB,512e",
                "sim:/s/d3?disk=2TB,512e"
            ]
        );
        assert_eq!(backing_of(&specs[0]), Some("/s/d1"));
        let (_, s) = parse_sim_spec(&specs[0][SIM_PREFIX.len()..]).unwrap();
        assert_eq!(s.model, parse_disks("1x2TB,512e").unwrap()[0]);
        assert!(leaf_specs(Path::new("/s"), "2TB", 0).is_err());
    }

    #[test]
    fn bad_specs_and_a_wrong_backing_size_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for rest in [
            "/x",
            "?disk=1TB",
            "/x?disk=",
            "/x?disk=1TB,floppy",
            "/x?disk=1TB&pace=fast",
            "/x?size=1TB",
        ] {
            assert!(parse_sim_spec(rest).is_err(), "{rest}");
        }
        let small = dir.path().join("small");
        std::fs::write(&small, vec![0u8; 1 << 20]).unwrap();
        let err = SimLeaf::open(
            &format!("sim:{}?disk=1TB", small.display()),
            LeafOptions::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("disk="), "{err}");
    }

    #[test]
    fn paced_requests_take_their_time_in_real_time() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("{}&pace=real", spec_in(dir.path(), "p", "1TB"));
        let leaf = SimLeaf::open(&spec, LeafOptions::default()).unwrap();
        let mut buf = vec![0u8; 4096];
        let began = Instant::now();
        for i in 0..10u64 {
            leaf.read_at(&mut buf, (i * 97_003 % 200_000) * (4 << 20))
                .unwrap();
        }
        assert!(
            began.elapsed() >= Duration::from_millis(40),
            "10 random reads took {:?}",
            began.elapsed()
        );
    }
}
