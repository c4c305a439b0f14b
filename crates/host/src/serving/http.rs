//! The OpenAI-compatible HTTP front end of `parcae-host serve`.
//!
//! Why its own module: clients (the OpenAI SDKs, curl, the load generator) speak HTTP and
//! text; the engine speaks [`CompletionJob`]s and token ids. This layer validates a request
//! completely before the engine sees it (every refusal names its field), turns text into
//! tokens with the built-in [`tokenizer`], refuses work with 503 and `Retry-After` while the
//! engine cannot take it (starting, paused for lack of instances, queue full), and streams
//! tokens back as server-sent events.
//!
//! Routes:
//! - `POST /v1/completions`: OpenAI's legacy completions. Accepted fields: `model` (optional;
//!   when given it must be the served model's id, else 404 `model_not_found`), `prompt` (a
//!   string, or an array of token ids; one prompt per request), `max_tokens` (default
//!   [`DEFAULT_MAX_TOKENS`], at least 1; prompt plus `max_tokens` must fit the context),
//!   `temperature` (default 0, greedy: unlike OpenAI's default of 1, so the same request
//!   gives the same tokens, which is what tests and latency comparisons of recovery modes
//!   need; at most 2), `seed` (with `temperature > 0`; without one the seed is derived from
//!   the request id), `stream`, and the harmless `n` (only 1), `echo` (only false) and
//!   `user` (ignored). OpenAI's other fields ([`UNSUPPORTED_FIELDS`]: `stop`, `logprobs`, ...)
//!   are refused unless null, and so is any unknown field, naming it.
//! - `GET /v1/models`, `GET /v1/models/{id}`: the served model (with the extensions `vocab`
//!   and `context`).
//! - `GET /health`: 200 `{"status":"ready"}` when the engine serves, else 503 with the status.
//!
//! Responses are OpenAI's `text_completion` objects with one extension, `token_ids` in each
//! choice (the generated token ids; the text is their [`tokenizer::decode`]). Streamed
//! (`"stream": true`), each token is one `data: {chunk}` event, then a chunk with the
//! `finish_reason` (and the `usage`), then `data: [DONE]`; a failure after the first token
//! is a `data: {"error": ...}` event followed by `data: [DONE]`, never a dropped connection.
//! A streamed request waits for its first token before answering, so a failure before it is
//! an ordinary HTTP error (503 with `Retry-After` when the engine says when to retry, else
//! 500). Errors are `{"error": {"message", "type", "param", "code"}}` with type
//! `invalid_request_error` (4xx) or `server_error` (5xx).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::api::{CompletionJob, EngineHandle, EngineStatus, FinishReason, JobEvent, ModelCard, Sampling};
use super::tokenizer::{self, TokenizeError};

/// `max_tokens` when a request gives none (OpenAI's default).
pub const DEFAULT_MAX_TOKENS: usize = 16;

/// Highest `temperature` accepted (OpenAI's limit).
pub const MAX_TEMPERATURE: f64 = 2.0;

/// `Retry-After` while the engine starts, and when its job queue is full, seconds.
pub const BUSY_RETRY_AFTER_S: u64 = 1;

/// The request fields this server reads.
pub const SUPPORTED_FIELDS: [&str; 9] =
    ["model", "prompt", "max_tokens", "temperature", "seed", "stream", "n", "echo", "user"];

/// OpenAI's completion fields this server does not implement: refused unless null.
pub const UNSUPPORTED_FIELDS: [&str; 9] = [
    "best_of",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "presence_penalty",
    "stop",
    "stream_options",
    "suffix",
    "top_p",
];

/// What the front end counted, updated as requests go (read with [`HttpStats::counts`]).
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Completion requests handed to the engine.
    pub accepted: AtomicU64,
    /// Accepted requests that finished (every token sent).
    pub completed: AtomicU64,
    /// Accepted requests the engine failed (or dropped).
    pub failed: AtomicU64,
    /// Accepted requests whose client went away before the end.
    pub cancelled: AtomicU64,
    /// Valid requests refused with 503 (engine starting, paused, stopping, or queue full).
    pub rejected: AtomicU64,
    /// Requests refused as invalid (400, 404).
    pub invalid: AtomicU64,
}

