//! Elementwise kernels: f32 with a grid-stride loop, f16 and bf16 load-convert-compute-
//! store (bit-exact against Rust), integer division, shifts and saturating conversions.

mod common;

use aotc_ptx_interp::{Arg, Launch, Memory};
use common::{module, Rng, BF16, F16};

#[test]
fn f32_grid_stride_loop_over_several_grid_sizes() {
    let module = module("elementwise_f32");
    let (a, b) = (1.75f32, -0.5f32);
    for (n, grid, block) in
        [(1000usize, 1, 128), (1000, 3, 128), (1000, 64, 128), (1, 2, 32), (4097, 5, 96), (0, 1, 32)]
    {
        let mut rng = Rng::new(n as u64 + grid as u64);
        let x: Vec<f32> = (0..n).map(|_| rng.uniform(-4.0, 4.0)).collect();
        let mut memory = Memory::new();
        let x_at = memory.upload(&x).unwrap();
        let out_at = memory.upload(&vec![f32::NAN; n]).unwrap();
        let launch = Launch::new([grid, 1, 1], [block, 1, 1]);
        let args = [Arg::U64(out_at), Arg::U64(x_at), Arg::S64(n as i64), Arg::F32(a), Arg::F32(b)];
        let stats = module.launch(&mut memory, "scale_relu", &launch, &args).unwrap();
        let out = memory.download::<f32>(out_at, n).unwrap();
        for (i, (&got, &x)) in out.iter().zip(&x).enumerate() {
            let y = x.mul_add(a, b);
            let expected = if y > 0.0 { y } else { 0.0 };
            assert_eq!(got.to_bits(), expected.to_bits(), "n={n} grid={grid} i={i}");
        }
        assert_eq!((stats.ctas, stats.threads), (grid as u64, (grid * block) as u64));
        assert!(stats.instructions >= 10 * n as u64);
    }
}

/// Random f16/bf16 bits, NaNs excluded, with extremes mixed in.
fn half_inputs(rng: &mut Rng, format: &common::Half, n: usize) -> Vec<u16> {
    let specials =
        [0x0000, 0x8000, 0x0001, 0x8001, format.max_finite, format.max_finite | 0x8000, format.max_finite + 1];
    (0..n)
        .map(|i| loop {
            let bits = if i < specials.len() { specials[i] } else { rng.next_u32() as u16 };
            if !format.decode(bits).is_nan() {
                break bits;
            }
        })
        .collect()
}

#[test]
fn f16_load_convert_compute_store_is_bit_exact() {
    let module = module("half");
    let n = 5000;
    let mut rng = Rng::new(16);
    // Mostly moderate values, so products land in range; random bits for the rest.
    let x: Vec<u16> = half_inputs(&mut rng, &F16, n)
        .into_iter()
        .enumerate()
        .map(|(i, bits)| if i % 3 == 0 { bits } else { bits & 0xbfff })
        .collect();
    let y = half_inputs(&mut rng, &F16, n);
    let mut memory = Memory::new();
    let (x_at, y_at) = (memory.upload(&x).unwrap(), memory.upload(&y).unwrap());
    let out_at = memory.upload(&vec![0u16; n]).unwrap();
    let launch = Launch::new([(n as u32).div_ceil(256), 1, 1], [256, 1, 1]);
    let args = [Arg::U64(out_at), Arg::U64(x_at), Arg::U64(y_at), Arg::U32(n as u32)];
    module.launch(&mut memory, "f16_mul_add", &launch, &args).unwrap();
    let out = memory.download::<u16>(out_at, n).unwrap();
    let tenth = f32::from_bits(0x3dcc_cccd);
    for i in 0..n {
        let expected = F16.encode(F16.decode(x[i]).mul_add(F16.decode(y[i]), tenth));
        assert_eq!(out[i], expected, "x={:#06x} y={:#06x}", x[i], y[i]);
    }
}

#[test]
fn bf16_load_convert_compute_store_is_bit_exact() {
    let module = module("half");
    let n = 5000;
    let mut rng = Rng::new(17);
    let x = half_inputs(&mut rng, &BF16, n);
    let mut memory = Memory::new();
    let x_at = memory.upload(&x).unwrap();
    let out_at = memory.upload(&vec![0u16; n]).unwrap();
    let launch = Launch::new([(n as u32).div_ceil(128), 1, 1], [128, 1, 1]);
    module.launch(&mut memory, "bf16_mix", &launch, &[Arg::U64(out_at), Arg::U64(x_at), Arg::U32(n as u32)]).unwrap();
    let out = memory.download::<u16>(out_at, n).unwrap();
    for i in 0..n {
        let v = BF16.decode(x[i]);
        let expected = BF16.encode(v.abs().sqrt() - v * 3.0);
        assert_eq!(out[i], expected, "x={:#06x}", x[i]);
    }
}

#[test]
fn integer_division_shifts_and_saturating_conversions() {
    let module = module("integer");
    let mut rng = Rng::new(32);
    let mut a: Vec<i32> = vec![i32::MIN, i32::MIN, -7, 7, -1, 0, i32::MAX, 1 << 30, -2000, 2000];
    let mut b: Vec<i32> = vec![-1, 1, 2, -2, 33, 40, 31, 32, -3, 1];
    while a.len() < 3000 {
        a.push(rng.next_u32() as i32 >> (rng.next_u32() % 32));
        let shift_or_divisor = match rng.next_u32() % 3 {
            0 => (rng.next_u32() % 48) as i32,
            1 => -((rng.next_u32() % 100) as i32) - 1,
            _ => rng.next_u32() as i32,
        };
        b.push(if shift_or_divisor == 0 { 5 } else { shift_or_divisor });
    }
    let n = a.len();
    let mut memory = Memory::new();
    let (a_at, b_at) = (memory.upload(&a).unwrap(), memory.upload(&b).unwrap());
    let out_at = memory.alloc(32 * n as u64, 4).unwrap();
    let launch = Launch::new([(n as u32).div_ceil(64), 1, 1], [64, 1, 1]);
    let args = [Arg::U64(out_at), Arg::U64(a_at), Arg::U64(b_at), Arg::U32(n as u32)];
    module.launch(&mut memory, "int_ops", &launch, &args).unwrap();
    let out = memory.download::<i32>(out_at, 8 * n).unwrap();
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let amount = y as u32;
        let scaled = x as f32 * f32::from_bits(0x3dcc_cccd);
        let expected = [
            x.wrapping_div(y),
            x.wrapping_rem(y),
            ((x as u32) / (y as u32)) as i32,
            if amount >= 32 { 0 } else { x << amount },
            x >> amount.min(31),
            if amount >= 32 { 0 } else { ((x as u32) >> amount) as i32 },
            scaled.round_ties_even().clamp(-128.0, 127.0) as i32,
            scaled.trunc().clamp(0.0, 65535.0) as i32,
        ];
        assert_eq!(out[8 * i..8 * i + 8], expected, "a={x} b={y}");
    }
}
