//! ISA-L (Intel Intelligent Storage Acceleration Library) as a peer, loaded at run time with
//! `dlopen` so building cairn never needs it. ISA-L's field is also GF(2^8)/0x11d, so given
//! the RAID-Z coefficient matrix it computes byte-identical P, Q, R and reconstructions
//! (checked by the bench on every hot run).

use libloading::Library;
use std::ffi::{c_int, c_void};

type XorGenFn = unsafe extern "C" fn(c_int, c_int, *mut *mut c_void) -> c_int;
type PqGenFn = unsafe extern "C" fn(c_int, c_int, *mut *mut c_void) -> c_int;
type EcInitTablesFn = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut u8);
type EcEncodeDataFn =
    unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut *mut u8, *mut *mut u8);

/// Most columns a call passes (data + parity); the bench's shapes stay far below.
pub const MAX_VECTORS: usize = 32;

/// Entry points of a loaded `libisal.so`.
pub struct Isal {
    path: &'static str,
    xor_gen: XorGenFn,
    pq_gen: PqGenFn,
    ec_init_tables: EcInitTablesFn,
    ec_encode_data: EcEncodeDataFn,
    /// Keeps the library mapped while the function pointers above are in use.
    _library: Library,
}

/// `ec_encode_data`'s expanded tables for one coefficient matrix (32 bytes per coefficient).
pub struct EcTables {
    inputs: usize,
    outputs: usize,
    tables: Vec<u8>,
}

impl EcTables {
    /// Number of output columns the tables compute.
    pub fn outputs(&self) -> usize {
        self.outputs
    }
}

impl Isal {
    /// Loads ISA-L from the usual sonames; `Err` says why it is unavailable.
    pub fn load() -> Result<Isal, String> {
        let mut last_error = String::new();
        for path in ["libisal.so.2", "libisal.so"] {
            // SAFETY: loading ISA-L runs no initialisers with preconditions on our side.
            match unsafe { Library::new(path) } {
                Ok(library) => return Self::bind(library, path).map_err(|e| e.to_string()),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(last_error)
    }

    fn bind(library: Library, path: &'static str) -> Result<Isal, libloading::Error> {
        // SAFETY: the symbol types match the prototypes in isa-l/raid.h and erasure_code.h.
        unsafe {
            Ok(Isal {
                path,
                xor_gen: *library.get::<XorGenFn>(b"xor_gen\0")?,
                pq_gen: *library.get::<PqGenFn>(b"pq_gen\0")?,
                ec_init_tables: *library.get::<EcInitTablesFn>(b"ec_init_tables\0")?,
                ec_encode_data: *library.get::<EcEncodeDataFn>(b"ec_encode_data\0")?,
                _library: library,
            })
        }
    }

    pub fn path(&self) -> &'static str {
        self.path
    }

    /// `xor_gen`: `cols[last] = ⊕ cols[..last]`. Lengths must be equal, multiple of 32.
    pub fn xor_gen(&self, cols: &mut [&mut [u8]]) {
        let mut ptrs = pointer_array(cols);
        let len = equal_len(cols);
        // SAFETY: every pointer addresses `len` valid bytes (checked by `equal_len`).
        let rc =
            unsafe { (self.xor_gen)(cols.len() as c_int, len as c_int, ptrs.as_mut_ptr().cast()) };
        assert_eq!(rc, 0, "xor_gen refused the call");
    }

    /// `pq_gen`: the last two columns get P and Linux-RAID-6 Q (`Σ 2^i·D_i`, so pass the data
    /// in reverse RAID-Z order to get RAID-Z's Q). Len multiple of 64, 32-byte aligned.
    pub fn pq_gen(&self, cols: &mut [&mut [u8]]) {
        let mut ptrs = pointer_array(cols);
        let len = equal_len(cols);
        assert!(
            cols.iter()
                .all(|c| (c.as_ptr() as usize).is_multiple_of(32))
                && len.is_multiple_of(64)
        );
        // SAFETY: every pointer addresses `len` valid, 32-byte aligned bytes.
        let rc =
            unsafe { (self.pq_gen)(cols.len() as c_int, len as c_int, ptrs.as_mut_ptr().cast()) };
        assert_eq!(rc, 0, "pq_gen refused the call");
    }

    /// Expands a row-major `outputs × inputs` coefficient matrix.
    pub fn init_tables(&self, inputs: usize, matrix: &[Vec<u8>]) -> EcTables {
        let outputs = matrix.len();
        assert!(matrix.iter().all(|row| row.len() == inputs));
        let mut flat: Vec<u8> = matrix.concat();
        let mut tables = vec![0u8; 32 * inputs * outputs];
        // SAFETY: `flat` holds outputs·inputs coefficients, `tables` 32 bytes for each.
        unsafe {
            (self.ec_init_tables)(
                inputs as c_int,
                outputs as c_int,
                flat.as_mut_ptr(),
                tables.as_mut_ptr(),
            )
        };
        EcTables {
            inputs,
            outputs,
            tables,
        }
    }

    /// `ec_encode_data`: `outputs[k] = Σ_i matrix[k][i]·inputs[i]`.
    pub fn ec_encode(
        &self,
        tables: &mut EcTables,
        inputs: &[&mut [u8]],
        outputs: &mut [&mut [u8]],
    ) {
        assert_eq!(
            (inputs.len(), outputs.len()),
            (tables.inputs, tables.outputs)
        );
        let len = outputs[0].len();
        assert!(inputs.iter().all(|c| c.len() == len) && outputs.iter().all(|c| c.len() == len));
        let mut in_ptrs = [std::ptr::null_mut::<u8>(); MAX_VECTORS];
        for (p, c) in in_ptrs.iter_mut().zip(inputs) {
            *p = c.as_ptr().cast_mut();
        }
        let mut out_ptrs = pointer_array(outputs);
        // SAFETY: all pointers address `len` valid bytes; ISA-L only reads the inputs.
        unsafe {
            (self.ec_encode_data)(
                len as c_int,
                tables.inputs as c_int,
                tables.outputs as c_int,
                tables.tables.as_mut_ptr(),
                in_ptrs.as_mut_ptr(),
                out_ptrs.as_mut_ptr(),
            )
        }
    }
}

fn pointer_array(cols: &mut [&mut [u8]]) -> [*mut u8; MAX_VECTORS] {
    assert!(cols.len() <= MAX_VECTORS);
    let mut ptrs = [std::ptr::null_mut(); MAX_VECTORS];
    for (p, c) in ptrs.iter_mut().zip(cols.iter_mut()) {
        *p = c.as_mut_ptr();
    }
    ptrs
}

fn equal_len(cols: &[&mut [u8]]) -> usize {
    let len = cols[0].len();
    assert!(cols.iter().all(|c| c.len() == len) && len <= c_int::MAX as usize);
    len
}