/// A snapshot of [`HttpStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HttpCounts {
    /// See [`HttpStats::accepted`].
    pub accepted: u64,
    /// See [`HttpStats::completed`].
    pub completed: u64,
    /// See [`HttpStats::failed`].
    pub failed: u64,
    /// See [`HttpStats::cancelled`].
    pub cancelled: u64,
    /// See [`HttpStats::rejected`].
    pub rejected: u64,
    /// See [`HttpStats::invalid`].
    pub invalid: u64,
}

impl HttpStats {
    /// The counters now.
    pub fn counts(&self) -> HttpCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HttpCounts {
            accepted: get(&self.accepted),
            completed: get(&self.completed),
            failed: get(&self.failed),
            cancelled: get(&self.cancelled),
            rejected: get(&self.rejected),
            invalid: get(&self.invalid),
        }
    }
}

/// Serves the API on `listener` until `shutdown` completes, then stops accepting
/// connections and waits for the requests in flight (the engine ends them when it stops).
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    engine: EngineHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_http_with_stats(listener, engine, Arc::new(HttpStats::default()), shutdown).await
}

/// [`serve_http`], counting requests in `stats`.
pub async fn serve_http_with_stats(
    listener: tokio::net::TcpListener,
    engine: EngineHandle,
    stats: Arc<HttpStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Streamed tokens are small writes: with Nagle's algorithm on, each waits for the ACK of
    // the one before, which the client delays (40 ms on Linux), so a 16-token stream took
    // 40 ms longer than its tokens did. Every token goes out as it is made.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%e, "could not set TCP_NODELAY on a client connection");
        }
    });
    axum::serve(listener, router_with_stats(engine, stats)).with_graceful_shutdown(shutdown).await
}

/// The API's routes over `engine` (for tests and embedding; [`serve_http`] serves it).
pub fn router(engine: EngineHandle) -> Router {
    router_with_stats(engine, Arc::new(HttpStats::default()))
}

/// [`router`], counting requests in `stats`.
pub fn router_with_stats(engine: EngineHandle, stats: Arc<HttpStats>) -> Router {
    let state = AppState(Arc::new(Shared { engine, stats, next_id: AtomicU64::new(1), started: unix_now() }));
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(state)
}

#[derive(Clone)]
struct AppState(Arc<Shared>);

struct Shared {
    engine: EngineHandle,
    stats: Arc<HttpStats>,
    next_id: AtomicU64,
    /// The models' `created`, Unix seconds.
    started: u64,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// An error answer: status, OpenAI's error body, and `Retry-After` when known.
#[derive(Debug, Clone, PartialEq)]
struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
    retry_after_s: Option<u64>,
}

