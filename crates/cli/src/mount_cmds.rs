//! `cairn mount` / `cairn umount`: file systems over FUSE (crates/fuse).
//!
//! A mount is served by a `cairn serve POOL --mount DS[=DIR] --until-unmounted` process
//! that owns the pool: `cairn mount` starts it in the background, waits until the kernel
//! shows the mount, and returns (as `zfs mount` does). Unmounting ends the session; the
//! serving process then syncs, exports and exits, and `cairn umount` waits for that, so
//! the pool is free when it returns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::store_open::pool_of;

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

/// Where this home records the mounts its processes serve: one file per dataset
/// (`/` as `%`) holding the mount point. mountinfo alone cannot tell two homes' pools of
/// one name apart (fuser mounts as type `fuse` with the dataset as source, as `df` shows).
pub fn records_dir() -> PathBuf {
    crate::home().root().join("run").join("mounts")
}

fn record_path(dataset: &str) -> PathBuf {
    records_dir().join(dataset.replace('/', "%"))
}

/// Notes that this home serves `dataset` at `dir` (by `cairn serve --mount`).
pub fn record_mount(dataset: &str, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(records_dir())?;
    std::fs::write(record_path(dataset), dir.as_os_str().as_encoded_bytes())
}

pub fn forget_mount(dataset: &str) {
    let _ = std::fs::remove_file(record_path(dataset));
}

/// The cairn mounts of this home the kernel knows: (POOL/DS, mount point). A stale mount
/// (its serving process died) is still listed, so `umount -f` can clean it up.
pub fn cairn_mounts() -> Vec<(String, PathBuf)> {
    let recorded = |source: &str, dir: &Path| {
        std::fs::read(record_path(source)).is_ok_and(|d| d == dir.as_os_str().as_encoded_bytes())
    };
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPER"
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split(' ');
            let (fstype, source) = (r.next()?, unescape(r.next()?));
            let dir = PathBuf::from(unescape(left.split(' ').nth(4)?));
            (matches!(fstype, "fuse" | "fuse.cairn") && recorded(&source, &dir))
                .then_some((source, dir))
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

/// `cairn mount`: lists the mounts, or mounts a dataset — by the service holding its pool if
/// there is one, else by a `cairn serve` process (in the background unless `--foreground`).
pub fn mount(a: MountArgs) -> Result<(), String> {
    let Some(dataset) = a.dataset else {
        list_mounts();
        return Ok(());
    };
    if let Some((_, dir)) = cairn_mounts().into_iter().find(|(s, _)| *s == dataset) {
        return Err(format!(
            "'{dataset}' is already mounted at {}; one mount per dataset (`cairn umount {dataset}` first)",
            dir.display()
        ));
    }
    let spec = mount_spec(&dataset, a.dir.as_deref(), read_only(&a.options)?)?;
    let pool = pool_of(&dataset).to_string();
    // A service that holds the pool mounts it itself.
    if let Some(answer) = crate::control::ask(&crate::home(), &pool, &format!("mount {spec}")) {
        return service_answer(&answer);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the cairn binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--mount", &spec, "--until-unmounted", &pool]);
    if a.foreground {
        return serve_in_foreground(cmd, &dataset);
    }
    let log = crate::home()
        .root()
        .join("log")
        .join(format!("mount-{pool}.log"));
    let child = start_in_background(cmd, &log)?;
    wait_until_mounted(child, &dataset, &log)
}

/// `cairn mount` without a dataset: one line per mount, POOL/DS and mount point.
fn list_mounts() {
    for (source, dir) in cairn_mounts() {
        println!("{source:<24} {}", dir.display());
    }
}

/// Whether the `-o` options ask for a read-only mount: any `ro` does, whatever `rw` says.
fn read_only(options: &[String]) -> Result<bool, String> {
    options
        .iter()
        .flat_map(|o| o.split(','))
        .map(|o| match o {
            "ro" => Ok(true),
            "rw" => Ok(false),
            other => Err(format!("unknown mount option '{other}'; known: ro, rw")),
        })
        .try_fold(false, |ro, o| o.map(|o| ro || o))
}

/// The mount as `cairn serve --mount` takes it: `DS[=DIR][:ro]`.
fn mount_spec(dataset: &str, dir: Option<&Path>, read_only: bool) -> Result<String, String> {
    let mut spec = dataset.to_string();
    if let Some(dir) = dir {
        spec = format!("{spec}={}", absolute(dir)?.display());
    }
    if read_only {
        spec.push_str(":ro");
    }
    Ok(spec)
}

/// What the service that mounted the dataset answered: printed, or the error it names.
fn service_answer(answer: &str) -> Result<(), String> {
    let answer = answer.trim();
    match answer.strip_prefix("error: ") {
        Some(e) => Err(e.to_string()),
        None => {
            println!("{answer}");
            Ok(())
        }
    }
}

/// `--foreground`: runs the serving process and waits until it ends (at the unmount).
fn serve_in_foreground(mut cmd: Command, dataset: &str) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cairn serve: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("serving '{dataset}' ended with {status}"))
    }
}

/// Starts the serving process in a process group of its own, its output going to `log`.
fn start_in_background(mut cmd: Command, log: &Path) -> Result<Child, String> {
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err_out = out.try_clone().map_err(|e| e.to_string())?;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err_out)
        .process_group(0);
    cmd.spawn()
        .map_err(|e| format!("cannot start the serving process: {e}"))
}

/// Waits (up to 60 s) until the kernel shows `dataset` mounted, or the serving process
/// `child` ends first (then fails with what it logged).
fn wait_until_mounted(mut child: Child, dataset: &str, log: &Path) -> Result<(), String> {
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
            let text = std::fs::read_to_string(log).unwrap_or_default();
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
    // Asked before unmounting: the server stops answering as soon as its last mount is gone.
    let server = mounts_only_server(pool_of(&source));
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
    forget_mount(&source);
    if let Some(pid) = server {
        wait_for_server_exit(pool_of(&source), pid);
    }
    Ok(())
}

/// The PID of the process serving `pool` if it serves mounts only (and so exits with its
/// last mount), as its control socket says.
fn mounts_only_server(pool: &str) -> Option<i32> {
    let answer = crate::control::ask(&crate::home(), pool, "mode")?;
    answer.trim().strip_prefix("until-unmounted ")?.parse().ok()
}

/// Waits (up to a minute) for the process that served only mounts of `pool` to let go of
/// the pool once its last mount is gone.
fn wait_for_server_exit(pool: &str, pid: i32) {
    if cairn_mounts().iter().any(|(s, _)| pool_of(s) == pool) {
        return; // other datasets of the pool are still served
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if !process_alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
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
