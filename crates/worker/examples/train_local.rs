//! Trains the default model in this process on a (D, P) layout and prints the loss and the
//! time of each step: `cargo run -p parcae-worker --example train_local -- [D] [P] [STEPS] [--cuda]`.

use std::time::Instant;

use parcae_cluster::{Layout, ModelSpec};
use parcae_worker::local::train_local;
use parcae_worker::{StageTrainer, data, pick_device};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cuda = args.iter().any(|a| a == "--cuda");
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (d, p, steps) =
        (*nums.first().unwrap_or(&1), *nums.get(1).unwrap_or(&1), *nums.get(2).unwrap_or(&30));
    let spec = ModelSpec::default();
    let device = pick_device(cuda);
    let layout = Layout::new(&spec, d, p)?;
    println!(
        "spec {spec:?}\nlayout {:?} on {device:?}; loss floor {:.3}",
        layout.stages,
        data::loss_floor(&spec)
    );
    let mut trainers: Vec<StageTrainer> = layout
        .slots()
        .map(|s| StageTrainer::for_slot(spec.clone(), &layout, s, device))
        .collect::<Result<_, _>>()?;
    let total = Instant::now();
    for step in 0..steps {
        let start = Instant::now();
        let run = train_local(&layout, trainers, 1)?;
        trainers = run.trainers;
        println!("step {step:3}  loss {:.4}  {:7.1} ms", run.losses[0], start.elapsed().as_secs_f64() * 1e3);
    }
    println!("{steps} steps in {:.2} s", total.elapsed().as_secs_f64());
    Ok(())
}
