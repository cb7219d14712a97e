//! Interpreter speed on the test kernels: `cargo run --release -p aotc-ptx-interp --example bench`.
//! Prints instructions per second for the tiled SGEMM (shared memory, barriers), the
//! grid-stride elementwise kernel and the row-sum reduction (shuffles), with and without
//! the race check. Only the launch is timed, by wall clock and by this thread's CPU time
//! (which is what counts on a machine shared with other work).

use std::time::Instant;

use aotc_ptx_interp::{Arg, Launch, Memory, Module};

fn kernel(name: &str) -> Module {
    let path = format!("{}/tests/kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(&path).expect("kernel file");
    Module::parse(&source).expect("kernel parses")
}

/// This thread's CPU time in seconds (Linux), if readable.
fn cpu_seconds() -> Option<f64> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanoseconds: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(nanoseconds as f64 * 1e-9)
}

/// Fills memory for a launch: the arguments.
type Setup = Box<dyn Fn(&mut Memory) -> Vec<Arg>>;

struct Case {
    label: String,
    module: Module,
    entry: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    setup: Setup,
}

fn run(case: &Case) {
    for check_races in [false, true] {
        let mut memory = Memory::new();
        let args = (case.setup)(&mut memory);
        let mut launch = Launch::new(case.grid, case.block);
        launch.check_races = check_races;
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        let stats = case.module.launch(&mut memory, case.entry, &launch, &args).expect("launch");
        let wall = wall.elapsed().as_secs_f64();
        let cpu = cpu.zip(cpu_seconds()).map_or(wall, |(start, end)| end - start);
        let per_second = |seconds: f64| stats.instructions as f64 / seconds / 1e6;
        println!(
            "{:<30} races {:<5} {:>11} instructions  wall {wall:>6.3} s {:>6.1} M/s  cpu {cpu:>6.3} s {:>6.1} M/s",
            case.label,
            check_races,
            stats.instructions,
            per_second(wall),
            per_second(cpu)
        );
    }
}

fn main() {
    let size = 256u32;
    let elements = (size * size) as usize;
    let n = 1usize << 22;
    let (rows, cols) = (512usize, 4096usize);
    let cases = [
        Case {
            label: format!("sgemm_tiled {size}x{size}x{size}"),
            module: kernel("sgemm_tiled"),
            entry: "sgemm_tiled",
            grid: [size / 16, size / 16, 1],
            block: [16, 16, 1],
            setup: Box::new(move |memory| {
                let a = memory.upload(&vec![0.5f32; elements]).unwrap();
                let b = memory.upload(&vec![0.25f32; elements]).unwrap();
                let c = memory.upload(&vec![0f32; elements]).unwrap();
                vec![Arg::U64(c), Arg::U64(a), Arg::U64(b), Arg::U32(size), Arg::U32(size)]
            }),
        },
        Case {
            label: format!("scale_relu n={n}"),
            module: kernel("elementwise_f32"),
            entry: "scale_relu",
            grid: [1024, 1, 1],
            block: [256, 1, 1],
            setup: Box::new(move |memory| {
                let x = memory.upload(&vec![1.5f32; n]).unwrap();
                let out = memory.upload(&vec![0f32; n]).unwrap();
                vec![Arg::U64(out), Arg::U64(x), Arg::S64(n as i64), Arg::F32(2.0), Arg::F32(-1.0)]
            }),
        },
        Case {
            label: format!("row_sum {rows}x{cols}"),
            module: kernel("row_sum"),
            entry: "row_sum",
            grid: [rows as u32, 1, 1],
            block: [256, 1, 1],
            setup: Box::new(move |memory| {
                let x = memory.upload(&vec![1.0f32; rows * cols]).unwrap();
                let out = memory.upload(&vec![0f32; rows]).unwrap();
                vec![Arg::U64(out), Arg::U64(x), Arg::U32(cols as u32)]
            }),
        },
    ];
    cases.iter().for_each(run);
}
