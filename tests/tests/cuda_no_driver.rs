//! A library compiled for CUDA on a machine without a CUDA driver: it loads (nothing CUDA
//! is linked), and creating an instance fails with AOTC_ERR_DEVICE saying why. The
//! driver is looked up at $AOTC_CUDA_DRIVER, pointed here at a file that does not exist,
//! so the test means the same on a machine that has a GPU.

use aotc_abi::status;
use aotc_runtime::{Device, Model};
use aotc_tests::fixture;
use std::process::Command;

#[test]
fn a_cuda_library_without_a_driver_fails_create_with_device_and_a_reason() {
    // SAFETY (set_var): this test binary has this one test; nothing reads the environment
    // concurrently.
    std::env::set_var("AOTC_CUDA_DRIVER", "/nonexistent/libcuda.so.1");
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("model.so");
    let opts = aotc::CompileOptions { device: aotc::Target::Cuda, ..Default::default() };
    aotc::compile(&fixture("transformer_block").join("model.pt2"), &so, &opts).expect("compiles for CUDA");

    let e = Model::load(&so, Device::Cuda(0)).err().expect("no driver");
    assert_eq!(e.code, status::DEVICE, "{e}");
    assert!(
        e.message.contains("no CUDA driver on this machine") && e.message.contains("/nonexistent/libcuda.so.1"),
        "{e}"
    );
    let e = Model::load(&so, Device::Cpu).err().expect("a CUDA library refuses the CPU");
    assert_eq!(e.code, status::DEVICE, "{e}");
    assert!(e.message.contains("this library was compiled for CUDA; got \"cpu\""), "{e}");

    // Everything CUDA is opened at run time: the library needs no more than a CPU one.
    let out = Command::new("readelf").args(["-d", "-W"]).arg(&so).output().expect("readelf (binutils) is installed");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .map(|l| l.rsplit('[').next().unwrap().trim_end_matches(']'))
        .collect();
    let allowed = ["libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "ld-linux-x86-64.so.2"];
    assert!(needed.iter().all(|n| allowed.contains(n)), "unexpected NEEDED entries: {needed:?}");
}
