//! Tunables: read once, here in the binary, and passed down. Library crates read no
//! environment; each layer takes its part through a setter called before any pool opens.
//!
//! ```text
//!  source (first that names a tunable wins)      e.g.
//!    --tunable NAME=VALUE   (repeatable)          cairn --tunable dirty_max=1G put …
//!    environment CAIRN_<NAME>                     CAIRN_DIRTY_MAX=1G cairn put …
//!    $CAIRN_HOME/tunables.conf  ("NAME = VALUE")  dirty_max = 1G
//!    built-in default                             1/8 of RAM, at most 4 GiB
//!
//!  tunable              goes to
//!    dirty_max            cairn_objset::StoreConfig (dirty data that forces a txg sync)
//!    background_batch     cairn_objset::StoreConfig (bytes a background writer takes)
//!    background_writers   cairn_objset::StoreConfig (background writer threads)
//!    readahead_max        cairn_objset::StoreConfig (read-ahead window on rotating disks)
//!    io_threads           cairn_vdev::threads::set_io_threads
//!    fuse_threads         cairn_fuse::set_default_threads (threads per mount)
//!    cache_max            cairn_pool::io::cache::set_default_capacity (0 = off)
//!    parity_kernel        cairn_parity::set_default_kernel (auto = best for this CPU)
//!    malloc_arenas        glibc mallopt(M_ARENA_MAX), here in the binary (0 = glibc's own)
//!    resilver_rate        resilvers nobody started by hand (0 = unlimited)
//!    scrub_rate           bytes/s a scrub examines unless `scrub --rate` says (0 = unlimited)
//!    scrub_latency_budget foreground read p99 a scrub keeps to (0 = none)
//!    resilver_latency_budget  the same for resilvers nobody started by hand
//! ```
//!
//! `cairn tunables [--json]` prints every value in force and where it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cairn_objset::config::{
    default_dirty_max, DEFAULT_BACKGROUND_BATCH, DEFAULT_BACKGROUND_WRITERS,
    MAX_BACKGROUND_WRITERS, MIN_BACKGROUND_BATCH, MIN_DIRTY_MAX,
};
use cairn_objset::dataset::parse_size;
use cairn_objset::StoreConfig;
use serde::Serialize;

/// How a tunable's text becomes a value.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Bytes, with K/M/G/T suffixes; at least `min`.
    Size { min: u64 },
    /// A count in `min..=max`.
    Count { min: u64, max: u64 },
    /// A parity kernel name or `auto`.
    Kernel,
    /// A duration (`5ms`, `500us`, `0.2s`; a bare number is milliseconds; 0 = none),
    /// kept in microseconds.
    Duration,
}

/// One tunable: its name (also `CAIRN_<NAME>` upper-cased), kind, default and meaning.
struct Spec {
    name: &'static str,
    kind: Kind,
    default: fn() -> String,
    doc: &'static str,
}

