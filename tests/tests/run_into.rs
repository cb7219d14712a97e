//! Outputs written into the caller's memory (`aotc_output_shapes`, `aotc_run_into`): what
//! `verify_fixture` does not reach (it runs every fixture both ways): strided outputs,
//! data-dependent shapes, and every descriptor the call must refuse.

use aotc_abi::{status, AotcTensor, DLDevice, DType, DL_CPU};
use aotc_runtime::{Device, Model, Tensor, Value};
use aotc_tests::{compile, fixture, recorded};

fn load(name: &str) -> (tempfile::TempDir, Model) {
    let (dir, so) = compile(&fixture(name).join("model.pt2"));
    let model = Model::load_with_threads(&so, Device::Cpu, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
    (dir, model)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn descriptor(data: *mut u8, shape: &mut [i64], strides: Option<&mut [i64]>, dtype: DType) -> AotcTensor {
    AotcTensor {
        data: data.cast(),
        device: DLDevice { device_type: DL_CPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype: dtype.to_dlpack(),
        shape: shape.as_mut_ptr(),
        strides: strides.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
        byte_offset: 0,
    }
}

#[test]
fn output_shapes_follow_the_inputs_and_run_into_matches_run() {
    let (_d, mut m) = load("dynamic_batch_mlp");
    for batch in [1, 3, 17] {
        let x: Vec<f32> = (0..batch * 8).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut inputs = [Value::Tensor(Tensor::from_f32(&[batch, 8], &x))];
        assert_eq!(m.output_shapes(&mut inputs).unwrap(), vec![vec![batch, 4]]);
        let want = m.run(&mut inputs).unwrap();
        let mut got = vec![Tensor::zeros(DType::F32, &[batch, 4])];
        m.run_into(&mut inputs, &mut got).unwrap();
        assert_eq!(got, want, "batch {batch}");
    }
    // Shapes are checked like run's: out of range, refused.
    let e = m.output_shapes(&mut [Value::Tensor(Tensor::zeros(DType::F32, &[1025, 8]))]).unwrap_err();
    assert_eq!(e.code, status::RANGE, "{e}");
}

#[test]
fn a_strided_output_is_filled_through_its_strides() {
    // The [3, 4] output written into the transpose of a [4, 3] buffer, and into every
    // other element of a [3, 8] one.
    let (_d, mut m) = load("dynamic_batch_mlp");
    let x: Vec<f32> = (0..24).map(|i| i as f32 * 0.1 - 1.0).collect();
    let mut inputs = [Value::Tensor(Tensor::from_f32(&[3, 8], &x))];
    let want = f32s(&m.run(&mut inputs).unwrap()[0]);
    let mut shape = [3i64, 4];
    let mut input_shape = [3i64, 8];
    let raw_input = descriptor(x.as_ptr().cast_mut().cast(), &mut input_shape, None, DType::F32);
    for (mut strides, len) in [([1i64, 3], 12usize), ([8, 2], 24)] {
        let mut memory = vec![f32::NAN; len];
        let out = descriptor(memory.as_mut_ptr().cast(), &mut shape, Some(&mut strides), DType::F32);
        // SAFETY: the descriptors describe live vectors of the bytes their strides reach.
        unsafe { m.run_into_raw(&[raw_input], &[out]) }.unwrap();
        for i in 0..3 {
            for j in 0..4 {
                let at = (i as i64 * strides[0] + j as i64 * strides[1]) as usize;
                assert_eq!(memory[at].to_bits(), want[i * 4 + j].to_bits(), "strides {strides:?} element ({i}, {j})");
            }
        }
        if len == 24 {
            assert!(memory.iter().skip(1).step_by(2).all(|v| v.is_nan()), "the elements between are untouched");
        }
    }
}

#[test]
fn a_data_dependent_output_shape_is_minus_one_and_checked_after_the_stage() {
    let (_d, mut m) = load("ops/nonzero__float32__1");
    let mut x = [0.0f32; 25];
    x[3] = 1.0;
    x[17] = -2.0;
    let mut inputs = [Value::Tensor(Tensor::from_f32(&[5, 5], &x))];
    assert_eq!(m.output_shapes(&mut inputs).unwrap(), vec![vec![-1, 2]]);
    let mut good = vec![Tensor::zeros(DType::I64, &[2, 2])];
    m.run_into(&mut inputs, &mut good).unwrap();
    let rows: Vec<i64> = good[0].data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(rows, vec![0, 3, 3, 2]);
    let e = m.run_into(&mut inputs, &mut [Tensor::zeros(DType::I64, &[3, 2])]).unwrap_err();
    assert_eq!(e.code, status::SHAPE, "{e}");
    assert!(
        e.message
            .contains("output 0 ('nonzero'): this call computes shape [2, 2], the caller's tensor has shape [3, 2]"),
        "{e}"
    );
}

#[test]
fn mutated_state_advances_the_same_way_through_run_into() {
    // mlp_buffer_mutation counts its calls in a buffer: two calls through run_into see
    // PyTorch's second call's outputs.
    let dir = fixture("mlp_buffer_mutation");
    let (_d, mut m) = load("mlp_buffer_mutation");
    for call in 0..2 {
        let (mut inputs, expected) = recorded(&dir, call);
        let shapes = m.output_shapes(&mut inputs).unwrap();
        let mut outs: Vec<Tensor> =
            m.outputs().iter().zip(&shapes).map(|(o, s)| Tensor::zeros(o.dtype.unwrap(), s)).collect();
        m.run_into(&mut inputs, &mut outs).unwrap();
        for (k, want) in &expected {
            aotc_tests::assert_close(
                &format!("call {call} output {k}"),
                want,
                &outs[k.parse::<usize>().unwrap()],
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn bad_output_descriptors_are_refused_before_anything_is_written() {
    let (_d, mut m) = load("dynamic_batch_mlp");
    let x = [0.5f32; 16];
    let mut input_shape = [2i64, 8];
    let input = descriptor(x.as_ptr().cast_mut().cast(), &mut input_shape, None, DType::F32);
    let mut memory = vec![7.0f32; 16];
    let base: *mut u8 = memory.as_mut_ptr().cast();
    let mut shape = [2i64, 4];
    let mut wrong_shape = [2i64, 5];
    let mut big = [4i64, 4];
    let good = descriptor(base, &mut shape, None, DType::F32);
    let cases: Vec<(Vec<AotcTensor>, i32, String)> = vec![
        (vec![], status::INVALID_ARGUMENT, "expected 1 outputs, got 0".into()),
        (vec![good, good], status::INVALID_ARGUMENT, "expected 1 outputs, got 2".into()),
        (
            vec![descriptor(base, &mut shape, None, DType::F64)],
            status::DTYPE,
            "output 0 ('_log_softmax'): expected dtype float32, got float64".into(),
        ),
        (
            vec![descriptor(base, &mut wrong_shape, None, DType::F32)],
            status::SHAPE,
            "this call computes shape [2, 4], the caller's tensor has shape [2, 5]".into(),
        ),
        (
            vec![descriptor(std::ptr::null_mut(), &mut shape, None, DType::F32)],
            status::INVALID_ARGUMENT,
            "data is a null pointer".into(),
        ),
        (
            vec![descriptor(x.as_ptr().cast_mut().cast(), &mut big, None, DType::F32)],
            status::INVALID_ARGUMENT,
            "overlaps input 0 ('x')".into(),
        ),
        (
            vec![AotcTensor { device: DLDevice { device_type: 2, device_id: 0 }, ..good }],
            status::DEVICE,
            "tensor is on device type 2 id 0, expected the CPU (device type 1)".into(),
        ),
    ];
    for (outs, code, msg) in cases {
        // SAFETY: every descriptor describes live memory of the bytes it reaches (or is
        // refused before anything reads it).
        let e = unsafe { m.run_into_raw(&[input], &outs) }.unwrap_err();
        assert_eq!(e.code, code, "{e}");
        assert!(e.message.contains(&msg), "message {:?} lacks {msg:?}", e.message);
        assert!(memory.iter().all(|&v| v == 7.0), "a refused call wrote the caller's memory");
    }
    // An output of an earlier aotc_run lives in the instance: refused as an output.
    // SAFETY: as above.
    let earlier = unsafe { m.run_raw(&[input]) }.unwrap()[0].data.as_ptr().cast_mut();
    let mut shape2 = [2i64, 4];
    // SAFETY: as above; `earlier` holds the 32 bytes of that output.
    let e = unsafe { m.run_into_raw(&[input], &[descriptor(earlier, &mut shape2, None, DType::F32)]) }.unwrap_err();
    assert!(e.message.contains("points into this instance's own memory"), "{e}");
    // Two outputs sharing memory are refused, on a program with two outputs.
    let (_d2, mut two) = load("ops/aminmax__float32__0");
    let (mut inputs, _) = recorded(&fixture("ops/aminmax__float32__0"), 0);
    let shapes = two.output_shapes(&mut inputs).unwrap();
    let mut outs: Vec<Tensor> =
        two.outputs().iter().zip(&shapes).map(|(o, s)| Tensor::zeros(o.dtype.unwrap(), s)).collect();
    two.run_into(&mut inputs, &mut outs).unwrap();
    let Value::Tensor(x) = &mut inputs[0] else { panic!("aminmax takes a tensor") };
    let raw_input = x.as_raw();
    let mut raw: Vec<AotcTensor> = outs.iter_mut().map(Tensor::as_raw).collect();
    raw[1].data = raw[0].data;
    // SAFETY: both outputs describe outs[0]'s memory, of the same shape and dtype.
    let e = unsafe { two.run_into_raw(&[raw_input], &raw) }.unwrap_err();
    assert!(e.message.contains("output 1 ('amax') overlaps output 0 ('amin')"), "{e}");
}
