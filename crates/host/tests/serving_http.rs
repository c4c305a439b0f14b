//! The serving front end over real HTTP on loopback: the completions API (plain and
//! streamed), its refusals, the engine's status, and the load generator against it.
//!
//! Why a stand-in engine: these tests are about the HTTP layer and its channel contract
//! ([`parcae_host::serving::api`]), not about the workers; a small task that answers each
//! job with its prompt reversed (a few milliseconds per token) keeps them quick and exact.
//! Prompts starting with a magic token make it fail: [`FAIL_RETRY`] before any token with
//! a retry hint, [`FAIL_HARD`] before any token without one, [`FAIL_MID`] after two tokens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parcae_host::serving::api::{
    CompletionJob, EngineHandle, EngineStatus, FinishReason, JobEvent, ModelCard,
};
use parcae_host::serving::http::{HttpStats, serve_http_with_stats};
use parcae_host::serving::loadgen::{LoadSpec, RequestOutcome, SseDecoder, run_load};
use parcae_host::serving::tokenizer;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

/// First prompt token that makes the stand-in fail before any token, retry in 7 s.
const FAIL_RETRY: i64 = 100;
/// First prompt token that makes it fail before any token, with no retry hint.
const FAIL_HARD: i64 = 101;
/// First prompt token that makes it fail after two tokens.
const FAIL_MID: i64 = 102;

const MODEL: &str = "test-gpt";

struct Server {
    base: String,
    status: watch::Sender<EngineStatus>,
    stats: Arc<HttpStats>,
    jobs: mpsc::Sender<CompletionJob>,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Jobs nobody answers (the engine of [`Server::start`] with `engine = false`).
    _unread: Option<mpsc::Receiver<CompletionJob>>,
}

