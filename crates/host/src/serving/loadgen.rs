//! The load generator: real HTTP clients against the completions API, at Gamma-distributed
//! arrival times, measuring what a user sees.
//!
//! Why: the serving simulator ([`parcae_serve_sim`]) predicts latencies under spot
//! preemptions; this measures them on the real front end and engine, with the same arrival
//! process ([`parcae_serve_sim::gamma_arrivals`]: rate and true coefficient of variation,
//! seeded), so the two can be compared. `parcae-host loadgen` runs it against any server
//! speaking the API; `parcae-host serve --load-rate` runs it against itself.
//!
//! Every request is streamed (`"stream": true`), so each one yields its time to first token
//! (TTFT) and its end-to-end latency (E2E, to `data: [DONE]`), both measured from the moment
//! the client sends it. Requests are sent at their arrival times whether or not earlier
//! ones have finished (an open loop: a slow server does not slow the load down). A request
//! refused with 503 is counted as *rejected* and not retried, even when the server says when
//! to retry: retrying would shift load to later arrivals and hide the refusal from the
//! latency figures, while a rejection count says plainly how much load the server turned
//! away (during a pause for lack of instances, say).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use comfy_table::{CellAlignment, Table, presets};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};

use super::tokenizer;

/// What load to generate, and against what.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSpec {
    /// The server: its base URL (`http://127.0.0.1:8000`) or the completions URL itself.
    pub url: String,
    /// Mean arrival rate, requests per second.
    pub rate: f64,
    /// Coefficient of variation of the inter-arrival times (1: Poisson).
    pub cv: f64,
    /// Most requests to send (`usize::MAX`: no bound but `duration`).
    pub requests: usize,
    /// Send no request after this long (`Duration::MAX`: no bound but `requests`).
    pub duration: Duration,
    /// Without `prompt`: each request's prompt is this many random token ids (seeded).
    pub prompt_tokens: usize,
    /// Every request's prompt text, instead of random token ids.
    pub prompt: Option<String>,
    /// Tokens each request asks for.
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy); sampled requests get seeds derived from `seed`.
    pub temperature: f64,
    /// The model's vocabulary size (random prompt tokens are below it).
    pub vocab: usize,
    /// Seed of the arrivals, the prompts and the sampling seeds.
    pub seed: u64,
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    /// Every token arrived and the stream ended with a finish reason and `[DONE]`.
    Completed,
    /// The server answered 503 (not retried).
    Rejected,
    /// Anything else: another error status, a failure mid-stream, a broken connection.
    Failed,
}

/// One request as the client saw it (a row of the CSV).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    /// Its number, in arrival order from 0.
    pub id: usize,
    /// When it was sent, seconds from the start of the load.
    pub sent_at_s: f64,
    /// Time to its first token, seconds (none without a token).
    pub ttft_s: Option<f64>,
    /// Time to the end of its stream, seconds (completed requests only).
    pub e2e_s: Option<f64>,
    /// Tokens received.
    pub tokens: usize,
    /// HTTP status (0: no response).
    pub status: u16,
    /// How it ended.
    pub outcome: RequestOutcome,
    /// Why it did not complete: the server's error message, or the client's.
    pub error: Option<String>,
}

/// P50, P90, P99 (nearest rank) and the maximum of some latencies, seconds (NaN, written
/// `null` in JSON, when there are none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// The percentiles of `values` (any order).
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Percentiles {
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Nearest-rank percentile `p` (0 to 100) of ascending `sorted`; NaN when empty. The same
/// rule as the serving simulator's summaries, so measured and simulated figures compare.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The whole load's figures. `requests = completed + rejected + failed`; latencies are of
/// completed requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Requests sent.
    pub requests: usize,
    /// Requests completed.
    pub completed: usize,
    /// Requests refused with 503.
    pub rejected: usize,
    /// Requests failed otherwise.
    pub failed: usize,
    /// Tokens received, all requests.
    pub tokens: usize,
    /// From the start of the load to the end of its last request, seconds.
    pub duration_s: f64,
    /// Completed requests per second of `duration_s`.
    pub throughput_rps: f64,
    /// Tokens received per second of `duration_s`.
    pub tokens_per_s: f64,
    /// Time to first token.
    pub ttft: Percentiles,
    /// End to end.
    pub e2e: Percentiles,
}

