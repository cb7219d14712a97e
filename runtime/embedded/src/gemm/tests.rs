//! The GEMM against a naive triple loop: shapes around the register tile and the blocks,
//! transposed and broadcast operands, beta 0 over NaN, 1 to 3 threads; B pre-packed.

use super::{gemm_on, gemm_packed_on, Addend, Bias, Element, Isa, Operands, Packed, Problem};
use aotc_abi::gemm::Activation;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `parallel_for` on scoped threads, as the benchmark and the pool's signature.
fn parallel_for(threads: usize, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= chunks {
            break;
        }
        f(i);
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(chunks) {
            s.spawn(work);
        }
        work();
    });
}

/// Deterministic values in [-1, 1) (SplitMix64).
fn values(n: usize, seed: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i.wrapping_mul(0xBF58_476D_1CE4_E5B9));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// How a matrix is laid out in its buffer: row-major, column-major, or one row (or column)
/// repeated through a zero stride.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Rows,
    Cols,
    RowBroadcast,
    ColBroadcast,
}

impl Layout {
    /// (row stride, column stride) of an r x c matrix.
    fn strides(self, r: usize, c: usize) -> (isize, isize) {
        match self {
            Layout::Rows => (c as isize, 1),
            Layout::Cols => (1, r as isize),
            Layout::RowBroadcast => (0, 1),
            Layout::ColBroadcast => (1, 0),
        }
    }
}

struct Case {
    m: usize,
    k: usize,
    n: usize,
    a: Layout,
    b: Layout,
    c: Layout,
    alpha: f64,
    beta: f64,
    threads: usize,
}

fn check<T: Element + Into<f64>>(case: &Case, isa: Isa, to_t: fn(f64) -> T, eps: f64) {
    let Case { m, k, n, alpha, beta, threads, .. } = *case;
    let (a, b) = (values(m * k, 1), values(k * n, 2));
    let (rsa, csa) = case.a.strides(m, k);
    let (rsb, csb) = case.b.strides(k, n);
    let (rsc, csc) = case.c.strides(m, n);
    let at = |i: usize, p: usize| a[(i as isize * rsa + p as isize * csa) as usize];
    let bt = |p: usize, j: usize| b[(p as isize * rsb + j as isize * csb) as usize];
    // beta == 0 must ignore C's NaNs.
    let c0: Vec<f64> = if beta == 0.0 { vec![f64::NAN; m * n] } else { values(m * n, 3) };
    let (ta, tb): (Vec<T>, Vec<T>) = (a.iter().map(|&x| to_t(x)).collect(), b.iter().map(|&x| to_t(x)).collect());
    let mut tc: Vec<T> = c0.iter().map(|&x| to_t(x)).collect();
    let p = Problem {
        m,
        k,
        n,
        alpha: to_t(alpha),
        a: ta.as_ptr(),
        rsa,
        csa,
        b: tb.as_ptr(),
        rsb,
        csb,
        beta: to_t(beta),
        c: tc.as_mut_ptr(),
        rsc,
        csc,
    };
    // SAFETY: the vectors hold the matrices the strides describe, and C's strides are
    // those of a dense layout.
    unsafe { gemm_on(isa, p, threads, &parallel_for) };
    for i in 0..m {
        for j in 0..n {
            let (mut dot, mut mag) = (0.0, 0.0);
            for q in 0..k {
                dot += at(i, q) * bt(q, j);
                mag += (at(i, q) * bt(q, j)).abs();
            }
            let ci = (i as isize * rsc + j as isize * csc) as usize;
            let old = if beta == 0.0 { 0.0 } else { beta * c0[ci] };
            let want = alpha * dot + old;
            let got: f64 = tc[ci].into();
            assert!((got - want).abs() <= eps * (1.0 + mag + old.abs()), "m={m} k={k} n={n} {:?} {:?} {:?} alpha={alpha} beta={beta} threads={threads} {isa:?} ({i}, {j}): {got} != {want}", case.a, case.b, case.c);
        }
    }
}

fn check_both(case: Case) {
    for isa in Isa::every_available() {
        check::<f32>(&case, isa, |x| x as f32, 1e-5);
        check::<f64>(&case, isa, |x| x, 1e-13);
    }
}

#[test]
fn tiny_products_match_the_naive_sum() {
    // Within `tiny`'s bounds (one and two vectors of columns, the deepest and tallest) and
    // just past them, A either way round, B's rows contiguous.
    for (m, k, n) in
        [(8, 8, 8), (1, 1, 1), (32, 64, 16), (5, 3, 9), (7, 64, 1), (3, 17, 4), (33, 8, 8), (8, 65, 8), (4, 4, 17)]
    {
        for (a, beta) in [(Layout::Rows, 0.0), (Layout::Cols, 1.0), (Layout::RowBroadcast, -0.5)] {
            check_both(Case { m, k, n, a, b: Layout::Rows, c: Layout::Rows, alpha: 0.5, beta, threads: 1 });
        }
    }
}

