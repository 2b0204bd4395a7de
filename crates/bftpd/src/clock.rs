//! The daemon's one source of time, handed to the scheduler, the executor, the postman and the
//! API, so that schedules can be tested on a paused clock instead of by waiting.
//!
//! Every sleep of the daemon is a tokio sleep. [`Clock::system`] reads the wall clock (what
//! bftpd runs on); [`Clock::following_tokio`] moves with tokio's clock from a given wall time
//! on: under `tokio::time::pause()` it stands still until the runtime advances it (by itself
//! when every task waits on a timer), so a test sees backoff schedules and deadlines to the
//! millisecond, in milliseconds of real time.

use std::sync::Arc;
use std::time::SystemTime;

use bftp_core::Timestamp;

#[derive(Clone, Debug)]
pub struct Clock(Source);

#[derive(Clone, Debug)]
enum Source {
    System,
    Tokio {
        wall: Timestamp,
        origin: tokio::time::Instant,
    },
}

impl Clock {
    /// The wall clock.
    pub fn system() -> Clock {
        Clock(Source::System)
    }

    /// `wall` now, then advancing as tokio's clock does (for tests on a paused runtime).
    pub fn following_tokio(wall: Timestamp) -> Clock {
        Clock(Source::Tokio {
            wall,
            origin: tokio::time::Instant::now(),
        })
    }

    pub fn now(&self) -> Timestamp {
        match &self.0 {
            Source::System => Timestamp::from_system(SystemTime::now()),
            Source::Tokio { wall, origin } => wall.saturating_add(origin.elapsed()),
        }
    }

    /// Sleeps until `t` on this clock (at once if it has passed).
    pub async fn sleep_until(&self, t: Timestamp) {
        tokio::time::sleep(t.saturating_duration_since(self.now())).await
    }
}

/// The jitter draw of a retry, in -1.0..=1.0 (`RetryPolicy::delay` scales it to ±10%).
/// Random in the daemon; a test fixes it to get an exact schedule.
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

pub fn random_jitter() -> Jitter {
    Arc::new(|| {
        use rand::Rng;
        rand::thread_rng().gen_range(-1.0..=1.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_only_with_the_runtime() {
        let t0 = Timestamp(1_800_000_000_000);
        let clock = Clock::following_tokio(t0);
        assert_eq!(clock.now(), t0);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(clock.now(), t0.saturating_add(Duration::from_secs(600)));
        clock
            .sleep_until(t0.saturating_add(Duration::from_millis(600_250)))
            .await;
        assert_eq!(clock.now(), Timestamp(t0.0 + 600_250));
    }

    #[test]
    fn the_system_clock_is_the_wall_clock() {
        let before = Timestamp::from_system(SystemTime::now());
        let now = Clock::system().now();
        let after = Timestamp::from_system(SystemTime::now());
        assert!(before <= now && now <= after);
    }
}