impl LatencySummary {
    /// The summary of `rows` over `duration_s` seconds.
    pub fn of(rows: &[RequestRow], duration_s: f64) -> Self {
        let count = |o: RequestOutcome| rows.iter().filter(|r| r.outcome == o).count();
        let done = || rows.iter().filter(|r| r.outcome == RequestOutcome::Completed);
        let ttft: Vec<f64> = done().filter_map(|r| r.ttft_s).collect();
        let e2e: Vec<f64> = done().filter_map(|r| r.e2e_s).collect();
        let completed = count(RequestOutcome::Completed);
        let tokens = rows.iter().map(|r| r.tokens).sum();
        let per_s = |n: usize| if duration_s > 0.0 { n as f64 / duration_s } else { f64::NAN };
        LatencySummary {
            requests: rows.len(),
            completed,
            rejected: count(RequestOutcome::Rejected),
            failed: count(RequestOutcome::Failed),
            tokens,
            duration_s,
            throughput_rps: per_s(completed),
            tokens_per_s: per_s(tokens),
            ttft: Percentiles::of(&ttft),
            e2e: Percentiles::of(&e2e),
        }
    }
}

/// What a load run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    /// Every request, in arrival order.
    pub rows: Vec<RequestRow>,
    /// Their figures.
    pub summary: LatencySummary,
}

impl LoadReport {
    /// Writes the rows as CSV (`id,sent_at_s,ttft_s,e2e_s,tokens,status,outcome,error`).
    pub fn write_csv(&self, path: &Path) -> anyhow::Result<()> {
        let mut writer =
            csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
        for row in &self.rows {
            writer.serialize(row).with_context(|| format!("writing {}", path.display()))?;
        }
        writer.flush().with_context(|| format!("writing {}", path.display()))
    }

    /// Writes the report (rows and summary) as JSON.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }

