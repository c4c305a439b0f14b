//! Writes a synthetic trace (see `parcae_traces::synth`) as event CSV to stdout.
//!
//! `cargo run -p parcae-traces --example trace_synth -- SCENARIO HOURS SEED`

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scenario, hours, seed] = args.as_slice() else {
        eprintln!("usage: trace_synth SCENARIO HOURS SEED");
        std::process::exit(2);
    };
    let scenario: parcae_traces::synth::Scenario = scenario.parse().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let spec = scenario.spec(hours.parse().expect("hours"), seed.parse().expect("seed"));
    match spec.generate_csv() {
        Ok(csv) => print!("{csv}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}
