//! The cluster tests link libtorch through parcae-worker (to train the
//! uninterrupted reference run in-process): find it at run time.

fn main() {
    if let Ok(dir) = std::env::var("DEP_PARCAE_WORKER_LIBTORCH_LIB") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
