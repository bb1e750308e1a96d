//! The election's calls for async callers: the same campaign, term and
//! observer as the blocking calls, run on the caller's own runtime. A
//! campaign is a semaphore wait (`semaphore/in_task.rs`): dropped before it
//! ends, it leaves nothing held or queued.

use std::time::{Duration, Instant};

use super::{read_slice, Election, Observer, RECHECK};
use crate::error::{Error, Result};
use crate::redis::server::COMMAND_TIMEOUT;
use crate::redis::Term;
use crate::wait::{Deadline, InTime};

impl Election {
    /// The async twin of [`Election::campaign`]: waits up to `timeout`
    /// (None: forever; zero: one attempt) on the calling task's runtime,
    /// holding no thread. Ok(false) when the timeout ran out. Dropped
    /// before it completes, it leaves nothing held or queued.
    ///
    /// # Errors
    /// Those of [`Election::campaign`]; [`Error::Config`] when awaited
    /// outside a tokio runtime.
    pub async fn campaign_async(&self, value: &str, timeout: Option<Duration>) -> Result<bool> {
        let deadline = Deadline::after(timeout);
        let token = self.ballot(value)?;
        let hold = self
            .semaphore
            .acquire_async(&token, value, deadline)
            .await?;
        self.take_office(hold, deadline).in_time()
    }

    /// The async twin of [`Election::resign`]. Dropped before the answer,
    /// the resignation finishes in the background.
    ///
    /// # Errors
    /// [`Error::NotLocked`] when this election does not lead.
    pub async fn resign_async(&self) -> Result<bool> {
        let hold = self.leave_office()?;
        self.report_resigned(self.semaphore.release_async(hold).await)
    }

    /// The async twin of [`Election::leader`].
    pub async fn leader_async(&self) -> Result<Option<String>> {
        let now = self.semaphore.holder_async(None).await?;
        Ok(now.value.filter(|_| now.held))
    }
}

impl Observer {
    /// Hands back `term`, returned by the last call but never delivered
    /// (its reader was cancelled as it came): the next call returns it
    /// again, before any later change.
    pub fn unread(&mut self, term: Term) {
        self.pending.push_front(term);
    }

    /// The async twin of [`Observer::next_change`]: waits until `deadline`
    /// on the calling task's runtime for the next change (the first call:
    /// the current state). Ok(None) when the deadline passed first. Dropped
    /// meanwhile, it loses no change: the next call reads on after the
    /// last change returned.
    ///
    /// # Errors
    /// [`Error::Backend`] if Redis cannot be reached; [`Error::Config`]
    /// when awaited outside a tokio runtime.
    pub async fn next_change_async(
        &mut self,
        deadline: impl Into<Deadline>,
    ) -> Result<Option<Term>> {
        let deadline = deadline.into();
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let give_up_at = deadline.at();
        loop {
            if let Some(term) = self.pending.pop_front() {
                return Ok(Some(term));
            }
            let Some(last_id) = self.last_id.clone() else {
                let now = match self.semaphore.holder_async(give_up_at).await {
                    Err(Error::Timeout { .. }) => return Ok(None),
                    now => now?,
                };
                self.start_from(now);
                continue;
            };
            if Instant::now() >= self.next_recheck {
                // Purges a leader whose lease ran out, which records its end.
                match self.semaphore.holder_async(give_up_at).await {
                    Err(Error::Timeout { .. }) => return Ok(None),
                    checked => checked?,
                };
                self.next_recheck = Instant::now() + RECHECK;
            }
            let Some(slice) = read_slice(give_up_at) else {
                return Ok(None);
            };
            let read = self
                .semaphore
                .route()
                .blocking_for_task(
                    give_up_at,
                    "observe",
                    slice + COMMAND_TIMEOUT,
                    |mut link| {
                        let read = self.read_command(&last_id, slice);
                        async move { read.query_async(&mut link).await }
                    },
                )
                .await;
            match read {
                // The deadline came while the read was unanswered.
                Err(Error::Timeout { .. }) => return Ok(None),
                read => self.take_entries(read?)?,
            }
        }
    }
}
