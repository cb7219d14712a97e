//! The row-sum reduction (strided partials, shfl.sync.bfly butterflies, a shared buffer
//! between warps, bar.sync): correct sums for several block sizes, and the mistakes the
//! interpreter must expose: a wrong butterfly offset gives a wrong sum, a missing
//! bar.sync is a shared-memory race.

mod common;

use aotc_ptx_interp::{Arg, ErrorKind, Launch, Memory, Module};
use common::{kernel_source, module, module_from, Rng};

/// The kernel's own order of additions, replayed in Rust.
fn reference(row: &[f32], block: usize) -> f32 {
    let mut lanes: Vec<f32> =
        (0..block).map(|t| row.iter().skip(t).step_by(block).fold(0.0f32, |acc, &x| acc + x)).collect();
    let butterfly = |warp: &mut [f32]| {
        for offset in [16, 8, 4, 2, 1] {
            let old = warp.to_vec();
            for lane in 0..32 {
                warp[lane] = old[lane] + old[lane ^ offset];
            }
        }
    };
    lanes.chunks_mut(32).for_each(butterfly);
    let mut partials: Vec<f32> = (0..32).map(|w| if w < block / 32 { lanes[32 * w] } else { 0.0 }).collect();
    butterfly(&mut partials);
    partials[0]
}

fn run_rows(
    module: &Module,
    rows: &[Vec<f32>],
    block: u32,
    check_races: bool,
) -> Result<Vec<f32>, aotc_ptx_interp::ExecError> {
    let cols = rows[0].len();
    let flat: Vec<f32> = rows.concat();
    let mut memory = Memory::new();
    let x_at = memory.upload(&flat).unwrap();
    let out_at = memory.upload(&vec![f32::NAN; rows.len()]).unwrap();
    let mut launch = Launch::new([rows.len() as u32, 1, 1], [block, 1, 1]);
    launch.check_races = check_races;
    module.launch(&mut memory, "row_sum", &launch, &[Arg::U64(out_at), Arg::U64(x_at), Arg::U32(cols as u32)])?;
    Ok(memory.download::<f32>(out_at, rows.len()).unwrap())
}

#[test]
fn row_sums_are_exact_for_several_block_sizes() {
    let module = module("row_sum");
    let mut rng = Rng::new(7);
    for block in [32u32, 64, 96, 128, 256, 1024] {
        for cols in [1usize, 31, 100, 1000, 2049] {
            let rows: Vec<Vec<f32>> = (0..3).map(|_| (0..cols).map(|_| rng.uniform(-1.0, 1.0)).collect()).collect();
            let sums = run_rows(&module, &rows, block, block <= 128).unwrap();
            for (row, &sum) in rows.iter().zip(&sums) {
                assert_eq!(sum.to_bits(), reference(row, block as usize).to_bits(), "block {block}, cols {cols}");
                let exact: f64 = row.iter().map(|&x| x as f64).sum();
                assert!((sum as f64 - exact).abs() < 1e-3, "block {block}, cols {cols}: {sum} vs {exact}");
            }
        }
    }
}

#[test]
fn a_wrong_butterfly_offset_gives_a_wrong_sum() {
    let correct = "shfl.sync.bfly.b32 %f3, %f1, 1, 31, -1;";
    let wrong = kernel_source("row_sum").replacen(correct, "shfl.sync.bfly.b32 %f3, %f1, 2, 31, -1;", 1);
    // ptxas accepts it: only executing it shows the mistake.
    let module = module_from("row_sum with a wrong offset", &wrong);
    // Integers, so every partial sum is exact; lanes' partials differ (equal partials
    // would hide a doubled offset).
    let rows = vec![(0..1000).map(|j| j as f32).collect::<Vec<f32>>(); 2];
    let sums = run_rows(&module, &rows, 256, false).unwrap();
    assert_eq!(run_rows(&common::module("row_sum"), &rows, 256, false).unwrap(), vec![499_500.0; 2]);
    assert!(sums.iter().all(|&s| s != 499_500.0), "{sums:?}");
}

#[test]
fn a_missing_bar_sync_is_a_shared_memory_race() {
    let broken = kernel_source("row_sum").replacen("    bar.sync 0;\n", "", 1);
    let module = module_from("row_sum without bar.sync", &broken);
    let rows = vec![vec![1.0f32; 300]; 2];
    let error = run_rows(&module, &rows, 128, true).unwrap_err();
    let ErrorKind::SharedRace { address, other_thread, .. } = error.kind else { panic!("{error}") };
    let site = error.site.as_ref().unwrap();
    assert!(address < 128, "{error}");
    assert_ne!(site.thread, other_thread);
    assert!(site.instruction.contains(".shared"), "{error}");
    // Without the race check it runs, to whatever answer this schedule happens to give.
    run_rows(&module, &rows, 128, false).unwrap();
}