impl ApiError {
    fn invalid(param: &str, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
            code: Some(code),
            retry_after_s: None,
        }
    }

    fn unavailable(code: &'static str, message: impl Into<String>, retry_after_s: Option<u64>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            param: None,
            code: Some(code),
            retry_after_s,
        }
    }

    /// The engine failed a request: 503 when it says when to retry, else 500.
    fn engine_failed(message: &str, retry_after_s: Option<u64>, tokens: usize) -> Self {
        let when =
            if tokens == 0 { "before its first token".to_string() } else { format!("after {tokens} tokens") };
        ApiError {
            status: if retry_after_s.is_some() {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            },
            message: format!("the engine failed the request {when}: {message}"),
            param: None,
            code: Some("engine_failed"),
            retry_after_s,
        }
    }

    fn body(&self) -> Value {
        let kind = if self.status.is_client_error() { "invalid_request_error" } else { "server_error" };
        json!({ "error": { "message": self.message, "type": kind, "param": self.param, "code": self.code } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// The typed fields of a request body (names checked before, see [`check_fields`]).
#[derive(Debug, Deserialize)]
struct RawRequest {
    model: Option<String>,
    prompt: Option<Value>,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    seed: Option<u64>,
    stream: Option<bool>,
    n: Option<u64>,
    echo: Option<bool>,
    #[expect(dead_code, reason = "accepted for compatibility and ignored")]
    user: Option<String>,
}

/// A request ready for the engine.
#[derive(Debug, Clone, PartialEq)]
struct Validated {
    prompt: Vec<i64>,
    max_tokens: usize,
    temperature: f64,
    seed: Option<u64>,
    stream: bool,
}

/// Parses and checks a body against the served model: 400 naming the field, or 404 for
/// another model.
fn parse_request(body: &[u8], card: &ModelCard) -> Result<Validated, ApiError> {
    let map: Map<String, Value> = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid("body", "invalid_json", format!("the body is not a JSON object: {e}"))
    })?;
    check_fields(&map)?;
    let raw: RawRequest = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body))
        .map_err(|e| {
        let field = e.path().iter().next().map_or_else(|| "body".to_string(), |s| s.to_string());
        ApiError::invalid(&field, "invalid_type", format!("{field}: {}", e.inner()))
    })?;
    if let Some(model) = &raw.model
        && *model != card.id
    {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model `{model}` does not exist; this server serves `{}`", card.id),
            param: Some("model".into()),
            code: Some("model_not_found"),
            retry_after_s: None,
        });
    }
    if let Some(n) = raw.n
        && n != 1
    {
        return Err(ApiError::invalid("n", "unsupported_value", format!("n = {n}: only n = 1 is supported")));
    }
    if raw.echo == Some(true) {
        return Err(ApiError::invalid("echo", "unsupported_value", "echo = true is not supported"));
    }
    let prompt = match &raw.prompt {
        Some(prompt) => prompt_tokens(prompt, card)?,
        None => return Err(ApiError::invalid("prompt", "missing_field", "prompt is required")),
    };
    let max_tokens = raw.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS as u64);
    if max_tokens == 0 {
        return Err(ApiError::invalid("max_tokens", "invalid_value", "max_tokens must be at least 1"));
    }
    if prompt.len() >= card.context {
        return Err(ApiError::invalid(
            "prompt",
            "context_length_exceeded",
            format!(
                "the prompt is {} tokens but the model's context is {} tokens, which must also hold at \
                 least one generated token",
                prompt.len(),
                card.context
            ),
        ));
    }
    let room = (card.context - prompt.len()) as u64;
    if max_tokens > room {
        return Err(ApiError::invalid(
            "max_tokens",
            "context_length_exceeded",
            format!(
                "the model's context is {} tokens, but the prompt ({} tokens) plus max_tokens ({max_tokens}) \
                 need {}; ask for at most {room} tokens",
                card.context,
                prompt.len(),
                prompt.len() as u64 + max_tokens
            ),
        ));
    }
    let temperature = raw.temperature.unwrap_or(0.0);
    if !(temperature.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&temperature)) {
        return Err(ApiError::invalid(
            "temperature",
            "invalid_value",
            format!("temperature = {temperature}: must be between 0 and {MAX_TEMPERATURE}"),
        ));
    }
    Ok(Validated {
        prompt,
        max_tokens: max_tokens as usize,
        temperature,
        seed: raw.seed,
        stream: raw.stream.unwrap_or(false),
    })
}

/// Refuses unknown fields and OpenAI's unsupported ones (unless null), naming them.
fn check_fields(map: &Map<String, Value>) -> Result<(), ApiError> {
    for (field, value) in map {
        if SUPPORTED_FIELDS.contains(&field.as_str()) {
            continue;
        }
        if UNSUPPORTED_FIELDS.contains(&field.as_str()) {
            if value.is_null() {
                continue;
            }
            return Err(ApiError::invalid(
                field,
                "unsupported_parameter",
                format!("{field} is not supported by this server (leave it out or null)"),
            ));
        }
        return Err(ApiError::invalid(
            field,
            "unknown_parameter",
            format!("unknown field `{field}`; this server reads {}", SUPPORTED_FIELDS.join(", ")),
        ));
    }
    Ok(())
}