const SPECS: &[Spec] = &[
    Spec {
        name: "dirty_max",
        kind: Kind::Size { min: MIN_DIRTY_MAX },
        default: || default_dirty_max().to_string(),
        doc: "dirty data that forces a txg sync (default 1/8 of RAM, at most 4 GiB)",
    },
    Spec {
        name: "background_batch",
        kind: Kind::Size {
            min: MIN_BACKGROUND_BATCH,
        },
        default: || DEFAULT_BACKGROUND_BATCH.to_string(),
        doc: "dirty bytes a background writer compresses, checksums and writes at a time",
    },
    Spec {
        name: "background_writers",
        kind: Kind::Count {
            min: 1,
            max: MAX_BACKGROUND_WRITERS as u64,
        },
        default: || DEFAULT_BACKGROUND_WRITERS.to_string(),
        doc: "background writer threads, each with a batch in flight",
    },
    Spec {
        name: "io_threads",
        kind: Kind::Count { min: 1, max: 1024 },
        default: || cairn_vdev::threads::DEFAULT_IO_THREADS.to_string(),
        doc: "kept threads for leaf I/O and split checksum/parity work",
    },
    Spec {
        name: "fuse_threads",
        kind: Kind::Count { min: 1, max: 256 },
        default: || cairn_fuse::DEFAULT_THREADS.to_string(),
        doc: "threads serving each mount's kernel requests (more: reads wait for disks side by side)",
    },
    Spec {
        name: "readahead_max",
        kind: Kind::Size { min: 0 },
        default: || cairn_objset::config::DEFAULT_READAHEAD_MAX.to_string(),
        doc: "largest sequential read-ahead window on pools with a rotating disk (0 = off)",
    },
    Spec {
        name: "cache_max",
        kind: Kind::Size { min: 0 },
        default: || cairn_pool::io::cache::default_max_bytes().to_string(),
        doc: "block cache capacity (default 1/16 of RAM, at most 1 GiB; 0 = off)",
    },
    Spec {
        name: "parity_kernel",
        kind: Kind::Kernel,
        default: || "auto".to_string(),
        doc: "RAID-Z parity kernel: auto, scalar, ssse3, avx2, avx2-gfni, avx512-gfni",
    },
    Spec {
        name: "malloc_arenas",
        kind: Kind::Count { min: 0, max: 1024 },
        default: || "1".to_string(),
        doc: "malloc arenas (1: block buffers freed by one thread are reused by the next; 0 = glibc's 8 per core)",
    },
    Spec {
        name: "resilver_rate",
        kind: Kind::Size { min: 0 },
        default: || "0".to_string(),
        doc: "bytes/s of resilvers nobody started by hand (0 = unlimited)",
    },
    Spec {
        name: "scrub_latency_budget",
        kind: Kind::Duration,
        default: || "0".to_string(),
        doc: "p99 of foreground reads a scrub keeps to, e.g. 5ms, unless `scrub --latency-budget` says (0 = none)",
    },
    Spec {
        name: "resilver_latency_budget",
        kind: Kind::Duration,
        default: || "0".to_string(),
        doc: "p99 of foreground reads resilvers nobody started by hand keep to (0 = none)",
    },
    Spec {
        name: "scrub_rate",
        kind: Kind::Size { min: 0 },
        default: || "0".to_string(),
        doc: "bytes/s a scrub examines unless `scrub --rate` says (0 = unlimited)",
    },
];

/// Caps glibc's malloc arenas (0: leaves glibc's default). With threads spread over several
/// arenas, a block buffer went back to the arena of the thread that allocated it, and the
/// thread reading the next block grew its own arena with fresh pages: two page faults
/// and a page clearing per cold 4 KiB read through NBD (docs/bench/small-io.md, section
/// *One malloc arena*). Called before the binary starts any thread.
fn set_malloc_arenas(arenas: u64) {
    if arenas > 0 {
        // SAFETY: mallopt only adjusts the glibc allocator's limits.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas as libc::c_int);
        }
    }
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "where")]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(var) => write!(f, "environment {var}"),
            Source::Flag => f.write_str("--tunable"),
        }
    }
}

/// A tunable's value in force.
#[derive(Clone, Debug, Serialize)]
pub struct Value {
    pub name: &'static str,
    /// Bytes or a count, where the tunable is a number.
    pub number: Option<u64>,
    pub text: String,
    pub source: Source,
    #[serde(skip)]
    doc: &'static str,
}

/// Every tunable's value in force.
#[derive(Clone, Debug)]
pub struct Tunables {
    values: Vec<Value>,
}

/// The sources a `Tunables` is read from (the binary's flags, environment and state dir).
pub struct Sources<'a> {
    pub flags: &'a [String],
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub file: Option<PathBuf>,
}

