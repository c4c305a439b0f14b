//! The contract between the HTTP front end ([`super::http`]) and the serving engine: what
//! a request becomes once it is validated ([`CompletionJob`]), what the engine answers on
//! it ([`JobEvent`]), whether the engine takes requests now ([`EngineStatus`]) and what it
//! serves ([`ModelCard`]), bundled in the [`EngineHandle`] the front end holds.
//!
//! Why a channel contract: the engine runs on the cluster's schedule (decode iterations,
//! reconfigurations, pauses) and must not block on slow clients, while the front end must
//! never see workers. Jobs go through a bounded queue (a full queue is back-pressure: the
//! front end answers 503); each job carries its own unbounded event channel, so the engine
//! sends tokens without waiting and a client that went away costs one failed send.

use std::time::Instant;

use tokio::sync::{mpsc, watch};

pub use parcae_cluster::serving::Sampling;

/// One validated completion request, handed to the engine.
#[derive(Debug)]
pub struct CompletionJob {
    /// Unique per front end, assigned by the HTTP layer (the response id is `cmpl-<id>`).
    pub id: u64,
    /// Prompt token ids, each below the model's vocabulary, at least one; prompt plus
    /// `max_tokens` fit the model's context.
    pub prompt: Vec<i64>,
    /// Tokens to generate, at least 1.
    pub max_tokens: usize,
    /// How tokens are picked.
    pub sampling: Sampling,
    /// When the front end accepted the request (latencies are measured from here).
    pub accepted: Instant,
    /// Where the engine sends the request's tokens and its end: any number of
    /// [`JobEvent::Token`], then exactly one [`JobEvent::Done`] or [`JobEvent::Failed`].
    /// Dropping the sender without either reads as a failure.
    pub events: mpsc::UnboundedSender<JobEvent>,
}

/// What the engine tells the front end about one job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The next generated token.
    Token(i64),
    /// The request finished; no event follows.
    Done {
        /// Why it stopped.
        reason: FinishReason,
    },
    /// The request cannot finish; no event follows.
    Failed {
        /// Why, for the client.
        message: String,
        /// When retrying may succeed, seconds (the client is told with `Retry-After`).
        retry_after_s: Option<u64>,
    },
}

/// Why a request stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated `max_tokens` tokens.
    Length,
    /// The model's context is full.
    Context,
}

/// Whether the engine takes requests now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineStatus {
    /// Workers are starting; nothing is served yet.
    Starting,
    /// Requests are served.
    Ready,
    /// No configuration can serve now (too few instances); new requests are refused.
    Paused {
        /// When to try again, seconds.
        retry_after_s: u64,
    },
    /// The engine is shutting down; no new requests.
    Stopping,
}

/// The model the engine serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCard {
    /// Its name (the `model` of requests and responses).
    pub id: String,
    /// Vocabulary size: token ids are `0..vocab`.
    pub vocab: usize,
    /// Context length, tokens: prompt plus generated tokens fit in it.
    pub context: usize,
    /// Who serves it (OpenAI's `owned_by`).
    pub owned_by: String,
}

impl ModelCard {
    /// The card of the model `spec` describes, as `serve` names it.
    pub fn of(spec: &parcae_cluster::ModelSpec) -> Self {
        ModelCard {
            id: "parcae-gpt".to_string(),
            vocab: spec.vocab,
            context: spec.seq_len,
            owned_by: "parcae".to_string(),
        }
    }
}

/// Waits until the engine serves (or is gone): a load started earlier would meet 503s.
pub async fn until_ready(status: &mut watch::Receiver<EngineStatus>) {
    while !matches!(*status.borrow(), EngineStatus::Ready) {
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// What the front end holds of the engine.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    /// The engine's job queue (bounded: full means overloaded).
    pub jobs: mpsc::Sender<CompletionJob>,
    /// The engine's status, as it publishes it.
    pub status: watch::Receiver<EngineStatus>,
    /// What it serves.
    pub model: ModelCard,
}