    /// The summary as a table: counts, TTFT and E2E percentiles, throughput.
    pub fn table(&self) -> String {
        let s = &self.summary;
        let secs = |v: f64| if v.is_finite() { format!("{v:.3}") } else { "-".into() };
        let mut table = Table::new();
        table.load_preset(presets::UTF8_BORDERS_ONLY);
        table.set_header(vec![
            "requests",
            "completed",
            "rejected (503)",
            "failed",
            "TTFT P50 s",
            "TTFT P90 s",
            "TTFT P99 s",
            "E2E P50 s",
            "E2E P90 s",
            "E2E P99 s",
            "req/s",
            "tokens/s",
        ]);
        table.add_row(vec![
            s.requests.to_string(),
            s.completed.to_string(),
            s.rejected.to_string(),
            s.failed.to_string(),
            secs(s.ttft.p50),
            secs(s.ttft.p90),
            secs(s.ttft.p99),
            secs(s.e2e.p50),
            secs(s.e2e.p90),
            secs(s.e2e.p99),
            format!("{:.2}", s.throughput_rps),
            format!("{:.1}", s.tokens_per_s),
        ]);
        for column in 0..12 {
            if let Some(c) = table.column_mut(column) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        table.to_string()
    }
}

/// Checks a spec before any request goes out.
fn validate(spec: &LoadSpec) -> anyhow::Result<()> {
    anyhow::ensure!(spec.rate.is_finite() && spec.rate > 0.0, "rate {}: must be a number > 0", spec.rate);
    anyhow::ensure!(spec.cv.is_finite() && spec.cv > 0.0, "cv {}: must be a number > 0", spec.cv);
    anyhow::ensure!(spec.requests > 0, "requests: must be at least 1");
    anyhow::ensure!(!spec.duration.is_zero(), "duration: must be more than 0 s");
    anyhow::ensure!(spec.max_tokens >= 1, "max_tokens: must be at least 1");
    anyhow::ensure!(
        spec.temperature.is_finite() && spec.temperature >= 0.0,
        "temperature {}: must be a number >= 0",
        spec.temperature
    );
    match &spec.prompt {
        Some(text) => {
            let tokens = tokenizer::encode(text).map_err(|e| anyhow::anyhow!("prompt: {e}"))?;
            anyhow::ensure!(!tokens.is_empty(), "prompt: empty");
        }
        None => {
            anyhow::ensure!(spec.prompt_tokens >= 1, "prompt_tokens: must be at least 1");
            anyhow::ensure!(spec.vocab >= 1, "vocab: must be at least 1");
        }
    }
    Ok(())
}

/// The arrival times, seconds from the start: Gamma renewal arrivals within `duration`,
/// the first `requests` of them. Without a duration bound, arrivals are drawn over longer
/// and longer windows until there are `requests` (the same seed gives the same prefix).
pub fn arrival_times(spec: &LoadSpec) -> anyhow::Result<Vec<f64>> {
    let limit_ms = spec.duration.as_secs_f64() * 1000.0;
    let bounded = limit_ms * spec.rate / 1000.0 <= parcae_serve_sim::MAX_ARRIVALS / 2.0;
    anyhow::ensure!(
        bounded || spec.requests != usize::MAX,
        "the load has no end: bound it by a number of requests or a duration"
    );
    let mut window_ms = if bounded {
        limit_ms
    } else {
        (spec.requests as f64 / spec.rate * 1000.0 * 1.5 + 10_000.0).min(limit_ms)
    };
    loop {
        let mut times = parcae_serve_sim::gamma_arrivals(spec.rate, spec.cv, window_ms, spec.seed)
            .map_err(|e| anyhow::anyhow!("arrivals: {e}"))?;
        if times.len() >= spec.requests || window_ms >= limit_ms {
            times.truncate(spec.requests);
            return Ok(times.into_iter().map(|t| t / 1000.0).collect());
        }
        window_ms = (window_ms * 2.0).min(limit_ms);
    }
}

/// SplitMix64: the prompts' and sampling seeds' generator (tiny and reproducible).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The JSON body of request `i`: the fixed text prompt, or `prompt_tokens` token ids drawn
/// from `(seed, i)`.
pub fn request_body(spec: &LoadSpec, i: usize) -> Value {
    let stream_seed = mix(spec.seed ^ mix(i as u64));
    let prompt = match &spec.prompt {
        Some(text) => json!(text),
        None => {
            let vocab = spec.vocab.max(1) as u64;
            let tokens: Vec<i64> = (0..spec.prompt_tokens as u64)
                .map(|k| (mix(stream_seed.wrapping_add(k)) % vocab) as i64)
                .collect();
            json!(tokens)
        }
    };
    let mut body = json!({
        "prompt": prompt,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "stream": true,
    });
    if spec.temperature > 0.0 {
        body["seed"] = json!(mix(stream_seed ^ 0x5EED));
    }
    body
}

/// The completions URL of `url` (a base URL, or that URL itself).
pub fn completions_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v1/completions") { url.to_string() } else { format!("{url}/v1/completions") }
}

/// Sends the load and waits for every request to end.
pub async fn run_load(spec: &LoadSpec) -> anyhow::Result<LoadReport> {
    validate(spec)?;
    let arrivals = arrival_times(spec)?;
    // Loopback clients: no proxy from the environment, a connection per request in flight.
    let client = reqwest::Client::builder().no_proxy().build().context("building the HTTP client")?;
    let url = completions_url(&spec.url);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    for (i, &at) in arrivals.iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_secs_f64(at)).await;
        let request = client.post(&url).json(&request_body(spec, i));
        let origin = start.into_std();
        tasks.push(tokio::spawn(async move { one_request(request, i, origin).await }));
    }
    let mut rows = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.into_iter().enumerate() {
        let row = task.await.unwrap_or_else(|e| RequestRow {
            id: i,
            sent_at_s: arrivals[i],
            ttft_s: None,
            e2e_s: None,
            tokens: 0,
            status: 0,
            outcome: RequestOutcome::Failed,
            error: Some(format!("the client task failed: {e}")),
        });
        rows.push(row);
    }
    let duration_s = start.elapsed().as_secs_f64();
    let summary = LatencySummary::of(&rows, duration_s);
    Ok(LoadReport { rows, summary })
}