/// The prompt's tokens: a string through the tokenizer, or an array of token ids.
fn prompt_tokens(prompt: &Value, card: &ModelCard) -> Result<Vec<i64>, ApiError> {
    let vocab = card.vocab;
    let in_vocab = |t: i64| usize::try_from(t).is_ok_and(|t| t < vocab);
    let tokens = match prompt {
        Value::String(text) => {
            let tokens = tokenizer::encode_with_offsets(text).map_err(|e| {
                let code = match e {
                    TokenizeError::UnknownChar { .. } => "unknown_character",
                    TokenizeError::BadEscape { .. } => "invalid_token_escape",
                };
                ApiError::invalid("prompt", code, format!("prompt: {e}"))
            })?;
            if let Some(&(t, offset)) = tokens.iter().find(|&&(t, _)| !in_vocab(t)) {
                let what = match text[offset..].chars().next() {
                    Some('<') if text[offset + 1..].starts_with('|') => format!("the token escape <|{t}|>"),
                    Some(ch) => format!("the character {ch:?} (token {t})"),
                    None => format!("token {t}"),
                };
                return Err(ApiError::invalid(
                    "prompt",
                    "token_out_of_vocabulary",
                    format!(
                        "prompt: {what} at byte {offset} is beyond the model's vocabulary of {vocab} tokens"
                    ),
                ));
            }
            tokens.into_iter().map(|(t, _)| t).collect()
        }
        Value::Array(items) if items.iter().any(|v| v.is_string() || v.is_array()) => {
            return Err(ApiError::invalid(
                "prompt",
                "batch_not_supported",
                format!(
                    "only one prompt per request: prompt is an array of {} prompts; send each as its own request",
                    items.len()
                ),
            ));
        }
        Value::Array(items) => {
            let mut tokens = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_i64() {
                    Some(t) if in_vocab(t) => tokens.push(t),
                    Some(t) => {
                        return Err(ApiError::invalid(
                            "prompt",
                            "token_out_of_vocabulary",
                            format!(
                                "prompt[{i}] = {t} is not a token id of this model (0 to {})",
                                vocab.saturating_sub(1)
                            ),
                        ));
                    }
                    None => {
                        return Err(ApiError::invalid(
                            "prompt",
                            "invalid_type",
                            format!("prompt[{i}] = {item} is not a token id (an integer)"),
                        ));
                    }
                }
            }
            tokens
        }
        other => {
            return Err(ApiError::invalid(
                "prompt",
                "invalid_type",
                format!("prompt must be a string or an array of token ids, not {other}"),
            ));
        }
    };
    if tokens.is_empty() {
        return Err(ApiError::invalid(
            "prompt",
            "invalid_value",
            "the prompt is empty: give at least one token",
        ));
    }
    Ok(tokens)
}

