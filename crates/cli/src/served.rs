//! Commands run inside the process that serves their pool (`cairn serve`).
//!
//! A client whose pool is held by a service sends its command line over the control socket
//! (`exec`, see `crate::control`) together with its standard input, output and error (passed
//! as file descriptors, SCM_RIGHTS) and its working directory. The service parses the same
//! command line and runs the same code on the thread that answers, with this module's
//! context set: `data_cmds::open` then hands out the served store instead of opening the
//! pool, and the `outln!`/`out!`/`errln!` macros write to the client's descriptors. The
//! client exits with the code the service sends back, so output and exit codes are the
//! ones the command has when it runs in-process.

use std::cell::RefCell;
use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use cairn_objset::Store;

/// What a command running for a client of the control socket uses instead of the process's
/// own pool handle and standard streams.
pub struct Ctx {
    pub pool: String,
    pub store: Arc<Store>,
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
    /// (dataset, directory) of the file systems the service has mounted.
    pub mounted: Vec<(String, std::path::PathBuf)>,
    /// The service's mounts (a rollback unmounts and mounts again around itself).
    pub mounts: Arc<dyn ServiceMounts>,
}

/// What a served command may ask of the service's mounts (`crate::mount_table` implements
/// it; a trait so that this module does not depend on the mount table, which depends on
/// the commands).
pub trait ServiceMounts: Send + Sync {
    /// Runs `change` with `dataset` unmounted when the service has it mounted, then mounts
    /// it again where it was.
    fn with_unmounted(
        &self,
        dataset: &str,
        change: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<(), String>;
}

thread_local! {
    static CTX: RefCell<Option<Ctx>> = const { RefCell::new(None) };
}

/// The payload a served command unwinds with when its client's standard output is closed
/// (`cairn cat … | head`): the client then ends as an in-process command would, by SIGPIPE.
pub struct ClosedOutput;

/// Runs `f` with `ctx` as this thread's context; returns it afterwards.
pub fn with_ctx<R>(ctx: Ctx, f: impl FnOnce() -> R) -> R {
    CTX.with(|c| *c.borrow_mut() = Some(ctx));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CTX.with(|c| *c.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    f()
}

/// Whether this thread runs a command for a client of the control socket.
pub fn active() -> bool {
    CTX.with(|c| c.borrow().is_some())
}

/// The served store when this thread runs a command for a client: `Ok(None)` when it does
/// not (the command opens the pool itself), an error when the command names another pool.
pub fn store_for(pool: &str) -> Result<Option<Arc<Store>>, String> {
    CTX.with(|c| match c.borrow().as_ref() {
        None => Ok(None),
        Some(ctx) if ctx.pool == pool => Ok(Some(ctx.store.clone())),
        Some(ctx) => Err(format!(
            "pool '{pool}' is not the one this service holds ('{}'); run one command per pool",
            ctx.pool
        )),
    })
}

/// The mounts of the service this thread runs a command for, if it does.
pub fn mounts() -> Option<Arc<dyn ServiceMounts>> {
    CTX.with(|c| c.borrow().as_ref().map(|ctx| ctx.mounts.clone()))
}

fn write_to(which: fn(&Ctx) -> &File, args: std::fmt::Arguments, stderr: bool) {
    let done = CTX.with(|c| {
        c.borrow()
            .as_ref()
            .map(|ctx| which(ctx).write_fmt(args).map_err(|e| e.kind()))
    });
    match done {
        None if stderr => eprint!("{args}"),
        None => print!("{args}"),
        Some(Ok(())) => {}
        Some(Err(std::io::ErrorKind::BrokenPipe)) if !stderr => {
            std::panic::resume_unwind(Box::new(ClosedOutput))
        }
        Some(Err(_)) => {} // the client is gone; its command ends at its next check
    }
}

/// `print!` to the client's standard output (or this process's).
pub fn out(args: std::fmt::Arguments) {
    write_to(|c| &c.stdout, args, false)
}

/// `eprint!` to the client's standard error (or this process's).
pub fn err(args: std::fmt::Arguments) {
    write_to(|c| &c.stderr, args, true)
}

/// Standard output as a writer (for file data: `cat`, `get … -`).
pub fn stdout() -> Box<dyn Write> {
    CTX.with(
        |c| match c.borrow().as_ref().map(|ctx| ctx.stdout.try_clone()) {
            Some(Ok(f)) => Box::new(f) as Box<dyn Write>,
            _ => Box::new(std::io::stdout().lock()),
        },
    )
}

/// Standard input as a reader (`put -`).
pub fn stdin() -> Box<dyn Read> {
    CTX.with(
        |c| match c.borrow().as_ref().map(|ctx| ctx.stdin.try_clone()) {
            Some(Ok(f)) => Box::new(f) as Box<dyn Read>,
            _ => Box::new(std::io::stdin().lock()),
        },
    )
}

/// Whether progress bars may be drawn: on this process's terminal only (a served command
/// draws none).
pub fn stderr_is_terminal() -> bool {
    !active() && std::io::stderr().is_terminal()
}

/// Refuses a served command that would change the files of `target` (`POOL/DS[/PATH]`, or
/// with `with_children` a dataset and everything under it) while the service has it
/// mounted: the kernel caches names, attributes and pages of a mount and would not see the
/// change. Changes go through the mount instead.
pub fn check_not_mounted(target: &str, with_children: bool) -> Result<(), String> {
    let target = target.trim_end_matches('/');
    CTX.with(|c| {
        let c = c.borrow();
        let Some(ctx) = c.as_ref() else { return Ok(()) };
        let under = |outer: &str, inner: &str| {
            inner == outer || inner.strip_prefix(outer).is_some_and(|r| r.starts_with('/'))
        };
        for (ds, dir) in &ctx.mounted {
            if under(ds, target) || (with_children && under(target, ds)) {
                return Err(format!(
                    "'{ds}' is in use: mounted at {} by this service (PID {}); change its files through the mount, or unmount it first (`cairn umount {}`)",
                    dir.display(),
                    std::process::id(),
                    dir.display()
                ));
            }
        }
        Ok(())
    })
}