/// A closed loop instead of arrivals: `clients` clients each send a request, read its stream
/// to the end and send the next, until `spec.duration` has passed or `spec.requests` were
/// sent (`spec.rate` and `spec.cv` are not used). What a server sustains at a fixed
/// concurrency, e.g. to profile it with every replica kept busy. A client refused with 503
/// waits 10 ms before its next request.
pub async fn run_closed_loop(spec: &LoadSpec, clients: usize) -> anyhow::Result<LoadReport> {
    validate(&LoadSpec { rate: 1.0, cv: 1.0, ..spec.clone() })?;
    anyhow::ensure!(clients >= 1, "clients: must be at least 1");
    let client = reqwest::Client::builder().no_proxy().build().context("building the HTTP client")?;
    let url = completions_url(&spec.url);
    let start = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (client, url, next, spec) = (client.clone(), url.clone(), next.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            let mut rows = Vec::new();
            while start.elapsed() < spec.duration {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= spec.requests {
                    break;
                }
                let row = one_request(client.post(&url).json(&request_body(&spec, i)), i, start).await;
                if row.outcome == RequestOutcome::Rejected {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                rows.push(row);
            }
            rows
        }));
    }
    let mut rows = Vec::new();
    for task in tasks {
        rows.extend(task.await.context("a load client failed")?);
    }
    rows.sort_by_key(|r| r.id);
    let summary = LatencySummary::of(&rows, start.elapsed().as_secs_f64());
    Ok(LoadReport { rows, summary })
}

/// Sends one request and reads its stream.
async fn one_request(request: reqwest::RequestBuilder, id: usize, origin: Instant) -> RequestRow {
    let sent = Instant::now();
    let mut row = RequestRow {
        id,
        sent_at_s: sent.duration_since(origin).as_secs_f64(),
        ttft_s: None,
        e2e_s: None,
        tokens: 0,
        status: 0,
        outcome: RequestOutcome::Failed,
        error: None,
    };
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            row.error = Some(format!("sending: {e}"));
            return row;
        }
    };
    let status = response.status();
    row.status = status.as_u16();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        row.error = Some(error_message(&text).unwrap_or_else(|| format!("HTTP {status}: {text}")));
        if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            row.outcome = RequestOutcome::Rejected;
        }
        return row;
    }
    let mut decoder = SseDecoder::default();
    let mut body = response.bytes_stream();
    let mut finished = false;
    let mut done = false;
    'read: while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                row.error = Some(format!("reading the stream: {e}"));
                break;
            }
        };
        for data in decoder.push(&chunk) {
            if data == "[DONE]" {
                done = true;
                break 'read;
            }
            let value: Value = match serde_json::from_str(&data) {
                Ok(v) => v,
                Err(e) => {
                    row.error = Some(format!("an event is not JSON ({e}): {data}"));
                    continue;
                }
            };
            if let Some(message) = error_message_of(&value) {
                row.error = Some(message);
                continue;
            }
            let choice = &value["choices"][0];
            let n = choice["token_ids"].as_array().map_or_else(
                || usize::from(choice["text"].as_str().is_some_and(|t| !t.is_empty())),
                Vec::len,
            );
            if n > 0 && row.ttft_s.is_none() {
                row.ttft_s = Some(sent.elapsed().as_secs_f64());
            }
            row.tokens += n;
            finished |= !choice["finish_reason"].is_null();
        }
    }
    if done && finished && row.error.is_none() {
        row.e2e_s = Some(sent.elapsed().as_secs_f64());
        row.outcome = RequestOutcome::Completed;
    } else if row.error.is_none() {
        row.error = Some(if done {
            "the stream ended without a finish reason".into()
        } else {
            "the stream ended without [DONE]".into()
        });
    }
    row
}

/// The `error.message` of an error body, if `text` is one.
fn error_message(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text).ok().as_ref().and_then(error_message_of)
}

fn error_message_of(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    Some(error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_string))
}

/// Splits a server-sent event stream into the data of its events, however the bytes
/// arrive (comments, like keep-alives, and other fields are skipped).
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
}

impl SseDecoder {
    /// Feeds bytes; returns the data of every event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some((end, len)) = event_end(&self.buffer) {
            let raw: Vec<u8> = self.buffer.drain(..end + len).collect();
            let text = String::from_utf8_lossy(&raw[..end]);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                events.push(data.join("\n"));
            }
        }
        events
    }
}

