//! Asynchronous call sessions: the table of running and finished sessions, completion order,
//! and the wake-ups waiters sleep on.

use crate::call::CallResult;
pub use crate::call::SessionId;
use crate::error::GrpcError;
use crate::handle::FunctionHandle;
use gridwise_proto::ErrorCode;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// How many errors of finished sessions are kept for `get_error` (the oldest go first).
const KEPT_ERRORS: usize = 65_536;

/// Where a session is.
#[derive(Debug)]
// A session holds one state for its whole life and is moved out once: boxing the result
// would add an allocation per call to save bytes on a handful of running sessions.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SessionState {
    /// The call is being ranked or run.
    Running,
    /// The call ended; kept until a wait takes the session out of the table.
    Done(Result<CallResult, GrpcError>),
}

/// A one-way "stop" signal for one session.
#[derive(Debug, Default)]
pub(crate) struct CancelFlag {
    set: AtomicBool,
    notify: Notify,
}

impl CancelFlag {
    /// Raises the flag and wakes whoever waits on it.
    pub(crate) fn cancel(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the flag is raised.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Resolves once the flag is raised.
    pub(crate) async fn cancelled(&self) {
        loop {
            // Register before checking, so a cancel between the check and the await is seen.
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Debug)]
struct Entry {
    handle: FunctionHandle,
    state: SessionState,
    cancel: Arc<CancelFlag>,
    /// Position in completion order (0 while running).
    done_seq: u64,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    next_seq: u64,
    sessions: HashMap<u64, Entry>,
    /// Finished, not yet waited-for sessions by completion order.
    done: BTreeMap<u64, u64>,
    /// Errors of finished sessions by id, kept after `wait` consumed them.
    errors: BTreeMap<u64, GrpcError>,
    /// Failed sessions of the last `wait_and` / `wait_all`, handed out one by one.
    failed: VecDeque<SessionId>,
}

impl Table {
    fn take(&mut self, id: u64) -> Option<Entry> {
        let e = self.sessions.remove(&id)?;
        if e.done_seq != 0 {
            self.done.remove(&e.done_seq);
        }
        Some(e)
    }
}

/// A finished session taken out of the table.
pub(crate) type Finished = (SessionId, Result<CallResult, GrpcError>);

/// The session table, shared by the client and its session tasks.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    table: Mutex<Table>,
    /// Woken whenever any session completes.
    completed: Notify,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic elsewhere cannot leave the table half-updated in a way that matters here.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a running session under a new id (from 1, never reused).
    pub(crate) fn start(&self, handle: FunctionHandle) -> (SessionId, Arc<CancelFlag>) {
        let cancel = Arc::new(CancelFlag::default());
        let mut t = self.lock();
        t.next_id += 1;
        let id = t.next_id;
        t.sessions.insert(
            id,
            Entry {
                handle,
                state: SessionState::Running,
                cancel: cancel.clone(),
                done_seq: 0,
            },
        );
        (SessionId(id), cancel)
    }

    /// Records a session's outcome; the first outcome wins. Wakes every waiter.
    pub(crate) fn complete(&self, id: SessionId, result: Result<CallResult, GrpcError>) -> bool {
        {
            let mut t = self.lock();
            t.next_seq += 1;
            let seq = t.next_seq;
            let Some(e) = t.sessions.get_mut(&id.0) else {
                return false;
            };
            if !matches!(e.state, SessionState::Running) {
                return false;
            }
            if let Err(err) = &result {
                let err = err.clone();
                t.errors.insert(id.0, err);
                while t.errors.len() > KEPT_ERRORS {
                    t.errors.pop_first();
                }
            }
            let Some(e) = t.sessions.get_mut(&id.0) else {
                return false;
            };
            e.state = SessionState::Done(result);
            e.done_seq = seq;
            t.done.insert(seq, id.0);
        }
        self.completed.notify_waiters();
        true
    }

    /// The handle a session was started with.
    pub(crate) fn handle(&self, id: SessionId) -> Result<FunctionHandle, GrpcError> {
        let t = self.lock();
        t.sessions
            .get(&id.0)
            .map(|e| e.handle.clone())
            .ok_or_else(|| GrpcError::invalid_session(id))
    }

    /// Ok when finished, `NotCompleted` while running, `InvalidSessionId` when unknown.
    pub(crate) fn probe(&self, id: SessionId) -> Result<(), GrpcError> {
        let t = self.lock();
        match t.sessions.get(&id.0) {
            None => Err(GrpcError::invalid_session(id)),
            Some(e) if e.done_seq != 0 => Ok(()),
            Some(_) => Err(GrpcError::new(
                ErrorCode::NotCompleted,
                format!("session {id} has not completed yet"),
            )),
        }
    }

    /// The earliest-completed of `ids`, if any has; `InvalidSessionId` if one is unknown.
    fn earliest_done(t: &Table, ids: &[SessionId]) -> Result<Option<SessionId>, GrpcError> {
        let mut best: Option<(u64, SessionId)> = None;
        for id in ids {
            let e = t
                .sessions
                .get(&id.0)
                .ok_or_else(|| GrpcError::invalid_session(id))?;
            if e.done_seq != 0 && best.is_none_or(|(s, _)| e.done_seq < s) {
                best = Some((e.done_seq, *id));
            }
        }
        Ok(best.map(|(_, id)| id))
    }

    /// The earliest-completed of `ids`, or `NoneCompleted`.
    pub(crate) fn probe_or(&self, ids: &[SessionId]) -> Result<SessionId, GrpcError> {
        if ids.is_empty() {
            return Err(GrpcError::invalid_session("(none given)"));
        }
        let t = self.lock();
        Self::earliest_done(&t, ids)?.ok_or_else(|| {
            GrpcError::new(
                ErrorCode::NoneCompleted,
                format!("none of the {} session(s) has completed yet", ids.len()),
            )
        })
    }

    /// Raises a running session's cancel flag. Ok(false) if it has already finished.
    pub(crate) fn cancel(&self, id: SessionId) -> Result<bool, GrpcError> {
        let t = self.lock();
        let e = t
            .sessions
            .get(&id.0)
            .ok_or_else(|| GrpcError::invalid_session(id))?;
        if e.done_seq != 0 {
            return Ok(false);
        }
        e.cancel.cancel();
        Ok(true)
    }

    /// Raises the cancel flag of every running session; returns their ids.
    pub(crate) fn cancel_all(&self) -> Vec<SessionId> {
        let t = self.lock();
        let mut ids = Vec::new();
        for (id, e) in &t.sessions {
            if e.done_seq == 0 {
                e.cancel.cancel();
                ids.push(SessionId(*id));
            }
        }
        ids
    }

    /// Every session not yet waited for, in start order.
    pub(crate) fn all_ids(&self) -> Vec<SessionId> {
        let t = self.lock();
        let mut ids: Vec<SessionId> = t.sessions.keys().map(|k| SessionId(*k)).collect();
        ids.sort_unstable();
        ids
    }

    /// Waits until a session has finished, without consuming it.
    pub(crate) async fn wait_done(&self, id: SessionId) -> Result<(), GrpcError> {
        loop {
            let notified = self.completed.notified();
            match self.probe(id) {
                Ok(()) => return Ok(()),
                Err(e) if e.code == ErrorCode::NotCompleted => {}
                Err(e) => return Err(e),
            }
            notified.await;
        }
    }

    /// Waits for a session and consumes it: a second wait gets `InvalidSessionId`.
    pub(crate) async fn wait(&self, id: SessionId) -> Result<CallResult, GrpcError> {
        loop {
            let notified = self.completed.notified();
            {
                let mut t = self.lock();
                match t.sessions.get(&id.0) {
                    None => return Err(GrpcError::invalid_session(id)),
                    Some(e) if e.done_seq != 0 => {
                        return match t.take(id.0).map(|e| e.state) {
                            Some(SessionState::Done(r)) => r,
                            _ => Err(GrpcError::invalid_session(id)),
                        };
                    }
                    Some(_) => {}
                }
            }
            notified.await;
        }
    }

    /// Waits for the earliest-completed of `ids` (all of them, when `ids` is None) and
    /// consumes it.
    pub(crate) async fn wait_first(
        &self,
        ids: Option<&[SessionId]>,
    ) -> Result<Finished, GrpcError> {
        if ids.is_some_and(|i| i.is_empty()) {
            return Err(GrpcError::invalid_session("(none given)"));
        }
        loop {
            let notified = self.completed.notified();
            {
                let mut t = self.lock();
                let found = match ids {
                    Some(ids) => Self::earliest_done(&t, ids)?,
                    None => {
                        if t.sessions.is_empty() {
                            return Err(GrpcError::new(
                                ErrorCode::InvalidSessionId,
                                "there are no sessions to wait for",
                            ));
                        }
                        t.done.first_key_value().map(|(_, id)| SessionId(*id))
                    }
                };
                if let Some(id) = found {
                    return match t.take(id.0).map(|e| e.state) {
                        Some(SessionState::Done(r)) => {
                            // GFD.52's wait_or / wait_any name the session even when it
                            // failed: `next_failed` does here.
                            if r.is_err() {
                                t.failed.push_back(id);
                            }
                            Ok((id, r))
                        }
                        _ => Err(GrpcError::invalid_session(id)),
                    };
                }
            }
            notified.await;
        }
    }

    /// Waits for every one of `ids`. If all succeeded, consumes them and returns their results
    /// in the order given. If any failed, consumes the failed ones (their errors stay readable
    /// through `error`), records them for `next_failed`, leaves the successful ones waitable,
    /// and returns `SessionFailed` naming the failed ids.
    pub(crate) async fn wait_all_of(
        &self,
        ids: &[SessionId],
    ) -> Result<Vec<(SessionId, CallResult)>, GrpcError> {
        for id in ids {
            self.wait_done(*id).await?;
        }
        let mut t = self.lock();
        let failed: Vec<SessionId> = ids
            .iter()
            .copied()
            .filter(|id| {
                matches!(
                    t.sessions.get(&id.0).map(|e| &e.state),
                    Some(SessionState::Done(Err(_)))
                )
            })
            .collect();
        if failed.is_empty() {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                match t.take(id.0).map(|e| e.state) {
                    Some(SessionState::Done(Ok(r))) => out.push((*id, r)),
                    // The same id twice in `ids`, or a concurrent wait took it.
                    _ => return Err(GrpcError::invalid_session(id)),
                }
            }
            t.failed.clear();
            return Ok(out);
        }
        let mut first_error = None;
        for id in &failed {
            if let Some(SessionState::Done(Err(e))) = t.take(id.0).map(|e| e.state) {
                first_error.get_or_insert(e);
            }
        }
        t.failed = failed.iter().copied().collect();
        let names: Vec<String> = failed.iter().map(|id| id.to_string()).collect();
        let detail = first_error
            .map(|e| format!("; first error: {e}"))
            .unwrap_or_default();
        Err(GrpcError::session_failed(format!(
            "{} of {} session(s) failed: {}{detail}",
            failed.len(),
            ids.len(),
            names.join(", ")
        )))
    }

