//! `parcae-host loadgen`: drive an OpenAI-compatible completions server (`parcae-host
//! serve`, or any other) with Gamma-distributed streamed requests and report what clients
//! saw: time to first token, end-to-end latency, rejections, throughput.
//!
//! Why a subcommand: `serve --load-rate` measures a replay from inside; this measures a
//! server from outside, as many times and at as many rates as one likes, with the same
//! seeded arrivals each time. The work is [`crate::serving::loadgen`]'s.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::serving::loadgen::{LoadSpec, completions_url, run_load};

/// Requests sent when neither `--requests` nor `--duration` is given.
pub const DEFAULT_REQUESTS: usize = 100;

/// Options of `parcae-host loadgen`.
#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// The server's base URL (or its /v1/completions URL).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// Mean arrival rate, requests per second.
    #[arg(long, default_value_t = 1.0, value_name = "REQ/S")]
    pub rate: f64,
    /// Coefficient of variation of the Gamma inter-arrival times (1: Poisson).
    #[arg(long, default_value_t = 1.0)]
    pub cv: f64,
    /// Send at most this many requests (default: 100 when --duration is not given either).
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// Send requests for at most this long, seconds (whichever bound comes first).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Each prompt is this many random token ids (seeded).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub prompt_tokens: usize,
    /// Every prompt is this text instead (the server's character tokenizer reads it).
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_tokens")]
    pub prompt: Option<String>,
    /// Tokens each request asks for.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy); sampled requests get seeds derived from --seed.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// The model's vocabulary size, for random prompts (default: asked of the server's
    /// /v1/models).
    #[arg(long, value_name = "N")]
    pub vocab: Option<usize>,
    /// Seed of the arrivals, the prompts and the sampling seeds.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write one row per request (id, sent_at_s, ttft_s, e2e_s, tokens, status, outcome,
    /// error) as CSV here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the report (rows and summary) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `parcae-host loadgen`.
pub fn run(args: &LoadgenArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &LoadgenArgs) -> anyhow::Result<()> {
    let duration = match args.duration {
        Some(s) => {
            anyhow::ensure!(s.is_finite() && s > 0.0, "--duration {s}: must be a number > 0");
            Duration::from_secs_f64(s)
        }
        None => Duration::MAX,
    };
    let requests = match (args.requests, args.duration) {
        (Some(n), _) => {
            anyhow::ensure!(n >= 1, "--requests must be at least 1");
            n
        }
        (None, Some(_)) => usize::MAX,
        (None, None) => DEFAULT_REQUESTS,
    };
    let vocab = match (args.vocab, &args.prompt) {
        (Some(v), _) => v,
        (None, Some(_)) => 0,
        (None, None) => server_vocab(&args.url).await?,
    };
    let spec = LoadSpec {
        url: args.url.clone(),
        rate: args.rate,
        cv: args.cv,
        requests,
        duration,
        prompt_tokens: args.prompt_tokens,
        prompt: args.prompt.clone(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        vocab,
        seed: args.seed,
    };
    println!("load: {} req/s (cv {}) at {}", args.rate, args.cv, completions_url(&args.url));
    let report = run_load(&spec).await?;
    println!("{}", report.table());
    let not_completed = report.rows.iter().filter(|r| r.error.is_some());
    if let Some(row) = not_completed.clone().next() {
        let error = row.error.as_deref().unwrap_or_default();
        println!("{} requests did not complete; the first (#{}): {error}", not_completed.count(), row.id);
    }
    if let Some(path) = &args.csv {
        report.write_csv(path)?;
        println!("per-request rows: {}", path.display());
    }
    if let Some(path) = &args.json {
        report.write_json(path)?;
        println!("report: {}", path.display());
    }
    Ok(())
}

/// The vocabulary of the server's first model (the `vocab` extension of its /v1/models).
async fn server_vocab(url: &str) -> anyhow::Result<usize> {
    let base = completions_url(url);
    let models = format!("{}/models", base.trim_end_matches("/completions"));
    let client = reqwest::Client::builder().no_proxy().build()?;
    let body: serde_json::Value = client
        .get(&models)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("asking {models} for the model's vocabulary (or give --vocab)"))?
        .json()
        .await
        .with_context(|| format!("reading {models}"))?;
    body["data"][0]["vocab"]
        .as_u64()
        .map(|v| v as usize)
        .filter(|&v| v > 0)
        .ok_or_else(|| anyhow::anyhow!("{models} does not say the model's vocabulary: give --vocab"))
}
