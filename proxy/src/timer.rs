//! hyper's HTTP/1.1 timer (the header read timeout), with tokio's timers reused.
//!
//! hyper arms a new timer for every request head it reads and drops it once the head is
//! in: on a kept-alive connection that is a timer registered with tokio's timer driver
//! (under its lock) and removed again (under its lock) per request, about 2,500
//! instructions of the sidecar's ~37,000 per request (callgrind, one kept-alive client).
//! Here a dropped timer goes back to the timer's spare list still registered, and the
//! next head's timer is a spare moved to its new deadline: a deadline later than the
//! registered one is only recorded (tokio re-files the entry if the old one comes up),
//! with no lock of the driver and no allocation. A spare whose old deadline comes up wakes
//! the task that last polled it once, for nothing; spares are few (one per connection
//! reading a head at once, at most [`SPARES`]) and their deadlines seconds away.
//!
//! The spares belong to one `ReusingTimer` (one connection builder, made inside the
//! runtime that serves its connections), not to a thread: a tokio timer is bound to the
//! runtime that made it, and one from a runtime that has shut down panics when polled.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// Spare timers kept at most; beyond it a dropped timer is deregistered.
const SPARES: usize = 1024;

type Spares = Arc<Mutex<Vec<Pin<Box<tokio::time::Sleep>>>>>;

/// A [`hyper::rt::Timer`] on tokio's timers that reuses them (see the module). Make it
/// inside the runtime whose connections it times.
#[derive(Clone, Debug, Default)]
pub struct ReusingTimer {
    spare: Spares,
}

/// One of [`ReusingTimer`]'s sleeps: a tokio timer, handed back to the spare list on drop.
struct Reused {
    inner: Option<Pin<Box<tokio::time::Sleep>>>,
    spare: Spares,
}

fn lock(spare: &Spares) -> std::sync::MutexGuard<'_, Vec<Pin<Box<tokio::time::Sleep>>>> {
    spare.lock().unwrap_or_else(|p| p.into_inner())
}

impl Timer for ReusingTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until((tokio::time::Instant::now() + duration).into_std())
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let spare = lock(&self.spare).pop();
        let inner = match spare {
            Some(mut sleep) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        Box::pin(Reused { inner: Some(inner), spare: self.spare.clone() })
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
        let mut spare = lock(&self.spare);
        if spare.len() < SPARES {
            spare.push(inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reused timer fires at its new deadline, not its old one, and a timer dropped and
    /// taken again for an earlier deadline than its registered one still fires on time.
    #[tokio::test(start_paused = true)]
    async fn a_reused_timer_fires_at_its_new_deadline() {
        let timer = ReusingTimer::default();
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
        let timer = ReusingTimer::default();
        let start = tokio::time::Instant::now();
        let mut sleep = timer.sleep(Duration::from_secs(10));
        assert!(futures_poll(&mut sleep).is_pending());
        timer.reset(&mut sleep, (start + Duration::from_secs(3)).into_std());
        sleep.await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(3));
    }

    /// Spares stay with their runtime: a timer made (and dropped) under a runtime that has
    /// shut down is never handed out under the next one (polling it there would panic).
    #[test]
    fn spares_do_not_outlive_their_runtime() {
        for _ in 0..3 {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            runtime.block_on(async {
                let timer = ReusingTimer::default();
                let mut sleep = timer.sleep(Duration::from_millis(50));
                assert!(futures_poll(&mut sleep).is_pending());
                drop(sleep);
                timer.sleep(Duration::from_millis(1)).await;
            });
        }
    }

    fn futures_poll(sleep: &mut Pin<Box<dyn Sleep>>) -> Poll<()> {
        let waker = std::task::Waker::noop();
        sleep.as_mut().poll(&mut Context::from_waker(waker))
    }
}