impl Tunables {
    /// Reads every tunable from `sources`; any bad name or value is an error that says
    /// which source held it.
    pub fn read(sources: &Sources) -> Result<Tunables, String> {
        let flags = parse_assignments(sources.flags.iter().map(String::as_str), "--tunable")?;
        let file = match &sources.file {
            Some(path) => read_file(path)?,
            None => BTreeMap::new(),
        };
        let values = SPECS
            .iter()
            .map(|spec| {
                let env_var = format!("CAIRN_{}", spec.name.to_uppercase());
                let (text, source) = if let Some(v) = flags.get(spec.name) {
                    (v.clone(), Source::Flag)
                } else if let Some(v) = (sources.env)(&env_var).filter(|v| !v.is_empty()) {
                    (v, Source::Env(env_var))
                } else if let Some(v) = file.get(spec.name) {
                    (
                        v.clone(),
                        Source::File(sources.file.clone().unwrap_or_default()),
                    )
                } else {
                    ((spec.default)(), Source::Default)
                };
                let number = parse_value(spec, &text)
                    .map_err(|why| format!("tunable {} = '{text}' ({source}): {why}", spec.name))?;
                Ok(Value {
                    name: spec.name,
                    number,
                    text,
                    source,
                    doc: spec.doc,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Tunables { values })
    }

    fn number(&self, name: &str) -> u64 {
        self.values
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.number)
            .unwrap_or_else(|| unreachable!("{name} is a numeric tunable"))
    }

    fn text(&self, name: &str) -> &str {
        let value = self.values.iter().find(|v| v.name == name);
        value.map(|v| v.text.as_str()).unwrap_or("")
    }

    /// The object store's part.
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            dirty_max: self.number("dirty_max"),
            background_batch: self.number("background_batch"),
            background_writers: self.number("background_writers") as usize,
            readahead_max: self.number("readahead_max"),
            ..StoreConfig::builtin()
        }
    }

    /// Bytes per second for resilvers nobody started by hand; `None` = unlimited.
    pub fn resilver_rate(&self) -> Option<u64> {
        Some(self.number("resilver_rate")).filter(|&r| r > 0)
    }

    pub fn scrub_rate(&self) -> Option<u64> {
        Some(self.number("scrub_rate")).filter(|&r| r > 0)
    }

    pub fn scrub_latency_budget(&self) -> Option<std::time::Duration> {
        Some(self.number("scrub_latency_budget"))
            .filter(|&us| us > 0)
            .map(std::time::Duration::from_micros)
    }

    pub fn resilver_latency_budget(&self) -> Option<std::time::Duration> {
        Some(self.number("resilver_latency_budget"))
            .filter(|&us| us > 0)
            .map(std::time::Duration::from_micros)
    }

    /// Hands each layer its part (before any pool is opened).
    pub fn apply(&self) -> Result<(), String> {
        set_malloc_arenas(self.number("malloc_arenas"));
        StoreConfig::set_default(self.store_config());
        cairn_vdev::threads::set_io_threads(self.number("io_threads") as usize);
        cairn_fuse::set_default_threads(self.number("fuse_threads") as usize);
        cairn_pool::io::cache::set_default_capacity(self.number("cache_max"));
        cairn_parity::set_default_kernel(self.text("parity_kernel"))
            .map(|_| ())
            .map_err(|e| format!("tunable parity_kernel: {e}"))
    }

    /// `cairn tunables`: NAME VALUE SOURCE, and what each does.
    pub fn render(&self, json: bool) -> String {
        if json {
            return serde_json::to_string_pretty(&serde_json::json!({ "tunables": self.values }))
                .unwrap_or_default()
                + "\n";
        }
        let mut out = format!(
            "{:<20} {:>14}  {:<34} {}\n",
            "NAME", "VALUE", "SOURCE", "WHAT"
        );
        for v in &self.values {
            let shown = match v.number {
                Some(n) if n >= 1 << 20 => human(n),
                _ => v.text.clone(),
            };
            let source = v.source.to_string();
            out += &format!("{:<20} {:>14}  {:<34} {}\n", v.name, shown, source, v.doc);
        }
        out
    }
}

/// `5ms`, `500us`, `0.2s` (a bare number is milliseconds), above 0 and at most an hour.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic() || c == 'µ') {
        Some(i) => t.split_at(i),
        None => (t, "ms"),
    };
    let n: f64 = number.trim().parse().ok()?;
    let secs = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        _ => return None,
    };
    (secs.is_finite() && secs > 0.0 && secs <= 3600.0)
        .then(|| std::time::Duration::from_secs_f64(secs))
}

