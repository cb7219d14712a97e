//! The scratch arena: a library whose sizes follow its inputs lays its arena out again
//! when they change, and gives PyTorch's results for every size, also after going back
//! to an earlier one (the layout is cached per set of sizes, the memory reused).

use aotc_runtime::{Device, Model};
use aotc_tests::{calls, check_call, compile, fixture, recorded, tolerance};

#[test]
fn sizes_that_change_call_after_call_give_pytorchs_results() {
    for name in ["dynamic_batch_mlp", "models/t5_tiny_dynseq", "models/unet_block_dynhw"] {
        let dir = fixture(name);
        let (_tmp, so) = compile(&dir.join("model.pt2"));
        let mut model = Model::load_with_threads(&so, Device::Cpu, 2).expect("load");
        let n = calls(&dir);
        assert!(n >= 2, "{name} records calls of more than one size");
        // Every recorded size in order, then back down, then the same size twice.
        let order: Vec<usize> = (0..n).chain((0..n).rev()).chain([0]).collect();
        for (i, call) in order.into_iter().enumerate() {
            let (inputs, expected) = recorded(&dir, call);
            check_call(&mut model, &inputs, &expected, tolerance(&dir), &format!("{name} call {i} (inputs_{call})"));
        }
    }
}
