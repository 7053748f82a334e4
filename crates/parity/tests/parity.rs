//! Kernels against the scalar reference, known answers, exhaustive erasure patterns and
//! error cases.

use cairn_parity::{reference, Kernel, ParityError, RaidzParity, MAX_COLUMNS};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

/// A row as owned columns: `nparity` zeroed parity columns, then data of the given lengths.
fn random_row(rng: &mut impl Rng, nparity: usize, data_lens: &[usize]) -> Vec<Vec<u8>> {
    let parity_len = data_lens[0];
    let mut cols = vec![vec![0u8; parity_len]; nparity];
    cols.extend(
        data_lens
            .iter()
            .map(|&len| (0..len).map(|_| rng.gen()).collect::<Vec<u8>>()),
    );
    cols
}

fn views(cols: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    cols.iter_mut().map(|c| c.as_mut_slice()).collect()
}

fn engines() -> Vec<RaidzParity> {
    Kernel::available()
        .into_iter()
        .map(|k| RaidzParity::with_kernel(k).unwrap())
        .collect()
}

/// Generates with `engine` and checks against the reference; returns the row.
fn check_generate(engine: &RaidzParity, nparity: usize, mut cols: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let data: Vec<&[u8]> = cols[nparity..].iter().map(|c| c.as_slice()).collect();
    let expected = reference::generate(nparity, &data);
    engine.generate(nparity, &mut views(&mut cols)).unwrap();
    for (row, want) in expected.iter().enumerate() {
        assert_eq!(
            &cols[row],
            want,
            "kernel {} parity row {row}",
            engine.kernel()
        );
    }
    cols
}

/// Erases `missing` (fills with junk), reconstructs with `engine`, compares with `good`.
fn check_reconstruct(engine: &RaidzParity, nparity: usize, good: &[Vec<u8>], missing: &[usize]) {
    let mut cols = good.to_vec();
    for &m in missing {
        cols[m]
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i as u8).wrapping_mul(37) ^ 0x5a);
    }
    engine
        .reconstruct(nparity, &mut views(&mut cols), missing)
        .unwrap();
    for &m in missing {
        assert_eq!(
            cols[m],
            good[m],
            "kernel {} p={nparity} missing {missing:?} col {m}",
            engine.kernel()
        );
    }
}

#[test]
fn q_and_r_coefficients_for_eight_data_columns() {
    let q_coefs = [128u8, 64, 32, 16, 8, 4, 2, 1];
    let r_coefs = [19u8, 205, 116, 29, 64, 16, 4, 1];
    for engine in engines() {
        for column in 0..8 {
            let mut cols = vec![vec![0u8; 1]; 3 + 8];
            cols[3 + column][0] = 1;
            engine.generate(3, &mut views(&mut cols)).unwrap();
            assert_eq!(cols[0][0], 1);
            assert_eq!(
                cols[1][0],
                q_coefs[column],
                "{} Q coef {column}",
                engine.kernel()
            );
            assert_eq!(
                cols[2][0],
                r_coefs[column],
                "{} R coef {column}",
                engine.kernel()
            );
        }
    }
    for (i, &c) in q_coefs.iter().enumerate() {
        assert_eq!(reference::gf_pow2(7 - i), c);
        assert_eq!(reference::gf_pow2(2 * (7 - i)), r_coefs[i]);
    }
}

#[test]
fn all_ones_columns() {
    for engine in engines() {
        // 8 data columns of 300 bytes of 0x01: P = 0, Q = ⊕ 2^k = 0xff, R = ⊕ 4^k = 0xe2.
        let mut cols = vec![vec![0u8; 300]; 3];
        cols.extend(vec![vec![1u8; 300]; 8]);
        engine.generate(3, &mut views(&mut cols)).unwrap();
        assert!(cols[0].iter().all(|&b| b == 0));
        assert!(cols[1].iter().all(|&b| b == 0xff), "{}", engine.kernel());
        assert!(cols[2].iter().all(|&b| b == 0xe2), "{}", engine.kernel());
    }
}

