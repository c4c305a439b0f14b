//! The async plumbing both sides of a transfer share: every await bounded by the stall timeout,
//! several stream futures polled on one task, and quinn's errors tagged with the transfer id.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use super::TransferError;
use crate::frame::FrameError;

/// Polls all futures on the current task, returning their outputs in order, or the first error
/// (dropping the rest). Keeps borrowed buffers usable without spawning.
pub(super) async fn try_join_all<F, T, E>(futs: Vec<F>) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut futs: Vec<Option<Pin<Box<F>>>> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, fut) in out.iter_mut().zip(futs.iter_mut()) {
            if let Some(f) = fut {
                match f.as_mut().poll(cx) {
                    Poll::Ready(Ok(v)) => {
                        *slot = Some(v);
                        *fut = None;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(out.iter_mut().map(|o| o.take().expect("done")).collect()))
        }
    })
    .await
}

/// Awaits `fut`, failing with [`TransferError::Stalled`] (saying `what` was awaited) if it makes
/// no progress within `after`, and tagging its error with the transfer id.
pub(super) async fn with_stall<T, E>(
    id: u64,
    after: Duration,
    what: &'static str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, TransferError>
where
    E: Into<TransferErrorSource>,
{
    match tokio::time::timeout(after, fut).await {
        Err(_) => Err(TransferError::Stalled { id, after, what }),
        Ok(Err(e)) => Err(e.into().into_error(id)),
        Ok(Ok(v)) => Ok(v),
    }
}

/// Internal: errors from the various quinn/frame calls, tagged with the id later.
pub(super) enum TransferErrorSource {
    /// A stream or the connection failed.
    Io(std::io::Error),
    /// A framed message failed.
    Frame(FrameError),
}

impl TransferErrorSource {
    fn into_error(self, id: u64) -> TransferError {
        match self {
            TransferErrorSource::Io(source) => TransferError::Stream { id, source },
            TransferErrorSource::Frame(source) => TransferError::Frame { id, source },
        }
    }
}

/// An I/O error whose message says why a connection was lost (quinn's says only "connection lost").
fn lost(kind: std::io::ErrorKind, e: &quinn::ConnectionError) -> std::io::Error {
    std::io::Error::new(kind, format!("connection lost: {e}"))
}

impl From<quinn::WriteError> for TransferErrorSource {
    fn from(e: quinn::WriteError) -> Self {
        TransferErrorSource::Io(match &e {
            quinn::WriteError::ConnectionLost(c) => lost(std::io::ErrorKind::ConnectionReset, c),
            _ => e.into(),
        })
    }
}

impl From<quinn::ReadExactError> for TransferErrorSource {
    fn from(e: quinn::ReadExactError) -> Self {
        match e {
            quinn::ReadExactError::FinishedEarly(n) => TransferErrorSource::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("stream ended {n} bytes into a record"),
            )),
            quinn::ReadExactError::ReadError(e) => e.into(),
        }
    }
}

impl From<quinn::ReadError> for TransferErrorSource {
    fn from(e: quinn::ReadError) -> Self {
        TransferErrorSource::Io(match &e {
            quinn::ReadError::ConnectionLost(c) => lost(std::io::ErrorKind::ConnectionReset, c),
            _ => e.into(),
        })
    }
}

impl From<std::io::Error> for TransferErrorSource {
    /// quinn's streams report their errors through tokio's I/O traits as an `io::Error`
    /// around a [`quinn::ReadError`]: keep saying why a connection was lost, and name a
    /// stream that ends inside a record.
    fn from(e: std::io::Error) -> Self {
        let kind = e.kind();
        if let Some(quinn::ReadError::ConnectionLost(c)) =
            e.get_ref().and_then(|inner| inner.downcast_ref::<quinn::ReadError>())
        {
            return TransferErrorSource::Io(lost(kind, c));
        }
        if kind == std::io::ErrorKind::UnexpectedEof {
            return TransferErrorSource::Io(std::io::Error::new(kind, "stream ended inside a record"));
        }
        TransferErrorSource::Io(e)
    }
}

impl From<FrameError> for TransferErrorSource {
    fn from(e: FrameError) -> Self {
        TransferErrorSource::Frame(e)
    }
}

impl From<quinn::ConnectionError> for TransferErrorSource {
    fn from(e: quinn::ConnectionError) -> Self {
        TransferErrorSource::Io(e.into())
    }
}
