//! Decomposed operators lowered whole (`lower::recognize`), on masked_attention (made by
//! tests/fixtures/make_masked_attention.py): each of its two attentions' `_safe_softmax`
//! decompositions (eq, logical_not, any, logical_not, full_like, where around a softmax)
//! becomes one safe softmax call, naming all seven nodes, with no reduction beside it, while the plain softmax
//! over a row of -inf stays a plain one (NaN, as torch). The library still gives
//! PyTorch's results, zeros for the rows a mask hides completely.

use aotc::ir::{ExternArg, Kernel};
use aotc_abi::internal_symbols::SOFTMAX;
use aotc_abi::softmax::{SAFE_SOFTMAX, SOFTMAX as PLAIN};
use aotc_tests::{check_fixture, fixture};

#[test]
fn safe_softmax_decompositions_become_one_call_each() {
    let dir = fixture("masked_attention");
    let (_src, lowered) = aotc::lower_file(&dir.join("model.pt2"), &Default::default()).expect("lower");
    let kernels = &lowered.program.kernels;
    // Each softmax call's mode, and how many graph nodes it computes (profiles name them).
    let calls: Vec<(i64, usize)> = kernels
        .iter()
        .zip(&lowered.program.kernel_nodes)
        .filter_map(|(k, nodes)| match k {
            Kernel::Extern(call) if call.name == SOFTMAX => match call.args.last() {
                Some(ExternArg::Size(mode)) => Some((mode.as_int()?, nodes.len())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(calls, [(SAFE_SOFTMAX, 7), (SAFE_SOFTMAX, 7), (PLAIN, 1)]);
    assert!(!kernels.iter().any(|k| matches!(k, Kernel::Reduction { .. })), "no reduction is left");
    check_fixture("masked_attention");
}
