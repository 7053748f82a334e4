//! `cairn plan`: capacity, reliability, speed and rebuild time of every layout.
//! (skeleton; the planner issue fills it in)

/// Command-line arguments of `cairn plan`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Disks, e.g. `24x4TB` (repeatable).
    #[arg(long = "disks")]
    pub disks: Vec<String>,
}

/// Errors of the planner.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Usage(String),
}

/// Runs `cairn plan`, printing to stdout.
pub fn run(_args: &PlanArgs) -> Result<(), PlanError> {
    Err(PlanError::Usage("cairn plan is not implemented yet".into()))
}
