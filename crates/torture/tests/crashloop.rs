//! A short crash loop: the writer is a real child process, killed with SIGKILL.

use std::path::PathBuf;

use cairn_torture::crashloop::{print_report, run, CrashLoopArgs, WriterCommand};

#[test]
fn kill_nine_never_loses_an_acknowledged_write() {
    let base = tempfile::tempdir().unwrap();
    let args = CrashLoopArgs {
        iterations: 20,
        seed: None,
        layout: "raidz1".into(),
        width: 4,
        max_kill_ms: 400,
        dir: Some(base.path().to_path_buf()),
        keep: false,
        json: false,
        json_out: None,
    };
    let writer = WriterCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_cairn-crash-writer")),
        args: Vec::new(),
    };
    let report = run(&args, &writer).unwrap();
    print_report(&report, false);
    assert_eq!(report.iterations, 20);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(
        report.records > 0,
        "the writers never got a txg synced: {report:?}"
    );
}