/// The seed of a sampled request that gave none: its id, mixed (SplitMix64), so requests
/// differ but each is reproducible from the id in the logs.
fn derived_seed(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 503 when the engine cannot take requests now.
fn refusal(status: &EngineStatus) -> Option<ApiError> {
    match status {
        EngineStatus::Ready => None,
        EngineStatus::Starting => Some(ApiError::unavailable(
            "engine_starting",
            "the model is starting (its workers are loading); retry shortly",
            Some(BUSY_RETRY_AFTER_S),
        )),
        EngineStatus::Paused { retry_after_s } => Some(ApiError::unavailable(
            "engine_paused",
            format!("serving is paused: too few instances to run the model now; retry in {retry_after_s} s"),
            Some(*retry_after_s),
        )),
        EngineStatus::Stopping => {
            Some(ApiError::unavailable("engine_stopping", "the server is shutting down", None))
        }
    }
}

async fn completions(State(state): State<AppState>, body: Bytes) -> Response {
    let shared = &state.0;
    let stats = &shared.stats;
    let card = &shared.engine.model;
    let request = match parse_request(&body, card) {
        Ok(r) => r,
        Err(e) => {
            stats.invalid.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    let status = shared.engine.status.borrow().clone();
    if let Some(e) = refusal(&status) {
        stats.rejected.fetch_add(1, Ordering::Relaxed);
        return e.into_response();
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let sampling = if request.temperature > 0.0 {
        Sampling::Random {
            temperature: request.temperature,
            seed: request.seed.unwrap_or_else(|| derived_seed(id)),
        }
    } else {
        Sampling::Greedy
    };
    let (events, mut rx) = mpsc::unbounded_channel();
    let job = CompletionJob {
        id,
        prompt: request.prompt.clone(),
        max_tokens: request.max_tokens,
        sampling,
        accepted: Instant::now(),
        events,
    };
    if let Err(e) = shared.engine.jobs.try_send(job) {
        stats.rejected.fetch_add(1, Ordering::Relaxed);
        let e = match e {
            mpsc::error::TrySendError::Full(_) => ApiError::unavailable(
                "engine_overloaded",
                "the engine's queue is full; retry shortly",
                Some(BUSY_RETRY_AFTER_S),
            ),
            mpsc::error::TrySendError::Closed(_) => {
                ApiError::unavailable("engine_stopping", "the engine has stopped", None)
            }
        };
        return e.into_response();
    }
    stats.accepted.fetch_add(1, Ordering::Relaxed);
    let mut outcome = Outcome { stats: stats.clone(), settled: false };
    let head = Head {
        id: format!("cmpl-{id}"),
        created: unix_now(),
        model: card.id.clone(),
        prompt_tokens: request.prompt.len(),
    };
    // Wait for the first event either way: a failure before any token is an HTTP error.
    let first = match rx.recv().await {
        Some(JobEvent::Failed { message, retry_after_s }) => {
            outcome.settle(false);
            return ApiError::engine_failed(&message, retry_after_s, 0).into_response();
        }
        None => {
            outcome.settle(false);
            return dropped(0).into_response();
        }
        Some(event) => event,
    };
    if request.stream {
        stream(head, first, rx, outcome).into_response()
    } else {
        collect(head, first, rx, outcome).await
    }
}

/// The engine dropped a job without ending it.
fn dropped(tokens: usize) -> ApiError {
    ApiError::engine_failed("it dropped the request without an answer", None, tokens)
}

/// Counts an accepted request's end exactly once; dropped unsettled (the client went
/// away), it counts a cancellation.
struct Outcome {
    stats: Arc<HttpStats>,
    settled: bool,
}

impl Outcome {
    fn settle(&mut self, completed: bool) {
        if !self.settled {
            self.settled = true;
            let counter = if completed { &self.stats.completed } else { &self.stats.failed };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if !self.settled {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What every chunk and response of one request shares.
struct Head {
    id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct Choice {
    text: String,
    index: u32,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
    /// Extension: the tokens of `text`.
    token_ids: Vec<i64>,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    completion_tokens: usize,
    total_tokens: usize,
}

impl Head {
    fn completion(
        &self,
        tokens: Vec<i64>,
        finish: Option<FinishReason>,
        usage: Option<usize>,
    ) -> Completion<'_> {
        Completion {
            id: &self.id,
            object: "text_completion",
            created: self.created,
            model: &self.model,
            choices: [Choice {
                text: tokenizer::decode(&tokens),
                index: 0,
                logprobs: None,
                // OpenAI has no reason for a full context: both read "length".
                finish_reason: finish.map(|_| "length"),
                token_ids: tokens,
            }],
            usage: usage.map(|completion_tokens| Usage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens,
                total_tokens: self.prompt_tokens + completion_tokens,
            }),
        }
    }
}

/// A whole (non-streamed) completion.
async fn collect(
    head: Head,
    first: JobEvent,
    mut rx: mpsc::UnboundedReceiver<JobEvent>,
    mut outcome: Outcome,
) -> Response {
    let mut tokens = Vec::new();
    let mut event = first;
    loop {
        match event {
            JobEvent::Token(t) => tokens.push(t),
            JobEvent::Done { reason } => {
                outcome.settle(true);
                let n = tokens.len();
                return axum::Json(head.completion(tokens, Some(reason), Some(n))).into_response();
            }
            JobEvent::Failed { message, retry_after_s } => {
                outcome.settle(false);
                return ApiError::engine_failed(&message, retry_after_s, tokens.len()).into_response();
            }
        }
        event = match rx.recv().await {
            Some(e) => e,
            None => {
                outcome.settle(false);
                return dropped(tokens.len()).into_response();
            }
        };
    }
}

/// Where a stream is.
struct Streaming {
    head: Head,
    rx: mpsc::UnboundedReceiver<JobEvent>,
    outcome: Outcome,
    pending: VecDeque<Event>,
    tokens: usize,
    ended: bool,
}

impl Streaming {
    fn json_event(value: &impl Serialize) -> Event {
        Event::default()
            .data(serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")))
    }

    /// Queues the events `event` becomes.
    fn push(&mut self, event: Option<JobEvent>) {
        match event {
            Some(JobEvent::Token(t)) => {
                self.tokens += 1;
                let chunk = Self::json_event(&self.head.completion(vec![t], None, None));
                self.pending.push_back(chunk);
            }
            Some(JobEvent::Done { reason }) => {
                self.outcome.settle(true);
                let last =
                    Self::json_event(&self.head.completion(Vec::new(), Some(reason), Some(self.tokens)));
                self.pending.push_back(last);
                self.end();
            }
            Some(JobEvent::Failed { message, retry_after_s }) => {
                self.outcome.settle(false);
                let error = ApiError::engine_failed(&message, retry_after_s, self.tokens);
                self.pending.push_back(Self::json_event(&error.body()));
                self.end();
            }
            None => {
                self.outcome.settle(false);
                self.pending.push_back(Self::json_event(&dropped(self.tokens).body()));
                self.end();
            }
        }
    }

    fn end(&mut self) {
        self.pending.push_back(Event::default().data("[DONE]"));
        self.ended = true;
    }
}

/// A streamed completion: the first event is already in.
fn stream(
    head: Head,
    first: JobEvent,
    rx: mpsc::UnboundedReceiver<JobEvent>,
    outcome: Outcome,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let mut state = Streaming { head, rx, outcome, pending: VecDeque::new(), tokens: 0, ended: false };
    state.push(Some(first));
    let events = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.pending.pop_front() {
                return Some((Ok(event), s));
            }
            if s.ended {
                return None;
            }
            let next = s.rx.recv().await;
            s.push(next);
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[derive(Serialize)]
struct ModelObject<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'a str,
    /// Extension: vocabulary size.
    vocab: usize,
    /// Extension: context length, tokens.
    context: usize,
}

fn model_object(state: &Shared) -> ModelObject<'_> {
    let card = &state.engine.model;
    ModelObject {
        id: &card.id,
        object: "model",
        created: state.started,
        owned_by: &card.owned_by,
        vocab: card.vocab,
        context: card.context,
    }
}

async fn models(State(state): State<AppState>) -> Response {
    axum::Json(json!({ "object": "list", "data": [model_object(&state.0)] })).into_response()
}

async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    if id == state.0.engine.model.id {
        axum::Json(model_object(&state.0)).into_response()
    } else {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model `{id}` does not exist; this server serves `{}`",
                state.0.engine.model.id
            ),
            param: Some("model".into()),
            code: Some("model_not_found"),
            retry_after_s: None,
        }
        .into_response()
    }
}

async fn health(State(state): State<AppState>) -> Response {
    let status = state.0.engine.status.borrow().clone();
    let (body, retry) = match status {
        EngineStatus::Ready => return axum::Json(json!({ "status": "ready" })).into_response(),
        EngineStatus::Starting => (json!({ "status": "starting" }), Some(BUSY_RETRY_AFTER_S)),
        EngineStatus::Paused { retry_after_s } => {
            (json!({ "status": "paused", "retry_after_s": retry_after_s }), Some(retry_after_s))
        }
        EngineStatus::Stopping => (json!({ "status": "stopping" }), None),
    };
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    if let Some(s) = retry {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    response
}

async fn not_found(uri: axum::http::Uri) -> Response {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no route {}: this server has /v1/completions, /v1/models and /health", uri.path()),
        param: None,
        code: Some("not_found"),
        retry_after_s: None,
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> ModelCard {
        ModelCard { id: "parcae-gpt".into(), vocab: 64, context: 32, owned_by: "parcae".into() }
    }

    fn parse(body: &str) -> Result<Validated, ApiError> {
        parse_request(body.as_bytes(), &card())
    }

    #[test]
    fn defaults_are_greedy_sixteen_tokens_unstreamed() {
        let v = parse(r#"{"prompt": "hi"}"#).unwrap();
        assert_eq!(
            v,
            Validated { prompt: vec![8, 9], max_tokens: 16, temperature: 0.0, seed: None, stream: false }
        );
        let v = parse(
            r#"{"model":"parcae-gpt","prompt":[1,2,63],"max_tokens":4,"temperature":0.5,"seed":7,"stream":true,
                "n":1,"echo":false,"user":"me","stop":null,"logprobs":null}"#,
        )
        .unwrap();
        assert_eq!(
            v,
            Validated {
                prompt: vec![1, 2, 63],
                max_tokens: 4,
                temperature: 0.5,
                seed: Some(7),
                stream: true
            }
        );
    }

    #[test]
    fn every_refusal_names_its_field() {
        for (body, param, needle) in [
            (r#"{"prompt": "hi""#, "body", "line 1 column"),
            ("[1]", "body", "JSON object"),
            (r#"{"prompt": "hi", "max_tokens": "5"}"#, "max_tokens", "line 1 column"),
            (r#"{"prompt": "hi", "stream": 1}"#, "stream", "invalid type"),
            (r#"{"prompt": "hi", "max_tokens": 0}"#, "max_tokens", "at least 1"),
            (r#"{"prompt": "hi", "stop": ["\n"]}"#, "stop", "not supported"),
            (r#"{"prompt": "hi", "logprobs": 2}"#, "logprobs", "not supported"),
            (r#"{"prompt": "hi", "frobnicate": 2}"#, "frobnicate", "unknown field"),
            (r#"{"prompt": "hi", "n": 2}"#, "n", "n = 1"),
            (r#"{"prompt": "hi", "echo": true}"#, "echo", "echo"),
            (r#"{"prompt": ["a", "b"]}"#, "prompt", "only one prompt per request"),
            (r#"{"prompt": [[1], [2]]}"#, "prompt", "only one prompt per request"),
            (r#"{"prompt": [1, 64]}"#, "prompt", "prompt[1] = 64"),
            (r#"{"prompt": [1, 2.5]}"#, "prompt", "prompt[1]"),
            (r#"{"prompt": "a,b"}"#, "prompt", "',' (token 64) at byte 1"),
            (r#"{"prompt": "a|b"}"#, "prompt", "'|' at byte 1"),
            (r#"{"prompt": "<|70|>"}"#, "prompt", "<|70|> at byte 0"),
            (r#"{"prompt": ""}"#, "prompt", "empty"),
            (r#"{"prompt": 5}"#, "prompt", "string or an array"),
            (r#"{}"#, "prompt", "required"),
            (r#"{"prompt": "hi", "max_tokens": 31}"#, "max_tokens", "prompt (2 tokens) plus max_tokens (31)"),
            (r#"{"prompt": "hi", "temperature": -1}"#, "temperature", "between 0 and 2"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}: {e:?}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e:?}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        let e = parse(r#"{"prompt": "hi", "model": "gpt-4"}"#).unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::NOT_FOUND, Some("model_not_found")));
        // The context must hold the prompt and every generated token.
        assert!(parse(r#"{"prompt": "hi", "max_tokens": 30}"#).is_ok());
    }

    #[test]
    fn derived_seeds_differ_per_request() {
        assert_ne!(derived_seed(1), derived_seed(2));
        assert_eq!(derived_seed(9), derived_seed(9));
    }
}