#[test]
fn literal_vectors_with_short_columns() {
    type DataAndParity = (Vec<Vec<u8>>, [Vec<u8>; 3]);
    let cases: [DataAndParity; 2] = [
        (
            vec![
                vec![0x01, 0x02, 0x80, 0xff],
                vec![0x1d, 0x00, 0x53],
                vec![0xca, 0xfe],
            ],
            [
                vec![214, 252, 211, 255],
                vec![244, 246, 156, 219],
                vec![174, 222, 185, 75],
            ],
        ),
        (
            vec![
                vec![0x10, 0x20, 0x30, 0x40, 0x50],
                vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee],
                vec![0xff, 0, 0xff, 0],
                vec![7],
            ],
            [
                vec![66, 155, 3, 157, 190],
                vec![246, 203, 105, 105, 37],
                vec![218, 151, 27, 156, 255],
            ],
        ),
    ];
    for (data, want) in cases {
        let data_refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        assert_eq!(reference::generate(3, &data_refs), want.to_vec());
        for engine in engines() {
            for nparity in 1..=3 {
                let mut cols = vec![vec![0u8; data[0].len()]; nparity];
                cols.extend(data.iter().cloned());
                engine.generate(nparity, &mut views(&mut cols)).unwrap();
                assert_eq!(&cols[..nparity], &want[..nparity], "{}", engine.kernel());
            }
        }
    }
}

#[test]
fn single_data_column_is_copied_to_every_parity() {
    for engine in engines() {
        let mut cols = vec![vec![0u8; 100]; 3];
        cols.push((0..100u8).map(|i| i.wrapping_mul(3)).collect());
        engine.generate(3, &mut views(&mut cols)).unwrap();
        assert!(cols[..3].iter().all(|p| *p == cols[3]));
    }
}

/// Every erasure combination of up to `p` columns for p in 1..=3 and 1..=8 data columns,
/// with equal and with RAID-Z style unequal lengths (first `bc` columns longer). 333 bytes =
/// 256 + 64 + 13 reaches every unroll width and the scalar tail of every kernel.
#[test]
fn exhaustive_erasures_small_widths() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for engine in engines() {
        for nparity in 1..=3 {
            for ndata in 1usize..=8 {
                for bc in [ndata, 1, ndata.div_ceil(2)] {
                    let lens: Vec<usize> =
                        (0..ndata).map(|i| if i < bc { 333 } else { 200 }).collect();
                    let row = random_row(&mut rng, nparity, &lens);
                    let good = check_generate(&engine, nparity, row);
                    let width = nparity + ndata;
                    for mask in 1u32..(1 << width) {
                        if mask.count_ones() as usize > nparity {
                            continue;
                        }
                        let missing: Vec<usize> =
                            (0..width).filter(|i| mask & (1 << i) != 0).collect();
                        check_reconstruct(&engine, nparity, &good, &missing);
                    }
                }
            }
        }
    }
}