/// Where the first blank line (the end of an event) starts in `buffer`, and its length.
fn event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LoadSpec {
        LoadSpec {
            url: "http://127.0.0.1:1".into(),
            rate: 50.0,
            cv: 1.0,
            requests: 20,
            duration: Duration::MAX,
            prompt_tokens: 5,
            prompt: None,
            max_tokens: 4,
            temperature: 0.0,
            vocab: 64,
            seed: 3,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = Percentiles::of(&values);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        let one = Percentiles::of(&[0.25]);
        assert_eq!((one.p50, one.p99), (0.25, 0.25));
        assert!(Percentiles::of(&[]).p50.is_nan());
    }

    #[test]
    fn arrivals_stop_at_the_first_bound() {
        let by_count = arrival_times(&spec()).unwrap();
        assert_eq!(by_count.len(), 20);
        assert!(by_count.windows(2).all(|w| w[0] <= w[1]));
        // Same seed, same times; the count bound is a prefix of a longer run.
        let longer = arrival_times(&LoadSpec { requests: 40, ..spec() }).unwrap();
        assert_eq!(&longer[..20], &by_count[..]);
        let by_time =
            arrival_times(&LoadSpec { requests: usize::MAX, duration: Duration::from_millis(200), ..spec() })
                .unwrap();
        assert!(by_time.iter().all(|&t| t < 0.2) && by_time.len() < 40, "{by_time:?}");
        let endless = LoadSpec { requests: usize::MAX, ..spec() };
        assert!(arrival_times(&endless).is_err());
    }

    #[test]
    fn bodies_are_seeded_and_streamed() {
        let a = request_body(&spec(), 0);
        assert_eq!(a, request_body(&spec(), 0));
        assert_ne!(a["prompt"], request_body(&spec(), 1)["prompt"]);
        assert_eq!(a["stream"], true);
        let tokens = a["prompt"].as_array().unwrap();
        assert_eq!(tokens.len(), 5);
        assert!(tokens.iter().all(|t| (0..64).contains(&t.as_i64().unwrap())));
        assert!(a.get("seed").is_none());
        let sampled = request_body(&LoadSpec { temperature: 0.7, prompt: Some("hi".into()), ..spec() }, 2);
        assert_eq!(sampled["prompt"], "hi");
        assert!(sampled["seed"].is_u64());
        assert_eq!(completions_url("http://h:1/"), "http://h:1/v1/completions");
        assert_eq!(completions_url("http://h:1/v1/completions"), "http://h:1/v1/completions");
    }

    #[test]
    fn sse_decoding_survives_any_split() {
        let stream = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: two\r\ndata: lines\r\n\r\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut d = SseDecoder::default();
            let mut got = d.push(&stream[..split]);
            got.extend(d.push(&stream[split..]));
            assert_eq!(got, ["{\"a\":1}", "two\nlines", "[DONE]"], "split at {split}");
        }
    }

    #[test]
    fn summaries_count_outcomes_and_take_latencies_of_completed_requests() {
        let row = |id, outcome, e2e: Option<f64>| RequestRow {
            id,
            sent_at_s: id as f64,
            ttft_s: e2e.map(|e| e / 2.0),
            e2e_s: e2e,
            tokens: if e2e.is_some() { 4 } else { 0 },
            status: if outcome == RequestOutcome::Rejected { 503 } else { 200 },
            outcome,
            error: None,
        };
        let rows = vec![
            row(0, RequestOutcome::Completed, Some(1.0)),
            row(1, RequestOutcome::Completed, Some(3.0)),
            row(2, RequestOutcome::Rejected, None),
            row(3, RequestOutcome::Failed, None),
        ];
        let s = LatencySummary::of(&rows, 2.0);
        assert_eq!((s.requests, s.completed, s.rejected, s.failed, s.tokens), (4, 2, 1, 1, 8));
        assert_eq!((s.e2e.p50, s.e2e.p99, s.ttft.p50), (1.0, 3.0, 0.5));
        assert_eq!((s.throughput_rps, s.tokens_per_s), (1.0, 4.0));
        let report = LoadReport { rows, summary: s };
        let table = report.table();
        assert!(table.contains("rejected (503)") && table.contains("E2E P99 s"), "{table}");
        let json: Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rows"][2]["outcome"], "rejected");
        assert!(json["summary"]["e2e"]["p90"].is_number());
    }
}
