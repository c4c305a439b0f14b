//! Makes libtorch's shared libraries findable at run time without LD_LIBRARY_PATH.
//!
//! torch-sys (through `links = "tch"`) tells its direct dependents where libtorch lives as
//! `DEP_TCH_LIBTORCH_LIB`. We bake that directory into this package's binaries, tests and
//! examples as an rpath, expose it to the library as `PARCAE_LIBTORCH_LIB` (for
//! `parcae_worker::LIBTORCH_LIB_DIR`), and pass it on to our own dependents as
//! `DEP_PARCAE_WORKER_LIBTORCH_LIB` (through `links = "parcae-worker"`): a rustc-link-arg
//! does not propagate to other packages, so a crate whose tests or binaries link
//! parcae-worker adds the same rpath in its own build.rs (see README.md).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        // torch-sys reports it on Linux and macOS only; elsewhere set the loader path by hand.
        println!(
            "cargo::warning=torch-sys did not report libtorch's lib directory; set the loader path by hand"
        );
        println!("cargo::rustc-env=PARCAE_LIBTORCH_LIB=");
        return;
    };
    println!("cargo::rustc-link-arg=-Wl,-rpath,{lib_dir}");
    println!("cargo::rustc-env=PARCAE_LIBTORCH_LIB={lib_dir}");
    println!("cargo::metadata=libtorch_lib={lib_dir}");
}
