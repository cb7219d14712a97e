//! Concatenations written in place (`passes::concat_in_place`), on concat_in_place (made
//! by tests/fixtures/make_concat_in_place.py): the DenseNet-style block's input and feature
//! maps, and each of its growing concatenations, lie in the block's last concatenation; the
//! fire module's two convolutions in theirs; a concatenation of a concatenation and a
//! third convolution in the outer one. A part concatenated twice, a channel slice, and a
//! part that is also an output keep their copies. On channel_shuffle (two ShuffleNet units),
//! each concatenation writes its channel shuffle itself (`passes::concat_reorder`) and the
//! halves the branches read are the shuffled result's second half (`passes::copy_in_place`):
//! no pointwise copy is left but the output's. The library still gives PyTorch's results.

use aotc::ir::{ExternArg, ExternCall, Kernel, Program};
use aotc_tests::{check_fixture, fixture};
use std::collections::BTreeMap;

/// The concatenation calls left in `prog`, in order.
fn concat_calls(prog: &Program) -> impl Iterator<Item = &ExternCall> {
    prog.kernels.iter().filter_map(|k| match k {
        Kernel::Extern(call) if call.name == aotc_abi::concat::SYMBOL => Some(&**call),
        _ => None,
    })
}

#[test]
fn concatenated_convolutions_write_in_place() {
    let dir = fixture("concat_in_place");
    let (_src, lowered) = aotc::lower_file(&dir.join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let name = |b| prog.buffers[b].name.clone();
    // Each placed buffer by name: the buffer it lies in, and at which byte.
    let placed: BTreeMap<String, (String, u64)> =
        prog.placements.iter().map(|(&b, at)| (name(b), (name(at.within), at.offset))).collect();
    // [1, 4, 10, 12] float32 maps are 1920 bytes.
    let want = |list: &[(&str, &str, u64)]| -> BTreeMap<String, (String, u64)> {
        list.iter().map(|&(b, within, at)| (b.to_string(), (within.to_string(), at))).collect()
    };
    assert_eq!(
        placed,
        want(&[
            // The block: x0 (8 channels) and three maps of 4, and the concatenations before the last.
            ("convolution", "cat_3", 0),
            ("cat", "cat_3", 0),
            ("convolution_1", "cat_3", 3840),
            ("cat_1", "cat_3", 0),
            ("convolution_2", "cat_3", 5760),
            ("cat_2", "cat_3", 0),
            ("convolution_3", "cat_3", 7680),
            // The fire module.
            ("convolution_5", "cat_4", 0),
            ("convolution_6", "cat_4", 3840),
            // cat([cat([a, b]), c]).
            ("convolution_7", "cat_6", 0),
            ("convolution_8", "cat_6", 1920),
            ("cat_5", "cat_6", 0),
            ("convolution_9", "cat_6", 3840),
        ])
    );
    // The three that keep their copies: [d, d], [d, a channel slice], [d (an output), ...].
    let copies: Vec<Vec<String>> = concat_calls(prog)
        .filter_map(|call| match &call.args[0] {
            ExternArg::Bufs(parts) => Some(parts.iter().map(|&b| name(b)).collect()),
            _ => None,
        })
        .collect();
    assert_eq!(
        copies,
        [["convolution_10", "convolution_10"], ["convolution_10", "cat_6"], ["convolution_10", "convolution_11"]]
    );
    // The kernel that writes a concatenation's last part computes the concatenation.
    let computes = |node: &str| {
        prog.kernel_nodes
            .iter()
            .zip(&prog.kernels)
            .find_map(|(nodes, k)| nodes.iter().any(|&n| prog.nodes[n].name == node).then(|| name(k.out())))
    };
    assert_eq!(computes("cat_3").as_deref(), Some("convolution_3"));
    assert_eq!(computes("cat_6").as_deref(), Some("convolution_9"));
    check_fixture("concat_in_place");
}

#[test]
fn a_channel_shuffle_is_written_by_its_concatenation() {
    let dir = fixture("channel_shuffle");
    let (_src, lowered) = aotc::lower_file(&dir.join("model.pt2"), &Default::default()).expect("lower");
    let prog = &lowered.program;
    let name = |b| prog.buffers[b].name.clone();
    // Each concatenation call's geometry: 8 rows (channels of each half) of one 8 x 8 plane
    // (256 bytes) from each part, a part's planes 256 bytes apart.
    let calls: Vec<Vec<i64>> = concat_calls(prog)
        .filter_map(|call| match &call.args[1] {
            ExternArg::Sizes(g) => Some(g.iter().map(|s| s.as_int().expect("static")).collect()),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [[8, 256, 256, 0, 0, 256, 256], [8, 256, 256, 0, 0, 256, 256]]);
    // The second unit's half is the first unit's shuffled result from channel 8 on.
    let placed: BTreeMap<String, (String, u64)> =
        prog.placements.iter().map(|(&b, at)| (name(b), (name(at.within), at.offset))).collect();
    assert_eq!(placed.get("convolution_4.input"), Some(&("view_1".to_string(), 2048)));
    let copies = prog.kernels.iter().filter(|k| matches!(k, Kernel::Pointwise { .. })).count();
    assert_eq!(copies, 1, "only the copy into the output is left");
    check_fixture("channel_shuffle");
}