impl Server {
    /// The front end on 127.0.0.1:0 over a model of vocabulary 128 and context 32, with the
    /// stand-in engine (or, without `engine`, a queue of `capacity` nobody reads).
    async fn start(engine: bool, capacity: usize) -> Server {
        let (jobs, rx) = mpsc::channel(capacity);
        let (status, status_rx) = watch::channel(EngineStatus::Ready);
        let handle = EngineHandle {
            jobs: jobs.clone(),
            status: status_rx,
            model: ModelCard { id: MODEL.into(), vocab: 128, context: 32, owned_by: "tests".into() },
        };
        let unread = if engine {
            tokio::spawn(stand_in(rx));
            None
        } else {
            Some(rx)
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stats = Arc::new(HttpStats::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve_http_with_stats(listener, handle, stats.clone(), async {
            let _ = stopped.await;
        }));
        Server { base, status, stats, jobs, stop: Some(stop), served, _unread: unread }
    }

    async fn post(&self, body: &str) -> reqwest::Response {
        client()
            .post(format!("{}/v1/completions", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        client().get(format!("{}{path}", self.base)).send().await.unwrap()
    }

    /// Stops the server; it must return within a second.
    async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let served = tokio::time::timeout(Duration::from_secs(1), &mut self.served).await;
        served.expect("the server stops on its shutdown signal").unwrap().unwrap();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The stand-in engine: each job answered on its own task.
async fn stand_in(mut jobs: mpsc::Receiver<CompletionJob>) {
    while let Some(job) = jobs.recv().await {
        tokio::spawn(answer(job));
    }
}

/// The prompt reversed (repeated as needed), 2 ms a token; or a failure for magic prompts.
async fn answer(job: CompletionJob) {
    let send = |e| {
        let _ = job.events.send(e);
    };
    match job.prompt[0] {
        FAIL_RETRY => {
            return send(JobEvent::Failed {
                message: "no replica holds the model".into(),
                retry_after_s: Some(7),
            });
        }
        FAIL_HARD => {
            return send(JobEvent::Failed { message: "the worker crashed".into(), retry_after_s: None });
        }
        _ => {}
    }
    let reversed: Vec<i64> = job.prompt.iter().rev().copied().collect();
    for (i, &t) in reversed.iter().cycle().take(job.max_tokens).enumerate() {
        if job.prompt[0] == FAIL_MID && i == 2 {
            return send(JobEvent::Failed {
                message: "the replica was preempted".into(),
                retry_after_s: None,
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        send(JobEvent::Token(t));
    }
    send(JobEvent::Done { reason: FinishReason::Length });
}

/// The data of each event of an SSE body, checking the framing: `data: ...` events each
/// ended by a blank line.
fn sse_events(body: &str) -> Vec<String> {
    assert!(body.ends_with("\n\n"), "{body:?}");
    let mut decoder = SseDecoder::default();
    let events = decoder.push(body.as_bytes());
    let framed: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(framed.len(), events.len(), "{body:?}");
    for e in framed {
        assert!(e.starts_with("data: ") && !e.contains('\n'), "one data line per event: {e:?}");
    }
    events
}

#[tokio::test]
async fn completions_answer_with_text_and_token_ids() {
    let server = Server::start(true, 16).await;
    let response = server.post(r#"{"model": "test-gpt", "prompt": "hello", "max_tokens": 5}"#).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"), "{body}");
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["model"], MODEL);
    assert!(body["created"].as_u64().unwrap() > 1_600_000_000);
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], "olleh");
    assert_eq!(
        (&choice["index"], &choice["logprobs"], &choice["finish_reason"]),
        (&json!(0), &json!(null), &json!("length"))
    );
    assert_eq!(choice["token_ids"], json!(tokenizer::encode("olleh").unwrap()));
    assert_eq!(body["usage"], json!({"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}));

    // Token ids in, beyond the alphabet too: the text renders them and parses back.
    let response = server.post(r#"{"prompt": [1, 99, 2], "max_tokens": 4}"#).await;
    let body: Value = response.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["token_ids"], json!([2, 99, 1, 2]));
    assert_eq!(choice["text"], "b<|99|>ab");
    assert_eq!(tokenizer::encode(choice["text"].as_str().unwrap()).unwrap(), [2, 99, 1, 2]);
    // ... and the text works as a prompt again.
    let text = choice["text"].as_str().unwrap();
    let again: Value =
        server.post(&json!({"prompt": text, "max_tokens": 4}).to_string()).await.json().await.unwrap();
    assert_eq!(again["choices"][0]["token_ids"], json!([2, 1, 99, 2]));
    assert_eq!(again["usage"]["prompt_tokens"], 4);
    let counts = server.stats.counts();
    assert_eq!((counts.accepted, counts.completed, counts.failed), (3, 3, 0));
    server.shut_down().await;
}

#[tokio::test]
async fn streams_are_server_sent_events_ending_in_done() {
    let server = Server::start(true, 16).await;
    let plain: Value =
        server.post(r#"{"prompt": "stream me", "max_tokens": 12}"#).await.json().await.unwrap();
    let response = server.post(r#"{"prompt": "stream me", "max_tokens": 12, "stream": true}"#).await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 12 + 2, "a chunk per token, the finish, [DONE]: {events:?}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..13].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let mut text = String::new();
    let mut ids = Vec::new();
    for chunk in &chunks[..12] {
        let choice = &chunk["choices"][0];
        assert_eq!(chunk["object"], "text_completion");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert!(choice["finish_reason"].is_null(), "{chunk}");
        assert_eq!(choice["token_ids"].as_array().unwrap().len(), 1);
        assert_eq!(
            tokenizer::decode(&[choice["token_ids"][0].as_i64().unwrap()]),
            choice["text"].as_str().unwrap()
        );
        text.push_str(choice["text"].as_str().unwrap());
        ids.push(choice["token_ids"][0].clone());
    }
    let last = &chunks[12];
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["choices"][0]["text"], "");
    assert_eq!(last["usage"]["completion_tokens"], 12);
    assert_eq!(text, plain["choices"][0]["text"].as_str().unwrap());
    assert_eq!(json!(ids), plain["choices"][0]["token_ids"]);
    assert_eq!(text, "em maertsem ");
    server.shut_down().await;
}

#[tokio::test]
async fn bad_requests_are_400s_naming_their_field() {
    let server = Server::start(true, 16).await;
    let cases = [
        (r#"{"prompt": "hi""#, "body", "line 1 column"),
        (r#"{"prompt": "hi", "max_tokens": "many"}"#, "max_tokens", "line 1 column"),
        (r#"{"prompt": "hi", "temperature": "hot"}"#, "temperature", "invalid type"),
        (r#"{"prompt": "hi", "max_tokens": 0}"#, "max_tokens", "at least 1"),
        (r#"{"prompt": "hi", "n": 3}"#, "n", "only n = 1"),
        (r#"{"prompt": "hi", "echo": true}"#, "echo", "echo"),
        (r#"{"prompt": "hi", "stop": "\n"}"#, "stop", "stop is not supported"),
        (r#"{"prompt": "hi", "logprobs": 5}"#, "logprobs", "logprobs is not supported"),
        (r#"{"prompt": "hi", "top_p": 0.5}"#, "top_p", "top_p is not supported"),
        (r#"{"prompt": "hi", "mystery": 1}"#, "mystery", "unknown field `mystery`"),
        (r#"{"prompt": ["one", "two"]}"#, "prompt", "only one prompt per request"),
        (r#"{"prompt": [1, 128]}"#, "prompt", "prompt[1] = 128"),
        (r#"{"prompt": "caf\u00e9"}"#, "prompt", "'é' at byte 3"),
        (r#"{"prompt": ""}"#, "prompt", "empty"),
        (r#"{"max_tokens": 3}"#, "prompt", "required"),
        (
            r#"{"prompt": "hello", "max_tokens": 30}"#,
            "max_tokens",
            "context is 32 tokens, but the prompt (5 tokens) plus max_tokens (30)",
        ),
        (r#"{"prompt": "hi", "temperature": 3}"#, "temperature", "between 0 and 2"),
    ];
    for (body, param, needle) in cases {
        let response = server.post(body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let error = &error["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}: {error}");
        assert_eq!(error["param"], param, "{body}: {error}");
        assert!(error["message"].as_str().unwrap().contains(needle), "{body}: {error}");
        assert!(error["code"].is_string(), "{body}: {error}");
    }
    // Harmless fields pass.
    let ok = server
        .post(r#"{"prompt": "hi", "max_tokens": 2, "n": 1, "echo": false, "user": "u", "stop": null}"#)
        .await;
    assert_eq!(ok.status(), 200);
    // Another model: 404.
    let response = server.post(r#"{"model": "gpt-4", "prompt": "hi"}"#).await;
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        (&error["error"]["code"], &error["error"]["param"]),
        (&json!("model_not_found"), &json!("model"))
    );
    let counts = server.stats.counts();
    assert_eq!((counts.invalid, counts.accepted), (cases.len() as u64 + 1, 1));
    server.shut_down().await;
}

#[tokio::test]
async fn an_engine_that_cannot_serve_answers_503() {
    let server = Server::start(true, 16).await;
    let health = server.get("/health").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "ready"}));

    server.status.send(EngineStatus::Paused { retry_after_s: 7 }).unwrap();
    for body in [r#"{"prompt": "hi"}"#, r#"{"prompt": "hi", "stream": true}"#] {
        let response = server.post(body).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "7");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "engine_paused");
        assert_eq!(error["error"]["type"], "server_error");
    }
    let health = server.get("/health").await;
    assert_eq!((health.status().as_u16(), health.headers()["retry-after"].to_str().unwrap()), (503, "7"));
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "paused", "retry_after_s": 7}));

    server.status.send(EngineStatus::Starting).unwrap();
    let response = server.post(r#"{"prompt": "hi"}"#).await;
    assert_eq!((response.status().as_u16(), response.headers()["retry-after"].to_str().unwrap()), (503, "1"));
    assert_eq!(server.get("/health").await.json::<Value>().await.unwrap(), json!({"status": "starting"}));

    server.status.send(EngineStatus::Stopping).unwrap();
    let response = server.post(r#"{"prompt": "hi"}"#).await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(server.get("/health").await.status(), 503);
    // Validation comes first: a bad request is a 400 even then.
    assert_eq!(server.post(r#"{"prompt": 1}"#).await.status(), 400);
    assert_eq!(server.stats.counts().rejected, 4);
    server.shut_down().await;
}

#[tokio::test]
async fn a_full_queue_answers_503_retry_after_1() {
    let server = Server::start(false, 1).await;
    let (events, _rx) = mpsc::unbounded_channel();
    let filler = CompletionJob {
        id: 0,
        prompt: vec![1],
        max_tokens: 1,
        sampling: parcae_host::serving::api::Sampling::Greedy,
        accepted: Instant::now(),
        events,
    };
    server.jobs.try_send(filler).unwrap();
    let response = server.post(r#"{"prompt": "hi"}"#).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "engine_overloaded");
    server.shut_down().await;
}

#[tokio::test]
async fn engine_failures_before_the_first_token_are_http_errors() {
    let server = Server::start(true, 16).await;
    for stream in [false, true] {
        let body = json!({"prompt": [FAIL_RETRY, 1], "stream": stream}).to_string();
        let response = server.post(&body).await;
        assert_eq!(response.status(), 503, "stream {stream}");
        assert_eq!(response.headers()["retry-after"], "7");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("no replica holds the model") && message.contains("before its first token"),
            "{message}"
        );

        let response = server.post(&json!({"prompt": [FAIL_HARD], "stream": stream}).to_string()).await;
        assert_eq!(response.status(), 500, "stream {stream}");
        assert!(response.headers().get("retry-after").is_none());
        let error: Value = response.json().await.unwrap();
        assert!(error["error"]["message"].as_str().unwrap().contains("the worker crashed"), "{error}");
    }
    assert_eq!(server.stats.counts().failed, 4);
    server.shut_down().await;
}

#[tokio::test]
async fn a_failure_mid_stream_ends_with_an_error_event_and_done() {
    let server = Server::start(true, 16).await;
    let response =
        server.post(&json!({"prompt": [FAIL_MID, 1, 2], "max_tokens": 6, "stream": true}).to_string()).await;
    assert_eq!(response.status(), 200);
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 4, "two tokens, the error, [DONE]: {events:?}");
    for e in &events[..2] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        assert!(chunk["choices"][0]["finish_reason"].is_null());
    }
    let error: Value = serde_json::from_str(&events[2]).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("after 2 tokens") && message.contains("preempted"), "{error}");
    assert_eq!(error["error"]["type"], "server_error");
    assert_eq!(events[3], "[DONE]");
    // Not streamed, the same failure is a 500.
    let response = server.post(&json!({"prompt": [FAIL_MID, 1, 2], "max_tokens": 6}).to_string()).await;
    assert_eq!(response.status(), 500);
    let counts = server.stats.counts();
    assert_eq!((counts.accepted, counts.failed, counts.completed), (2, 2, 0));
    server.shut_down().await;
}

#[tokio::test]
async fn models_lists_the_served_model() {
    let server = Server::start(true, 16).await;
    let models: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["object"], "list");
    let data = models["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(
        (&data[0]["id"], &data[0]["object"], &data[0]["owned_by"]),
        (&json!(MODEL), &json!("model"), &json!("tests"))
    );
    assert!(data[0]["created"].is_u64());
    assert_eq!((&data[0]["vocab"], &data[0]["context"]), (&json!(128), &json!(32)));
    assert_eq!(server.get("/v1/models/test-gpt").await.status(), 200);
    assert_eq!(server.get("/v1/models/other").await.status(), 404);
    let missing = server.get("/v2/nothing").await;
    assert_eq!(missing.status(), 404);
    assert!(missing.json::<Value>().await.unwrap()["error"]["message"].is_string());
    server.shut_down().await;
}

fn load(base: &str, requests: usize) -> LoadSpec {
    LoadSpec {
        url: base.to_string(),
        rate: 100.0,
        cv: 1.0,
        requests,
        duration: Duration::from_secs(10),
        prompt_tokens: 4,
        prompt: None,
        max_tokens: 4,
        temperature: 0.0,
        // Below the magic tokens: the stand-in answers every request.
        vocab: 64,
        seed: 5,
    }
}

#[tokio::test]
async fn run_load_measures_every_request() {
    let server = Server::start(true, 64).await;
    let report = run_load(&load(&server.base, 30)).await.unwrap();
    assert_eq!(report.rows.len(), 30);
    for (i, row) in report.rows.iter().enumerate() {
        assert_eq!(
            (row.id, row.status, row.outcome, row.tokens),
            (i, 200, RequestOutcome::Completed, 4),
            "{row:?}"
        );
        let (ttft, e2e) = (row.ttft_s.unwrap(), row.e2e_s.unwrap());
        assert!(0.0 < ttft && ttft <= e2e && e2e < 5.0, "{row:?}");
        assert!(row.error.is_none());
    }
    assert!(report.rows.windows(2).all(|w| w[0].sent_at_s <= w[1].sent_at_s));
    let s = &report.summary;
    assert_eq!((s.requests, s.completed, s.rejected, s.failed, s.tokens), (30, 30, 0, 0, 120));
    for p in [s.ttft, s.e2e] {
        assert!(p.p50 > 0.0 && p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.max, "{p:?}");
    }
    // Four tokens 2 ms apart: end to end takes at least the three gaps after the first.
    assert!(s.e2e.p50 >= s.ttft.p50 + 0.004, "{s:?}");
    assert!(s.throughput_rps > 0.0 && s.tokens_per_s > s.throughput_rps);
    let counts = server.stats.counts();
    assert_eq!((counts.accepted, counts.completed), (30, 30));

    let csv = std::env::temp_dir().join(format!("parcae-loadgen-{}.csv", std::process::id()));
    report.write_csv(&csv).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let _ = std::fs::remove_file(&csv);
    assert_eq!(text.lines().next().unwrap(), "id,sent_at_s,ttft_s,e2e_s,tokens,status,outcome,error");
    assert_eq!(text.lines().count(), 31);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["summary"]["completed"], 30);
    assert!(report.table().contains("TTFT P50 s"));
    server.shut_down().await;
}

#[tokio::test]
async fn run_load_counts_503s_as_rejected_without_retrying() {
    let server = Server::start(true, 64).await;
    server.status.send(EngineStatus::Paused { retry_after_s: 3 }).unwrap();
    let report =
        run_load(&LoadSpec { prompt: Some("hi there".into()), ..load(&server.base, 6) }).await.unwrap();
    assert_eq!(report.rows.len(), 6);
    for row in &report.rows {
        assert_eq!((row.status, row.outcome, row.tokens), (503, RequestOutcome::Rejected, 0), "{row:?}");
        assert!(row.error.as_deref().unwrap().contains("paused"), "{row:?}");
        assert!(row.ttft_s.is_none() && row.e2e_s.is_none());
    }
    let s = &report.summary;
    assert_eq!((s.completed, s.rejected, s.failed), (0, 6, 0));
    assert!(s.e2e.p50.is_nan());
    assert_eq!(server.stats.counts().rejected, 6, "one try each");
    server.shut_down().await;
}