    /// The error of a finished session, kept after it was waited for; `None` for one that
    /// succeeded or runs, `InvalidSessionId` for an id never issued.
    pub(crate) fn error(&self, id: SessionId) -> Result<Option<GrpcError>, GrpcError> {
        let t = self.lock();
        if id.0 == 0 || id.0 > t.next_id {
            return Err(GrpcError::invalid_session(id));
        }
        Ok(t.errors.get(&id.0).cloned())
    }

    /// The next failed session of the last `wait_and` / `wait_all`.
    pub(crate) fn next_failed(&self) -> Option<SessionId> {
        self.lock().failed.pop_front()
    }
}

/// Completes its session with an error if the task running it ends without doing so
/// (a panic, or the runtime shutting down).
pub(crate) struct CompletionGuard {
    sessions: Arc<Sessions>,
    id: SessionId,
    armed: bool,
}

impl CompletionGuard {
    /// Armed: dropped without [`complete`](Self::complete), it fails the session.
    pub(crate) fn new(sessions: Arc<Sessions>, id: SessionId) -> Self {
        Self {
            sessions,
            id,
            armed: true,
        }
    }

    /// Completes the session with `result`.
    pub(crate) fn complete(mut self, result: Result<CallResult, GrpcError>) {
        self.armed = false;
        self.sessions.complete(self.id, result);
    }
}

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        if self.armed {
            self.sessions.complete(
                self.id,
                Err(GrpcError::session_failed(format!(
                    "session {} ended before its call finished (the client runtime stopped)",
                    self.id
                ))),
            );
        }
    }
}
