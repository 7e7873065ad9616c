//! When to try again and how long to wait first: exponential backoff with jitter, the
//! `Retry-After` header (delta-seconds or an HTTP date), both capped by the client's
//! `max_backoff`. Pure functions, so the policy is tested without a server.

use std::time::{Duration, SystemTime};

use rand::Rng;

/// Whether a status is worth sending the same request again for: rate limiting and
/// server-side failures (the Hub's 502/503/504 during deploys are common).
pub fn retryable_status(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// The wait before attempt `attempt + 1` (`attempt` ≥ 1 failed so far): `base · 2^(attempt-1)`,
/// capped by `max`, then drawn uniformly from its upper half so that clients cut off
/// together do not come back together.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let doubled = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
    let full = doubled.min(max);
    let half = full / 2;
    let spread = (full - half).as_nanos() as u64;
    let extra = if spread == 0 {
        0
    } else {
        rand::thread_rng().gen_range(0..=spread)
    };
    half + Duration::from_nanos(extra)
}

/// The wait a `Retry-After` value asks for, relative to `now`: delta-seconds or an HTTP
/// date (a date in the past asks for no wait). `None` when unparseable.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait before the next attempt: what the server asked for if it did, else the
/// backoff; never more than `max`.
pub fn wait(attempt: u32, asked: Option<Duration>, base: Duration, max: Duration) -> Duration {
    match asked {
        Some(d) => d.min(max),
        None => backoff(attempt, base, max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let (b, m) = (Duration::from_millis(100), Duration::from_secs(1));
        for _ in 0..50 {
            let d1 = backoff(1, b, m);
            assert!(d1 >= Duration::from_millis(50) && d1 <= b, "{d1:?}");
            let d3 = backoff(3, b, m);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d30 = backoff(30, b, m);
            assert!(d30 >= m / 2 && d30 <= m, "{d30:?}");
        }
        assert_eq!(backoff(1, Duration::ZERO, m), Duration::ZERO);
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
        let max = Duration::from_secs(5);
        let asked = Some(Duration::from_secs(60));
        assert_eq!(wait(1, asked, Duration::ZERO, max), max);
    }

    #[test]
    fn statuses() {
        assert!(retryable_status(429) && retryable_status(503));
        assert!(!retryable_status(404) && !retryable_status(401) && !retryable_status(200));
    }
}
