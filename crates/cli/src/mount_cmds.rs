//! `cairn mount` / `cairn umount`: file systems over FUSE (crates/fuse).
//!
//! A mount is served by a `cairn serve POOL --mount DS[=DIR] --until-unmounted` process
//! that owns the pool: `cairn mount` starts it in the background, waits until the kernel
//! shows the mount, and returns (as `zfs mount` does). Unmounting ends the session; the
//! serving process then syncs, exports and exits, and `cairn umount` waits for that, so
//! the pool is free when it returns.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::data_cmds::pool_of;

#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// Mount options: `ro` (read-only).
    #[arg(short = 'o', value_name = "OPTS")]
    options: Vec<String>,
    /// Serve the mount from this process until it is unmounted (default: a background
    /// process serves it).
    #[arg(long)]
    foreground: bool,
    /// The file system to mount, POOL/DS; none: list what is mounted.
    dataset: Option<String>,
    /// Where to mount (default: the dataset's `mountpoint` property).
    dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// Force: detach the mount even if it is busy (lazy unmount), or clean up the stale
    /// mount of a serving process that died.
    #[arg(short = 'f')]
    force: bool,
    /// A mount point, or POOL/DS.
    target: String,
}

/// The cairn mounts the kernel knows: (source POOL/DS, mount point). A cairn mount is a
/// FUSE mount whose source names a dataset of a pool known here (fuser mounts as type
/// `fuse` with the dataset as its source, as `df` shows it).
pub fn cairn_mounts() -> Vec<(String, PathBuf)> {
    let pools = crate::home().root().join("pools");
    let known = |source: &str| pools.join(format!("{}.json", pool_of(source))).exists();
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPER"
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split(' ');
            let (fstype, source) = (r.next()?, r.next()?);
            let source = unescape(source);
            if !matches!(fstype, "fuse" | "fuse.cairn") || !known(&source) {
                return None;
            }
            let dir = left.split(' ').nth(4)?;
            Some((source, PathBuf::from(unescape(dir))))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn mount(a: MountArgs) -> Result<(), String> {
    let Some(dataset) = a.dataset else {
        for (source, dir) in cairn_mounts() {
            println!("{source:<24} {}", dir.display());
        }
        return Ok(());
    };
    if let Some((_, dir)) = cairn_mounts().into_iter().find(|(s, _)| *s == dataset) {
        return Err(format!(
            "'{dataset}' is already mounted at {}; one mount per dataset (`cairn umount {dataset}` first)",
            dir.display()
        ));
    }
    let read_only = a
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .map(|o| match o {
            "ro" => Ok(true),
            "rw" => Ok(false),
            other => Err(format!("unknown mount option '{other}'; known: ro, rw")),
        })
        .try_fold(false, |ro, o| o.map(|o| ro || o))?;
    let mut spec = dataset.clone();
    if let Some(dir) = &a.dir {
        spec = format!("{spec}={}", absolute(dir)?.display());
    }
    if read_only {
        spec.push_str(":ro");
    }
    let pool = pool_of(&dataset).to_string();
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the cairn binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--mount", &spec, "--until-unmounted", &pool]);
    if a.foreground {
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run cairn serve: {e}"))?;
        return if status.success() {
            Ok(())
        } else {
            Err(format!("serving '{dataset}' ended with {status}"))
        };
    }
    let log = crate::home()
        .root()
        .join("log")
        .join(format!("mount-{pool}.log"));
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err_out = out.try_clone().map_err(|e| e.to_string())?;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err_out)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the serving process: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some((_, dir)) = cairn_mounts().into_iter().find(|(s, _)| *s == dataset) {
            println!(
                "mounted '{dataset}' at {} (served by PID {})",
                dir.display(),
                child.id()
            );
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!(
                "could not mount '{dataset}' ({status}): {}",
                text.trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "'{dataset}' did not appear as mounted within 60 s; see {}",
        log.display()
    ))
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))
}

pub fn umount(a: UmountArgs) -> Result<(), String> {
    let mounts = cairn_mounts();
    let target_dir = absolute(Path::new(&a.target)).ok();
    let Some((source, dir)) = mounts
        .into_iter()
        .find(|(s, d)| *s == a.target || Some(d) == target_dir.as_ref())
    else {
        return Err(format!(
            "'{}' is not a mounted cairn file system (`cairn mount` lists them)",
            a.target
        ));
    };
    let c =
        std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let flags = if a.force { libc::MNT_DETACH } else { 0 };
    // SAFETY: umount2 with a NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        let e = std::io::Error::last_os_error();
        let advice = if e.raw_os_error() == Some(libc::EBUSY) {
            " (in use: close what uses it, or `cairn umount -f` to detach it)"
        } else {
            ""
        };
        return Err(format!("cannot unmount {}: {e}{advice}", dir.display()));
    }
    wait_for_server_exit(pool_of(&source));
    Ok(())
}

/// Waits (up to a minute) for a process that served only mounts of `pool` to let go of the
/// pool once its last mount is gone.
fn wait_for_server_exit(pool: &str) {
    if cairn_mounts().iter().any(|(s, _)| pool_of(s) == pool) {
        return; // other datasets of the pool are still served
    }
    let home = crate::home();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = match crate::control::ask(&home, pool, "mode") {
        Some(m) => match m.trim().strip_prefix("until-unmounted ") {
            Some(pid) => pid.parse::<i32>().unwrap_or(0),
            None => return, // a long-running service keeps the pool
        },
        None => return,
    };
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "cairn: the process serving '{pool}' is still finishing; it exports the pool when done"
    );
}

/// Whether process `pid` runs (a zombie no longer holds anything).
fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}
