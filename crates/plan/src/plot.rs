//! placeholder
use crate::evaluate::{Evaluation, PlanContext};
use crate::PlanError;
pub fn write_plot(
    _path: &std::path::Path,
    _c: &PlanContext,
    _r: &[Evaluation],
) -> Result<(), PlanError> {
    Ok(())
}