/// Lengths: the first column longest; the others equal to it, RAID-Z style (`bc` long
/// columns, the rest shorter) or arbitrary.
fn data_lens() -> impl Strategy<Value = (usize, Vec<usize>)> {
    (
        1usize..=3,
        prop_oneof![3 => 1usize..=12, 1 => 1usize..=(MAX_COLUMNS - 3)],
    )
        .prop_flat_map(|(nparity, ndata)| {
            let lens = (0usize..700, 0usize..3, 0usize..=ndata, any::<u64>()).prop_map(
                move |(len0, style, bc, seed)| {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    let short = len0.saturating_sub(rng.gen_range(0..=len0.min(64)));
                    (0..ndata)
                        .map(|i| match style {
                            _ if i == 0 => len0,
                            0 => len0,
                            1 => {
                                if i < bc {
                                    len0
                                } else {
                                    short
                                }
                            }
                            _ => rng.gen_range(0..=len0),
                        })
                        .collect::<Vec<usize>>()
                },
            );
            (Just(nparity), lens)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn kernels_match_reference((nparity, lens) in data_lens(), seed in any::<u64>(), erase_seed in any::<u64>()) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let row = random_row(&mut rng, nparity, &lens);
        let width = row.len();
        let mut erase_rng = rand::rngs::StdRng::seed_from_u64(erase_seed);
        let count = erase_rng.gen_range(1..=nparity);
        let missing = rand::seq::index::sample(&mut erase_rng, width, count).into_vec();
        for engine in engines() {
            let good = check_generate(&engine, nparity, row.clone());
            check_reconstruct(&engine, nparity, &good, &missing);
        }
    }
}

#[test]
fn errors_never_panic() {
    let engine = RaidzParity::with_kernel(Kernel::best()).unwrap();
    let mut cols = vec![vec![0u8; 64]; 6];
    for nparity in [0, 4, 7] {
        assert_eq!(
            engine.generate(nparity, &mut views(&mut cols)),
            Err(ParityError::InvalidParity(nparity))
        );
        assert_eq!(
            engine.reconstruct(nparity, &mut views(&mut cols), &[0]),
            Err(ParityError::InvalidParity(nparity))
        );
    }
    assert!(matches!(
        engine.reconstruct(2, &mut views(&mut cols), &[0, 1, 2]),
        Err(ParityError::TooManyMissing {
            missing: 3,
            nparity: 2
        })
    ));
    assert!(matches!(
        engine.reconstruct(2, &mut views(&mut cols), &[6]),
        Err(ParityError::MissingOutOfRange {
            index: 6,
            columns: 6
        })
    ));
    assert_eq!(
        engine.reconstruct(2, &mut views(&mut cols), &[3, 3]),
        Err(ParityError::DuplicateMissing(3))
    );
    assert!(matches!(
        engine.generate(3, &mut views(&mut cols[..3])),
        Err(ParityError::BadColumnCount { .. })
    ));
    let mut too_wide = vec![vec![0u8; 1]; MAX_COLUMNS + 1];
    assert!(matches!(
        engine.generate(1, &mut views(&mut too_wide)),
        Err(ParityError::BadColumnCount { .. })
    ));
    let mut long_data = vec![vec![0u8; 64], vec![0u8; 64], vec![0u8; 65]];
    assert!(matches!(
        engine.generate(1, &mut views(&mut long_data)),
        Err(ParityError::BadColumnLength { column: 2, .. })
    ));
    let mut short_parity = vec![vec![0u8; 63], vec![0u8; 64]];
    assert!(matches!(
        engine.generate(1, &mut views(&mut short_parity)),
        Err(ParityError::BadColumnLength { column: 0, .. })
    ));
    assert_eq!(engine.reconstruct(2, &mut views(&mut cols), &[]), Ok(()));
}

#[test]
fn kernel_names_round_trip_and_selection() {
    for k in [
        Kernel::Scalar,
        Kernel::Ssse3,
        Kernel::Avx2,
        Kernel::Avx2Gfni,
        Kernel::Avx512Gfni,
        Kernel::Neon,
    ] {
        assert_eq!(Kernel::from_name(k.name()), Some(k));
    }
    assert_eq!(Kernel::from_name("nope"), None);
    let available = Kernel::available();
    assert_eq!(available[0], Kernel::Scalar);
    assert_eq!(*available.last().unwrap(), Kernel::best());
    assert!(available.iter().all(|k| k.is_supported()));
    assert!(matches!(
        RaidzParity::with_kernel(Kernel::Neon),
        Err(ParityError::KernelUnsupported(Kernel::Neon))
    ));
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RaidzParity>();
    assert!(cairn_parity::default_parity().kernel().is_supported());
}

/// The reference decode matrix (used to drive ISA-L in the bench) rebuilds erased data.
#[test]
fn reference_decode_matrix_rebuilds_data() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for ndata in 1..=10usize {
        let good = check_generate(&engines()[0], 3, random_row(&mut rng, 3, &vec![33; ndata]));
        for m in 1..=3.min(ndata) {
            let missing: Vec<usize> = (0..m).map(|k| k * (ndata / m)).collect();
            let (inputs, rows) = reference::decode_matrix(3, ndata, &missing);
            for (k, row) in rows.iter().enumerate() {
                let rebuilt: Vec<u8> = (0..33)
                    .map(|t| {
                        inputs.iter().zip(row).fold(0u8, |acc, (&c, &coef)| {
                            acc ^ reference::gf_mul(coef, good[c][t])
                        })
                    })
                    .collect();
                assert_eq!(rebuilt, good[3 + missing[k]]);
            }
        }
    }
}

