//! The process-wide kernel choice (own test binary: the choice is made once per process).

use cairn_parity::{default_parity, set_default_kernel, Kernel, ParityError, RaidzParity};

#[test]
fn a_chosen_kernel_is_used_and_bad_names_are_refused() {
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::best());
    assert!(matches!(
        set_default_kernel("bogus"),
        Err(ParityError::UnknownKernel(_))
    ));
    assert!(matches!(
        set_default_kernel("neon"),
        Err(ParityError::KernelUnsupported(Kernel::Neon))
    ));
    assert_eq!(set_default_kernel("scalar").unwrap(), Kernel::Scalar);
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::Scalar);
    assert_eq!(default_parity().kernel(), Kernel::Scalar);
    // The first choice stands for the life of the process.
    set_default_kernel("auto").unwrap();
    assert_eq!(RaidzParity::new().unwrap().kernel(), Kernel::Scalar);
}
