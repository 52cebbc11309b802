//! The queue by state, as `GET /notifications` lists it: which index holds each state,
//! in which order it is read, and which notifications of that index a list keeps.

use super::{Cursor, JobState, JobStatus, JobView, ListFilter, WalkCursor};
use crate::lifecycle::{Index, Now, TenantIndex, HELD_OFFSET_MS, WAITING_OFFSET_MS};

/// Notifications a page examines at most (per shard); past it the page ends early with
/// a cursor, so that a filter matching nothing cannot hold a reader for long. A list of
/// one tenant reads that tenant's own index (`TenantIndex`), so what it examines is
/// that tenant's alone.
pub const MAX_SCAN: usize = 5_000;

/// One state of the queue as a list shows it. `Retrying` is `scheduled` after at least
/// one failed attempt; `Scheduled` is the rest of `scheduled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    Scheduled,
    Retrying,
    /// Scheduled and held while its endpoint is paused.
    Held,
    InFlight,
    Delivered,
    Dead,
    Cancelled,
}

impl Listed {
    pub const ALL: [Listed; 7] = [
        Listed::Scheduled,
        Listed::Retrying,
        Listed::Held,
        Listed::InFlight,
        Listed::Delivered,
        Listed::Dead,
        Listed::Cancelled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Listed::Scheduled => "scheduled",
            Listed::Retrying => "retrying",
            Listed::Held => "held",
            Listed::InFlight => "in_flight",
            Listed::Delivered => "delivered",
            Listed::Dead => "dead",
            Listed::Cancelled => "cancelled",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == raw)
    }

    /// The list a notification of `status` is in.
    pub fn of(status: &JobStatus) -> Self {
        match status.state {
            JobState::Scheduled if status.held => Listed::Held,
            JobState::Scheduled if status.attempts > 0 => Listed::Retrying,
            JobState::Scheduled => Listed::Scheduled,
            JobState::InFlight => Listed::InFlight,
            JobState::Delivered => Listed::Delivered,
            JobState::Dead => Listed::Dead,
            JobState::Cancelled => Listed::Cancelled,
        }
    }

    /// The state its notifications are in.
    pub fn state(self) -> JobState {
        match self {
            Listed::Scheduled | Listed::Retrying | Listed::Held => JobState::Scheduled,
            Listed::InFlight => JobState::InFlight,
            Listed::Delivered => JobState::Delivered,
            Listed::Dead => JobState::Dead,
            Listed::Cancelled => JobState::Cancelled,
        }
    }

    /// The index that holds its notifications, scored by the time it is ordered by: the
    /// next attempt, the lease's end, or the finish.
    pub fn index(self) -> Index {
        match self {
            Listed::Scheduled | Listed::Retrying | Listed::Held => Index::Due,
            Listed::InFlight => Index::InFlight,
            Listed::Delivered | Listed::Cancelled => Index::Done,
            Listed::Dead => Index::Dead,
        }
    }

    /// Pending ones are read soonest first, finished ones newest first.
    pub fn soonest_first(self) -> bool {
        matches!(
            self,
            Listed::Scheduled | Listed::Retrying | Listed::Held | Listed::InFlight
        )
    }

    /// The scores of its index a list with `filter` reads: the filter's times, which
    /// for held ones are kept `HELD_OFFSET_MS` later, apart from the rest of the due
    /// index (so that a list of them reads only them, oldest due first).
    pub fn scores(self, filter: &ListFilter) -> (Option<i64>, Option<i64>) {
        match self {
            Listed::Held => (
                Some(HELD_OFFSET_MS + filter.since.unwrap_or(0).max(0)),
                Some(
                    filter
                        .until
                        .map_or(WAITING_OFFSET_MS - 1, |u| HELD_OFFSET_MS + u),
                ),
            ),
            _ => (filter.since, filter.until),
        }
    }

    /// The scores a list with `filter` reads of `tenant`'s index, when it reads one
    /// (`None`: the index of every tenant's). In a tenant's pending index the in-flight
    /// ones keep the time they came due, so a tenant's in-flight list is ordered by that
    /// and reads no held or waiting ones.
    pub fn scores_in(
        self,
        filter: &ListFilter,
        tenant: Option<TenantIndex>,
    ) -> (Option<i64>, Option<i64>) {
        match (self, tenant) {
            (Listed::InFlight, Some(TenantIndex::Pending)) => {
                let until = filter.until.unwrap_or(i64::MAX).min(HELD_OFFSET_MS - 1);
                (filter.since, Some(until))
            }
            _ => self.scores(filter),
        }
    }

    /// When a walk whose first page is read at `now` begins: rounded up, as registrations
    /// and returns to `scheduled` are stamped (`Now::up`), so that a notification
    /// registered or moved back earlier in the same millisecond is in the walk. (On a
    /// Redis Cluster the walk reads one node's clock: a node whose clock is behind it
    /// leaves out what was registered on it in that lag.)
    pub fn walk_start(now: Now) -> i64 {
        now.up()
    }

    /// Whether a walk that began at `walk_from` (ms) lists `v`: it is in this list and
    /// matches `filter`, and it was in this state when the walk began. One that came
    /// back to it since (a retry, a deferral, a replay) is left out, so that a walk
    /// returns each notification at most once whatever moves meanwhile (but for one that
    /// moves back within the millisecond the walk began, which the walk counts as before).
    pub fn keeps(self, v: &JobView, filter: &ListFilter, walk_from: i64) -> bool {
        Listed::of(&v.status) == self && v.status.since() <= walk_from && filter.matches(v)
    }
}

/// A page of one list, in its order.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub items: Vec<JobView>,
    /// Where the next page starts; `None` at the end.
    pub next_cursor: Option<WalkCursor>,
    /// How many notifications the page read to find its items.
    pub examined: usize,
}

impl ListPage {
    /// A page of a walk that began at `walk_from`, whose next page starts after `next`,
    /// found among `examined` notifications.
    pub fn of_walk(
        items: Vec<JobView>,
        next: Option<Cursor>,
        walk_from: i64,
        examined: usize,
    ) -> Self {
        Self {
            items,
            next_cursor: next.map(|position| WalkCursor {
                position,
                walk_from,
            }),
            examined,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_has_a_name_it_is_parsed_from() {
        for l in Listed::ALL {
            assert_eq!(Listed::parse(l.name()), Some(l));
        }
        assert_eq!(Listed::parse("waiting"), None);
    }

    #[test]
    fn a_walk_begun_in_the_millisecond_of_a_registration_includes_it() {
        let ms = 1_800_000_000_123_i64;
        for registered in [0, 1, 400, 999] {
            let at = Now::from_micros(ms * 1000 + registered);
            let record = crate::lifecycle::transitions::register(vec![100], at, 0);
            for later in [0, 1, 999 - registered] {
                let walk = Listed::walk_start(Now::from_micros(at.micros() + later));
                assert!(
                    record.created_at <= walk,
                    "{registered} µs, walk {later} µs on"
                );
            }
        }
    }
}