fn human(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Checks a value's text; the number it stands for, if the tunable is numeric.
fn parse_value(spec: &Spec, text: &str) -> Result<Option<u64>, String> {
    match spec.kind {
        Kind::Size { min } => {
            let n = parse_size(text).ok_or("not a size: give bytes or e.g. 512K, 64M, 2G")?;
            if n < min {
                return Err(format!("at least {min} bytes"));
            }
            Ok(Some(n))
        }
        Kind::Count { min, max } => {
            let n: u64 = text.parse().map_err(|_| "not a whole number")?;
            if !(min..=max).contains(&n) {
                return Err(format!("must be {min} to {max}"));
            }
            Ok(Some(n))
        }
        Kind::Duration if text.trim() == "0" => Ok(Some(0)),
        Kind::Duration => parse_duration(text)
            .map(|d| Some(d.as_micros() as u64))
            .ok_or_else(|| "not a duration: give e.g. 5ms, 500us, 0.2s (0 = none)".to_string()),
        Kind::Kernel => {
            let known = text == "auto" || cairn_parity::Kernel::from_name(text).is_some();
            if !known {
                return Err(
                    "unknown kernel: auto, scalar, ssse3, avx2, avx2-gfni or avx512-gfni".into(),
                );
            }
            Ok(None)
        }
    }
}

/// `NAME=VALUE` (or `NAME = VALUE`) assignments; unknown names are errors.
fn parse_assignments<'a>(
    lines: impl Iterator<Item = &'a str>,
    from: &str,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for line in lines {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| format!("{from}: '{line}' is not NAME=VALUE"))?;
        let name = name.trim();
        if !SPECS.iter().any(|s| s.name == name) {
            let names: Vec<&str> = SPECS.iter().map(|s| s.name).collect();
            return Err(format!(
                "{from}: unknown tunable '{name}'; known: {}",
                names.join(", ")
            ));
        }
        out.insert(name.to_string(), value.trim().to_string());
    }
    Ok(out)
}

fn read_file(path: &Path) -> Result<BTreeMap<String, String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_assignments(text.lines(), &path.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

static IN_FORCE: OnceLock<Tunables> = OnceLock::new();

/// Reads the tunables from this process's flags, environment and `$CAIRN_HOME`, hands
/// each layer its part, and keeps them for `get`.
pub fn init(flags: &[String]) -> Result<&'static Tunables, String> {
    let home = crate::home();
    let env = |var: &str| std::env::var(var).ok();
    let tunables = Tunables::read(&Sources {
        flags,
        env: &env,
        file: Some(home.root().join("tunables.conf")),
    })?;
    tunables.apply()?;
    Ok(IN_FORCE.get_or_init(|| tunables))
}

