//! hyper's HTTP/1.1 timer (the header read timeout), with tokio's timers reused.
//!
//! hyper arms a new timer for every request head it reads and drops it once the head is
//! in: on a kept-alive connection that is a timer registered with tokio's timer driver
//! (under its lock) and removed again (under its lock) per request, about 2,500
//! instructions of the sidecar's ~37,000 per request (callgrind, one kept-alive client).
//! Here a dropped timer goes back to a per-thread spare list still registered, and the
//! next head's timer is a spare moved to its new deadline: a deadline later than the
//! registered one is only recorded (tokio re-files the entry if the old one comes up),
//! with no lock and no allocation. A spare whose old deadline comes up wakes the task
//! that last polled it once, for nothing; spares are few (one per connection reading a
//! head at once, at most [`SPARES`] per thread) and their deadlines seconds away.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// Spare timers kept per thread at most; beyond it a dropped timer is deregistered.
const SPARES: usize = 1024;

thread_local! {
    static SPARE: RefCell<Vec<Pin<Box<tokio::time::Sleep>>>> = const { RefCell::new(Vec::new()) };
}

/// A [`hyper::rt::Timer`] on tokio's timers that reuses them (see the module).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReusingTimer;

/// One of [`ReusingTimer`]'s sleeps: a tokio timer, handed back to the spare list on drop.
struct Reused {
    inner: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Timer for ReusingTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until((tokio::time::Instant::now() + duration).into_std())
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        // `try_with`: a timer asked for while the thread's locals are being torn down
        // gets a new one.
        let spare = SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten();
        let inner = match spare {
            Some(mut sleep) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        Box::pin(Reused { inner: Some(inner) })
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Reused>() {
            Some(reused) => {
                if let Some(inner) = reused.get_mut().inner.as_mut() {
                    inner.as_mut().reset(tokio::time::Instant::from_std(new_deadline));
                }
            }
            None => *sleep = self.sleep_until(new_deadline),
        }
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

impl Future for Reused {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.inner.as_mut() {
            Some(inner) => inner.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

impl Sleep for Reused {}

impl Drop for Reused {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else { return };
        let _ = SPARE.try_with(|s| {
            let mut spare = s.borrow_mut();
            if spare.len() < SPARES {
                spare.push(inner);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reused timer fires at its new deadline, not its old one, and a timer dropped and
    /// taken again for an earlier deadline than its registered one still fires on time.
    #[tokio::test(start_paused = true)]
    async fn a_reused_timer_fires_at_its_new_deadline() {
        let timer = ReusingTimer;
        let start = tokio::time::Instant::now();
        let first = timer.sleep(Duration::from_secs(10));
        // Registered with the driver, as hyper's poll of a pending head read does.
        let mut first = first;
        assert!(futures_poll(&mut first).is_pending());
        drop(first);
        let second = timer.sleep(Duration::from_secs(30));
        second.await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(30));
        // The spare now sits at 30 s; one for 5 s from here is earlier than that.
        let start = tokio::time::Instant::now();
        timer.sleep(Duration::from_secs(5)).await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(5));
    }

    /// `reset` moves a live timer, earlier or later.
    #[tokio::test(start_paused = true)]
    async fn reset_moves_a_live_timer() {
        let timer = ReusingTimer;
        let start = tokio::time::Instant::now();
        let mut sleep = timer.sleep(Duration::from_secs(10));
        assert!(futures_poll(&mut sleep).is_pending());
        timer.reset(&mut sleep, (start + Duration::from_secs(3)).into_std());
        sleep.await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(3));
    }

    fn futures_poll(sleep: &mut Pin<Box<dyn Sleep>>) -> Poll<()> {
        let waker = std::task::Waker::noop();
        sleep.as_mut().poll(&mut Context::from_waker(waker))
    }
}