#[test]
fn shapes_layouts_and_threads() {
    let sizes = [0, 1, 7, 64, 129];
    for (i, &m) in sizes.iter().enumerate() {
        for (j, &k) in sizes.iter().enumerate() {
            for (l, &n) in sizes.iter().enumerate() {
                // Walk the layouts, betas and thread counts across shapes rather than
                // multiplying them out: every combination still meets many shapes.
                let s = i * 25 + j * 5 + l;
                let a = [Layout::Rows, Layout::Cols][s % 2];
                let b = [Layout::Rows, Layout::Cols][(s / 2) % 2];
                let beta = [0.0, 1.0][(s / 4) % 2];
                for threads in 1..=3 {
                    check_both(Case { m, k, n, a, b, c: Layout::Rows, alpha: 1.0, beta, threads });
                }
            }
        }
    }
}

#[test]
fn blocks_split_across_threads() {
    // Large enough to be cut: by rows (m >= n) or by columns, past the kernel's blocks of
    // depth (256) and of columns (256 for few rows); 250 rows take the loop nest for many
    // rows alone or on 2 threads (126 and 124).
    for (m, k, n) in [(300, 1000, 7), (7, 1000, 300), (250, 300, 40)] {
        for threads in 1..=3 {
            for (a, b) in [(Layout::Rows, Layout::Rows), (Layout::Cols, Layout::Cols)] {
                check_both(Case { m, k, n, a, b, c: Layout::Rows, alpha: 0.5, beta: 2.0, threads });
            }
        }
    }
    // Past the block of 4080 columns for many rows.
    check_both(Case {
        m: 127,
        k: 8,
        n: 4100,
        a: Layout::Rows,
        b: Layout::Rows,
        c: Layout::Rows,
        alpha: 1.0,
        beta: 1.0,
        threads: 1,
    });
    // Few rows and a C larger than the cache (640 KiB in f32): the columns outermost, A
    // packed whole, three depth blocks, a last partial block of columns.
    for threads in 1..=2 {
        check_both(Case {
            m: 40,
            k: 600,
            n: 4100,
            a: Layout::Rows,
            b: Layout::Rows,
            c: Layout::Rows,
            alpha: 0.5,
            beta: 2.0,
            threads,
        });
    }
}

#[test]
fn strided_c_broadcast_operands_and_scaling() {
    for (m, k, n) in [(7, 64, 129), (129, 7, 64), (64, 129, 7), (13, 0, 17)] {
        for threads in [1, 2] {
            check_both(Case {
                m,
                k,
                n,
                a: Layout::Rows,
                b: Layout::Rows,
                c: Layout::Cols,
                alpha: 1.5,
                beta: -0.5,
                threads,
            });
            check_both(Case {
                m,
                k,
                n,
                a: Layout::RowBroadcast,
                b: Layout::ColBroadcast,
                c: Layout::Rows,
                alpha: 2.0,
                beta: 0.0,
                threads,
            });
            check_both(Case {
                m,
                k,
                n,
                a: Layout::ColBroadcast,
                b: Layout::RowBroadcast,
                c: Layout::Rows,
                alpha: -1.0,
                beta: 1.0,
                threads,
            });
        }
    }
}