/// Non-temporal stores (forced with a zero threshold) on 64-byte aligned columns give the
/// same bytes as the reference, for generation and reconstruction.
#[test]
fn streaming_stores_match_reference() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let (ncols, len, stride) = (3 + 6, 1000, 1088);
    let mut backing = vec![0u8; ncols * stride + 64];
    let start = backing.as_ptr().align_offset(64);
    rng.fill(&mut backing[..]);
    let region = &mut backing[start..start + ncols * stride];
    for kernel in Kernel::available() {
        let engine = RaidzParity::with_kernel(kernel)
            .unwrap()
            .with_stream_min_bytes(0);
        let mut cols: Vec<&mut [u8]> = region.chunks_mut(stride).map(|c| &mut c[..len]).collect();
        let data: Vec<Vec<u8>> = cols[3..].iter().map(|c| c.to_vec()).collect();
        let data_refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        engine.generate(3, &mut cols).unwrap();
        let expected = reference::generate(3, &data_refs);
        for (row, want) in expected.iter().enumerate() {
            assert_eq!(&cols[row][..], &want[..], "{kernel} row {row}");
        }
        cols[4].fill(0);
        cols[6].fill(0);
        cols[1].fill(0);
        engine.reconstruct(3, &mut cols, &[1, 4, 6]).unwrap();
        assert_eq!(&cols[4][..], &data[1][..]);
        assert_eq!(&cols[6][..], &data[3][..]);
        assert_eq!(&cols[1][..], &expected[1][..]);
    }
}

proptest::proptest! {
    /// `generate_split` (data read-only, parity apart) writes exactly what `generate` does.
    #[test]
    fn generate_split_matches_generate(
        nparity in 1usize..=3,
        ndata in 1usize..=24,
        len in 1usize..3000,
        shorter in 0usize..24,
        seed in proptest::prelude::any::<u64>(),
    ) {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let lens: Vec<usize> = (0..ndata).map(|i| if i > 0 && i >= ndata - shorter.min(ndata - 1) { len - len / 3 } else { len }).collect();
        let data: Vec<Vec<u8>> = lens.iter().map(|&l| { let mut v = vec![0u8; l]; rng.fill_bytes(&mut v); v }).collect();
        let engine = cairn_parity::default_parity();
        let mut joined: Vec<Vec<u8>> = (0..nparity).map(|_| vec![0u8; len]).chain(data.iter().cloned()).collect();
        let mut cols: Vec<&mut [u8]> = joined.iter_mut().map(|c| c.as_mut_slice()).collect();
        engine.generate(nparity, &mut cols).unwrap();
        let mut parity: Vec<Vec<u8>> = (0..nparity).map(|_| vec![0xAAu8; len]).collect();
        let mut pcols: Vec<&mut [u8]> = parity.iter_mut().map(|c| c.as_mut_slice()).collect();
        let dcols: Vec<&[u8]> = data.iter().map(|c| c.as_slice()).collect();
        engine.generate_split(nparity, &mut pcols, &dcols).unwrap();
        for p in 0..nparity {
            proptest::prop_assert_eq!(&parity[p], &joined[p]);
        }
    }
}
