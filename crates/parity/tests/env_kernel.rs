//! `CAIRN_PARITY_KERNEL` selection (own test binary: it sets process environment).

use cairn_parity::{Kernel, ParityError, RaidzParity, KERNEL_ENV_VAR};

#[test]
fn env_var_forces_or_rejects_a_kernel() {
    std::env::set_var(KERNEL_ENV_VAR, "scalar");
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::Scalar);
    std::env::set_var(KERNEL_ENV_VAR, "bogus");
    assert!(matches!(
        RaidzParity::new(),
        Err(ParityError::UnknownKernel(_))
    ));
    std::env::set_var(KERNEL_ENV_VAR, "neon");
    assert!(matches!(
        RaidzParity::new(),
        Err(ParityError::KernelUnsupported(Kernel::Neon))
    ));
    std::env::set_var(KERNEL_ENV_VAR, "auto");
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::best());
    std::env::remove_var(KERNEL_ENV_VAR);
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::best());
}