/// The tunables in force (`init` ran first in `main`).
pub fn get() -> &'static Tunables {
    IN_FORCE.get().expect("tunables::init runs first in main")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(flags: &[&str], env: &[(&str, &str)], file: Option<&str>) -> Result<Tunables, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tunables.conf");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
        }
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let env_map: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = |var: &str| env_map.get(var).cloned();
        Tunables::read(&Sources {
            flags: &flags,
            env: &lookup,
            file: Some(path),
        })
    }

    fn source_of(t: &Tunables, name: &str) -> Source {
        t.values
            .iter()
            .find(|v| v.name == name)
            .unwrap()
            .source
            .clone()
    }

    #[test]
    fn flag_beats_environment_beats_file_beats_default() {
        let t = read(
            &["dirty_max=64M"],
            &[("CAIRN_DIRTY_MAX", "32M"), ("CAIRN_IO_THREADS", "4")],
            Some("dirty_max = 16M\nio_threads = 8\ncache_max = 0 # off\n"),
        )
        .unwrap();
        assert_eq!(t.number("dirty_max"), 64 << 20);
        assert_eq!(source_of(&t, "dirty_max"), Source::Flag);
        assert_eq!(t.number("io_threads"), 4);
        assert_eq!(
            source_of(&t, "io_threads"),
            Source::Env("CAIRN_IO_THREADS".into())
        );
        assert_eq!(t.number("cache_max"), 0);
        assert!(matches!(source_of(&t, "cache_max"), Source::File(_)));
        assert_eq!(t.number("background_writers"), 2);
        assert_eq!(source_of(&t, "background_writers"), Source::Default);
        assert_eq!(t.store_config().dirty_max, 64 << 20);
        assert_eq!(t.resilver_rate(), None);
    }

    #[test]
    fn bad_names_and_values_say_where_they_came_from() {
        let e = read(&["dirty_maxx=1G"], &[], None).unwrap_err();
        assert!(e.contains("unknown tunable 'dirty_maxx'"), "{e}");
        let e = read(&[], &[("CAIRN_BACKGROUND_WRITERS", "0")], None).unwrap_err();
        assert!(
            e.contains("environment CAIRN_BACKGROUND_WRITERS") && e.contains("1 to 16"),
            "{e}"
        );
        let e = read(&[], &[], Some("parity_kernel = fast\n")).unwrap_err();
        assert!(
            e.contains("unknown kernel") && e.contains("tunables.conf"),
            "{e}"
        );
        let e = read(&["dirty_max=12"], &[], None).unwrap_err();
        assert!(e.contains("at least"), "{e}");
        let e = read(&[], &[], Some("just words\n")).unwrap_err();
        assert!(e.contains("not NAME=VALUE"), "{e}");
    }

    #[test]
    fn render_names_every_tunable_once() {
        let t = read(&["resilver_rate=100M"], &[], None).unwrap();
        let text = t.render(false);
        for spec in SPECS {
            assert_eq!(
                text.matches(&format!("\n{} ", spec.name)).count(),
                1,
                "{text}"
            );
        }
        assert!(
            text.contains("100M") && text.contains("--tunable"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&t.render(true)).unwrap();
        assert_eq!(json["tunables"].as_array().unwrap().len(), SPECS.len());
        assert_eq!(t.resilver_rate(), Some(100 << 20));
    }

    #[test]
    fn fuse_threads_is_a_count_from_one() {
        let t = read(&[], &[("CAIRN_FUSE_THREADS", "16")], None).unwrap();
        assert_eq!(t.number("fuse_threads"), 16);
        assert_eq!(
            read(&[], &[], None).unwrap().number("fuse_threads"),
            cairn_fuse::DEFAULT_THREADS as u64
        );
        let e = read(&["fuse_threads=0"], &[], None).unwrap_err();
        assert!(e.contains("1 to 256"), "{e}");
    }

    #[test]
    fn malloc_arenas_defaults_to_one_and_zero_leaves_glibc_alone() {
        assert_eq!(read(&[], &[], None).unwrap().number("malloc_arenas"), 1);
        let t = read(&[], &[("CAIRN_MALLOC_ARENAS", "0")], None).unwrap();
        assert_eq!(t.number("malloc_arenas"), 0);
        let e = read(&["malloc_arenas=2000"], &[], None).unwrap_err();
        assert!(e.contains("0 to 1024"), "{e}");
    }

    #[test]
    fn durations_parse_with_their_units() {
        use std::time::Duration;
        assert_eq!(parse_duration("5ms"), Some(Duration::from_millis(5)));
        assert_eq!(parse_duration("5"), Some(Duration::from_millis(5)));
        assert_eq!(parse_duration("500us"), Some(Duration::from_micros(500)));
        assert_eq!(parse_duration("0.2s"), Some(Duration::from_millis(200)));
        for bad in ["", "fast", "5 parsecs", "-1ms", "0", "1e9s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        let spec = SPECS
            .iter()
            .find(|s| s.name == "scrub_latency_budget")
            .unwrap();
        assert_eq!(parse_value(spec, "5ms"), Ok(Some(5000)));
        assert_eq!(parse_value(spec, "0"), Ok(Some(0)));
        assert!(parse_value(spec, "soon").is_err());
    }
}