/// `C = activation(alpha * A @ B + beta * C + bias + addend)` with A and B packed as the
/// compiler packs weights or strided, by the kernels of `isa` on `threads` threads, against
/// the naive sum.
fn check_packed(m: usize, k: usize, n: usize, beta: f32, (pack_a, pack_b): (bool, bool), threads: usize, isa: Isa) {
    use aotc_abi::gemm::{pack, MR, NR};
    let (a, b) = (values(m * k, 1), values(k * n, 2));
    let (a32, b32): (Vec<f32>, Vec<f32>) =
        (a.iter().map(|&x| x as f32).collect(), b.iter().map(|&x| x as f32).collect());
    let packed_a = pack(k, m, MR, |p, i| a32[i * k + p]).unwrap();
    let packed_b = pack(k, n, NR, |p, j| b32[p * n + j]).unwrap();
    let c0: Vec<f32> =
        if beta == 0.0 { vec![f32::NAN; m * n] } else { values(m * n, 3).iter().map(|&x| x as f32).collect() };
    let mut c = c0.clone();
    // The unpacked pointers of a packed operand are never read: null says so.
    let p = Problem {
        m,
        k,
        n,
        alpha: 0.5,
        a: if pack_a { std::ptr::null() } else { a32.as_ptr() },
        rsa: k as isize,
        csa: 1,
        b: if pack_b { std::ptr::null() } else { b32.as_ptr() },
        rsb: n as isize,
        csb: 1,
        beta,
        c: c.as_mut_ptr(),
        rsc: n as isize,
        csc: 1,
    };
    // Every output pass, each with one of the ways of giving the operands.
    let (row_bias, col_bias) = (
        values(m, 4).iter().map(|&x| x as f32).collect::<Vec<_>>(),
        values(n, 5).iter().map(|&x| x as f32).collect::<Vec<_>>(),
    );
    let (bias, activation) = match (pack_a, pack_b) {
        (false, true) => (Bias::Cols(col_bias.as_ptr()), Activation::Gelu),
        (true, true) => (Bias::Cols(col_bias.as_ptr()), Activation::Relu),
        (true, false) => (Bias::Rows(row_bias.as_ptr()), Activation::Hardswish),
        (false, false) => (Bias::None, Activation::None),
    };
    // An addend (a convolution's residual) with rows wider than C's, where A is not packed
    // or B is not.
    let addend_rs = n + 3;
    let addend_values: Vec<f32> = values(m * addend_rs, 6).iter().map(|&x| x as f32).collect();
    let addend = (!pack_a || !pack_b).then_some(Addend { at: addend_values.as_ptr(), rs: addend_rs as isize });
    let packed = Operands {
        a: if pack_a { Packed::new(packed_a.as_ptr(), m, MR) } else { None },
        b: if pack_b { Packed::new(packed_b.as_ptr(), n, NR) } else { None },
        bias,
        addend,
        activation,
    };
    // SAFETY: the packed vectors hold A and B packed for exactly these sizes; the others
    // are the row-major vectors.
    unsafe { gemm_packed_on(isa, p, packed, threads, &parallel_for) }
    for i in 0..m {
        for j in 0..n {
            let (mut dot, mut mag) = (0.0, 0.0);
            for q in 0..k {
                dot += a32[i * k + q] as f64 * b32[q * n + j] as f64;
                mag += (a32[i * k + q] as f64 * b32[q * n + j] as f64).abs();
            }
            let old = if beta == 0.0 { 0.0 } else { beta as f64 * c0[i * n + j] as f64 };
            let bias = match bias {
                Bias::None => 0.0,
                Bias::Rows(_) => row_bias[i] as f64,
                Bias::Cols(_) => col_bias[j] as f64,
            };
            let addend = if addend.is_some() { addend_values[i * addend_rs + j] as f64 } else { 0.0 };
            let want = crate::activation::reference(activation, 0.5 * dot + old + bias + addend);
            let got = c[i * n + j] as f64;
            assert!((got - want).abs() <= 1e-5 * (1.0 + mag + old.abs()), "m={m} k={k} n={n} beta={beta} packed A {pack_a} B {pack_b} threads={threads} {isa:?} ({i}, {j}): {got} != {want}");
        }
    }
}

#[test]
fn packed_operands_match_the_naive_product() {
    // Few and many rows, partial panels, two depth blocks, an empty depth; blocks of C
    // split across threads at whole panels (rows for 250 x 300 x 40, columns otherwise).
    // (40 x 600 x 4100: C larger than the cache, the columns outermost.)
    for (m, k, n) in [
        (1, 7, 5),
        (6, 300, 33),
        (64, 513, 100),
        (130, 257, 47),
        (7, 0, 9),
        (250, 40, 300),
        (300, 70, 250),
        (40, 600, 4100),
    ] {
        for beta in [0.0, 1.0] {
            for packed in [(false, true), (true, false), (true, true), (false, false)] {
                for isa in Isa::every_available() {
                    for threads in 1..=3 {
                        check_packed(m, k, n, beta, packed, threads, isa);
                    }
                }
            }
        }
    }
}

#[test]
fn narrow_last_panels_match_the_naive_product() {
    // n % 16 in 1..=8 (the f32 AVX2 kernel's narrow tile; for f64, n % 8 in 1..=4) and past
    // it, with few and many rows, every row count of a tile (AVX-512's 12 included, and
    // the heights that reach into its second panel of A), two depth blocks.
    let shapes = [
        (130, 300, 49),
        (6, 40, 56),
        (5, 513, 24),
        (4, 9, 8),
        (3, 20, 20),
        (2, 7, 1),
        (1, 33, 41),
        (13, 64, 23),
        (250, 33, 57),
        (12, 50, 31),
        (11, 70, 33),
        (10, 17, 16),
        (9, 300, 17),
        (8, 20, 40),
        (7, 5, 3),
    ];
    for (s, &(m, k, n)) in shapes.iter().enumerate() {
        for threads in [1, 2] {
            let b = [Layout::Rows, Layout::Cols][s % 2];
            check_both(Case {
                m,
                k,
                n,
                a: Layout::Rows,
                b,
                c: Layout::Rows,
                alpha: 1.5,
                beta: [0.0, 1.0][s % 2],
                threads,
            });
            // A strided C: the partial store path.
            check_both(Case {
                m,
                k,
                n,
                a: Layout::Cols,
                b: Layout::Rows,
                c: Layout::Cols,
                alpha: 1.0,
                beta: -0.5,
                threads,
            });
            for beta in [0.0, 1.0] {
                // Each output pass: packed or unpacked operands, bias by rows or columns,
                // each activation.
                for packed in [(false, true), (true, false), (true, true), (false, false)] {
                    for isa in Isa::every_available() {
                        check_packed(m, k, n, beta, packed, threads, isa);
                    }
                }
            }
        }
    }
}
