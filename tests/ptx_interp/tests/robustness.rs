//! Mutated kernels (lines deleted, duplicated, swapped; numbers and registers changed;
//! text cut short) must parse or fail cleanly, and those that parse must run or fail
//! cleanly: no panics on any input.

mod common;

use aotc_ptx_interp::{Arg, Launch, Memory, Module};
use common::{kernel_source, Rng};

fn mutate(source: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = source.lines().map(str::to_string).collect();
    for _ in 0..1 + rng.next_u32() % 3 {
        let len = lines.len() as u32;
        let at = (rng.next_u32() % len) as usize;
        match rng.next_u32() % 6 {
            0 => {
                lines.remove(at);
            }
            1 => lines.insert(at, lines[at].clone()),
            2 => lines.swap(at, (rng.next_u32() % len) as usize),
            3 => {
                let numbers =
                    ["0", "1", "-1", "31", "4096", "0x7fffffff", "0xffffffffffffffff", "99999999999999999999"];
                let replacement = numbers[(rng.next_u32() as usize) % numbers.len()];
                lines[at] = replace_first_number(&lines[at], replacement);
            }
            4 => lines[at] = lines[at].replacen("%r", "%rd", 1).replacen("%f1", "%f3", 1),
            _ => {
                let line = &lines[at];
                let cut = (rng.next_u32() as usize) % (line.len() + 1);
                lines[at] = line.chars().take(cut).collect();
            }
        }
        if lines.is_empty() {
            break;
        }
    }
    lines.join("\n")
}

fn replace_first_number(line: &str, replacement: &str) -> String {
    match line.find(|c: char| c.is_ascii_digit()) {
        Some(start) => {
            let end = line[start..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(line.len(), |e| start + e);
            format!("{}{replacement}{}", &line[..start], &line[end..])
        }
        None => line.to_string(),
    }
}

fn run_every_entry(module: &Module) {
    for entry in module.entries() {
        let mut memory = Memory::new();
        let args: Vec<Arg> = module
            .params(entry)
            .unwrap()
            .iter()
            .map(|(_, ty)| match *ty {
                "u64" | "b64" => Arg::U64(memory.alloc(4096, 16).unwrap()),
                "s64" => Arg::S64(64),
                "f32" => Arg::F32(1.0),
                "f64" => Arg::F64(1.0),
                "s32" => Arg::S32(64),
                _ => Arg::U32(64),
            })
            .collect();
        let mut launch = Launch::new([2, 1, 1], [32, 1, 1]).with_race_check();
        launch.step_limit = 500;
        let _ = module.launch(&mut memory, entry, &launch, &args);
    }
}

#[test]
fn mutated_kernels_never_panic() {
    let mut rng = Rng::new(99);
    let mut parsed = 0;
    let names = ["elementwise_f32", "half", "integer", "row_sum", "faults", "sgemm_tiled"];
    for name in names {
        let source = kernel_source(name);
        for _ in 0..80 {
            let mutant = mutate(&source, &mut rng);
            if let Ok(module) = Module::parse(&mutant) {
                parsed += 1;
                run_every_entry(&module);
            }
        }
    }
    // Many mutants stay valid (a duplicated store, a changed constant): they ran.
    assert!(parsed > 100, "only {parsed} mutants parsed");
}
