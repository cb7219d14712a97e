//! The tiled SGEMM (shared-memory tiles, two barriers per tile, 2-D grid and block):
//! bit-exact against the same order of fused multiply-adds in Rust, with and without
//! the race check (which must not report anything for a correct kernel).

mod common;

use aotc_ptx_interp::{Arg, Launch, Memory};
use common::{module, Rng};

#[test]
fn tiled_sgemm_is_bit_exact() {
    let module = module("sgemm_tiled");
    let (m, n, k) = (48usize, 64usize, 80usize);
    let mut rng = Rng::new(3);
    let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut expected = vec![0.0f32; m * n];
    for row in 0..m {
        for col in 0..n {
            expected[row * n + col] = (0..k).fold(0.0f32, |acc, i| a[row * k + i].mul_add(b[i * n + col], acc));
        }
    }
    for check_races in [false, true] {
        let mut memory = Memory::new();
        let (a_at, b_at) = (memory.upload(&a).unwrap(), memory.upload(&b).unwrap());
        let c_at = memory.upload(&vec![f32::NAN; m * n]).unwrap();
        let mut launch = Launch::new([(n / 16) as u32, (m / 16) as u32, 1], [16, 16, 1]);
        launch.check_races = check_races;
        let args = [Arg::U64(c_at), Arg::U64(a_at), Arg::U64(b_at), Arg::U32(n as u32), Arg::U32(k as u32)];
        let stats = module.launch(&mut memory, "sgemm_tiled", &launch, &args).unwrap();
        let c = memory.download::<f32>(c_at, m * n).unwrap();
        let mismatches = c.iter().zip(&expected).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        assert_eq!(mismatches, 0, "races checked: {check_races}");
        assert_eq!(stats.threads, (m * n) as u64);
        assert!(stats.instructions > 3 * (m * n * k) as u64);
    }
}
